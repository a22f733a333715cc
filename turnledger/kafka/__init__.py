"""The one Kafka I/O seam: every aiokafka client turnledger starts is built and started here.

`clients` builds read_committed consumers, transactional producers and admin clients with the
settings every layer shares, starts them riding out outages (`turnledger.retry`), and maps
aiokafka's errors to `KafkaUnavailableError`; `positions` positions freshly assigned consumers
without racing their offset reset; `reading` turns fetched messages into `SourceRecord`s and
reads partitions to their last stable offset; `tail` follows a topic as decoded records.
The record types themselves live in `turnledger.records`, which the pure core also uses.
"""
