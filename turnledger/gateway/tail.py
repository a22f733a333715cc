"""Moved to `turnledger.kafka.tail` (the one Kafka I/O seam); kept as a re-export so that branches
written against the old path still import. New code imports from `turnledger.kafka`."""

from turnledger.kafka.tail import OnBatch, decode_record, tail_topic

__all__ = ["OnBatch", "decode_record", "tail_topic"]
