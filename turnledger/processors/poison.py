"""A fallback `on_poison` hook for folds that do not bring their own.

The dispatch fold is expected to supply `on_poison` emitting its Avro `Rejected`
record. This fallback exists so that any fold can be run (tests, benchmarks, new
folds) without a poisoned record ever being dropped silently: it writes a small
canonical JSON document with the source coordinates to the rejections topic.
"""

from __future__ import annotations

import orjson

from turnledger.model.reasons import ReasonCode
from turnledger.processors.contract import PoisonHook
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics


def json_poison_hook(topics: Topics) -> PoisonHook:
    def on_poison(record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        body = {
            "reason": ReasonCode.UNSPECIFIED.value,
            "detail": f"{type(exc).__name__}: {exc}"[:2000],
            "source": {"topic": record.topic, "partition": record.partition, "offset": record.offset},
        }
        return [
            OutputRecord(
                topic=topics.rejections,
                key=record.key,
                value=orjson.dumps(body, option=orjson.OPT_SORT_KEYS),
            )
        ]

    return on_poison
