"""Pure planning: output records in, one Lua-script invocation (KEYS + ARGV) out.

The projector must apply a whole batch and the new applied offsets in one atomic
step, and every key a Lua script touches must be passed in KEYS. So the Python side
turns each decoded record into a short list of primitive operations on numbered
keys, and `apply.lua` runs them only for records whose offset is greater than the
partition's applied offset. Keeping the model here (not in Lua) makes it testable
without Redis and keeps the script a small, generic interpreter.

Previews need care because `turnledger.previews` and `turnledger.committed` are
separate topics consumed independently: a PreviewUpdated can be projected *after*
the CommittedTurn of its operation. The preview hash therefore keeps a marker
(`~committed`) and the script refuses the updates it covers, so the final projection
does not depend on how the topics interleave. A retraction travels on the previews
topic itself, in order with the previews: it drops its generation's previews, and a
preview after it is a new read of that generation (a replay under the same key).

A preview record carries only the text appended at its offset (`PreviewUpdated.text_offset`);
the projection keeps the whole text of each block (`pappend`): field `<generation>:<block>` holds
the preview's JSON without its text (`length`: code points held), field `<generation>:<block>:text`
the text. A record appends only at exactly the length held; one that ends at or before it was
applied already, one at offset 0 replaces the text, and one beyond it follows a record this
projection never saw (a gap: topic retention, a projection started mid-stream): it is counted
(`preview_gaps`) and neither stored nor announced, so what is shown is always a true prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnledger.model.base import Frozen
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    ManifestIssued,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
)
from turnledger.projections.keys import ProjectionKeys

DEFAULT_REJECTIONS_CAP = 10_000
DEFAULT_EVENTS_CAP = 5_000
"""Approximate length (XADD MAXLEN ~) of each conversation's live event stream."""
EVENT_TYPES = ("committed", "preview", "retracted", "status", "quarantined", "rejected")
COMMITTED_MARKER = "~committed"
PREVIEW_TEXT_SUFFIX = ":text"
"""A preview's text field is its `<generation>:<block>` field with this suffix."""

Op = list[Any]
"""[name, key_index, *string args]; names are the ones `apply.lua` interprets."""


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """One output-topic record as the projector saw it; `record` is None when it did not decode."""

    stream: str
    topic: str
    partition: int
    offset: int
    record: Frozen | None
    error: str | None = None

    @property
    def source(self) -> str:
        return f"{self.topic}:{self.partition}"


@dataclass
class BatchPlan:
    """KEYS and the JSON plan of one script call. KEYS[1] is always the offsets hash."""

    keys: list[str]
    groups: list[list[Any]] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def start(cls, projection_keys: ProjectionKeys) -> BatchPlan:
        plan = cls(keys=[])
        plan.key(projection_keys.offsets)
        return plan

    def key(self, name: str) -> int:
        """1-based KEYS index of `name`, registering it once."""
        index = self._index.get(name)
        if index is None:
            self.keys.append(name)
            index = self._index[name] = len(self.keys)
        return index

    def add(self, source: str, offset: int, ops: list[Op]) -> None:
        self.groups.append([source, str(offset), ops])

    @property
    def argv(self) -> str:
        return _json(self.groups)

    def __len__(self) -> int:
        return len(self.groups)


class Planner:
    """Maps output records onto operations; one instance per projection (key prefix)."""

    def __init__(
        self,
        keys: ProjectionKeys,
        rejections_cap: int = DEFAULT_REJECTIONS_CAP,
        events_cap: int = DEFAULT_EVENTS_CAP,
    ) -> None:
        self.keys = keys
        self.rejections_cap = rejections_cap
        self.events_cap = events_cap

    def _event(
        self, k: Any, conversation: str, kind: str, payload: dict[str, Any], *, if_pset: bool = False
    ) -> Op:
        """Append a typed live event to the conversation's stream (only if the group applies; with
        `if_pset`, only if the preceding `pappend` wrote)."""
        return [
            "xadd",
            k(self.keys.events(conversation)),
            str(self.events_cap),
            "1" if if_pset else "0",
            "type",
            kind,
            "data",
            _json(payload),
        ]

    def plan(self, records: Iterable[DecodedRecord]) -> BatchPlan:
        plan = BatchPlan.start(self.keys)
        for item in records:
            plan.add(item.source, item.offset, self.ops(plan, item))
        return plan

    def ops(self, plan: BatchPlan, item: DecodedRecord) -> list[Op]:
        record, k = item.record, plan.key
        if record is None:
            return [["hincr", k(self.keys.stats), f"undecodable:{item.stream}", "1"]]
        if isinstance(record, CommittedTurn):
            return self._committed(k, record)
        if isinstance(record, ManifestIssued):
            return self._manifest(k, record)
        if isinstance(record, DispatchDecision):
            return self._decision(k, record)
        if isinstance(record, PreviewUpdated):
            return self._preview(k, record)
        if isinstance(record, PreviewRetracted):
            retracted = {
                "operationId": record.operation_id,
                "attemptGeneration": record.attempt_generation,
                "reason": record.reason,
                "occurredAtMs": record.occurred_at_ms,
            }
            return [
                [
                    "pretract",
                    k(self.keys.previews(record.conversation_id, record.operation_id)),
                    str(record.attempt_generation),
                ],
                ["hincr", k(self.keys.stats), "preview_retractions", "1"],
                self._event(k, record.conversation_id, "retracted", retracted),
            ]
        if isinstance(record, Quarantined):
            body = record.to_json_dict()
            return [
                ["rpush", k(self.keys.quarantine(record.conversation_id)), _json(body)],
                ["hincr", k(self.keys.stats), f"quarantined:{record.reason}", "1"],
                self._event(k, record.conversation_id, "quarantined", body),
            ]
        if isinstance(record, Rejected):
            body = record.to_json_dict()
            ops = [
                ["zadd", k(self.keys.rejections), str(record.occurred_at_ms), _json(body)],
                ["ztrim", k(self.keys.rejections), str(self.rejections_cap)],
                ["hincr", k(self.keys.stats), f"rejected:{record.reason}", "1"],
            ]
            if record.conversation_id is not None:
                ops.append(self._event(k, record.conversation_id, "rejected", body))
            return ops
        # A record type this stream does not project (e.g. a newer output type): counted, skipped.
        return [["hincr", k(self.keys.stats), f"ignored:{type(record).__name__}", "1"]]

    def _committed(self, k: Any, turn: CommittedTurn) -> list[Op]:
        conv = turn.conversation_id
        history, order = k(self.keys.history(conv)), k(self.keys.history_order(conv))
        ops: list[Op] = []
        for block in turn.blocks:
            ops.append(["hset", history, block.id, _json(block.to_json_dict())])
            ops.append(["zadd", order, str(block.ordering), block.id])
        ops.append(
            [
                "hset",
                k(self.keys.conversation(conv)),
                "revision",
                str(turn.revision),
                "updated_at_ms",
                str(turn.occurred_at_ms),
            ]
        )
        ops.append(["hincr", k(self.keys.conversation(conv)), "turns", "1"])
        if turn.operation_id is not None:
            ops.append(["pcommit", k(self.keys.previews(conv, turn.operation_id))])
        ops.append(["zmax", k(self.keys.conversations), str(turn.occurred_at_ms), conv])
        committed = {
            "revision": turn.revision,
            "turnId": turn.turn_id,
            "operationId": turn.operation_id,
            "attemptGeneration": turn.attempt_generation,
            "blocks": [block.to_json_dict() for block in turn.blocks],
            "occurredAtMs": turn.occurred_at_ms,
        }
        ops.append(self._event(k, conv, "committed", committed))
        return ops

    def _manifest(self, k: Any, issued: ManifestIssued) -> list[Op]:
        m = issued.manifest
        return [
            [
                "hset",
                k(self.keys.operation(m.conversation_id, m.operation_id)),
                *_pairs(
                    conversation=m.conversation_id,
                    manifest_digest=m.manifest_digest,
                    manifest_revision=m.conversation_revision,
                    request_digest=m.request_digest,
                    adapter=m.adapter,
                    provider=m.provider,
                    model_revision=m.model_revision,
                ),
            ],
            ["sadd", k(self.keys.operations(m.conversation_id)), m.operation_id],
            ["sadd", k(self.keys.operation_conversations(m.operation_id)), m.conversation_id],
        ]

    def _decision(self, k: Any, d: DispatchDecision) -> list[Op]:
        """Mirror the operation as the decision describes it; a refused CAS leaves `state` unchanged
        because the fold reports the operation's current state in it, and is counted as a conflict."""
        op_key = k(self.keys.operation(d.conversation_id, d.operation_id))
        present = {
            "conversation": d.conversation_id,
            "state": d.state,
            "generation": d.attempt_generation,
            "conversation_revision": d.conversation_revision,
            "cancel_generation": d.cancel_generation,
            "last_accepted": int(d.accepted),
            "updated_at_ms": d.occurred_at_ms,
            "last_event_id": d.source_event_id,
        }
        optional = {
            "previous_state": d.previous_state,
            "reason": d.reason,
            "detail": d.detail or None,
            "idempotency_key": d.idempotency_key,
            "manifest_digest": d.manifest_digest,
            "response_handle": d.response_handle,
        }
        present.update({name: value for name, value in optional.items() if value is not None})
        ops: list[Op] = [
            ["hset", op_key, *_pairs(**present)],
            ["hsetnx", op_key, "created_at_ms", str(d.occurred_at_ms)],
            ["hincr", op_key, "decisions", "1"],
            ["sadd", k(self.keys.operations(d.conversation_id)), d.operation_id],
            ["sadd", k(self.keys.operation_conversations(d.operation_id)), d.conversation_id],
        ]
        absent = [name for name, value in optional.items() if value is None]
        if absent:
            ops.append(["hdel", op_key, *absent])
        if not d.accepted:
            ops.append(["hincr", op_key, "conflicts", "1"])
            ops.append(["hincr", k(self.keys.stats), f"conflicts:{d.reason}", "1"])
        ops.append(["zmax", k(self.keys.conversations), str(d.occurred_at_ms), d.conversation_id])
        status = {
            "operationId": d.operation_id,
            "state": d.state,
            "previousState": d.previous_state,
            "accepted": d.accepted,
            "reason": d.reason,
            "detail": d.detail,
            "attemptGeneration": d.attempt_generation,
            "occurredAtMs": d.occurred_at_ms,
        }
        ops.append(self._event(k, d.conversation_id, "status", status))
        return ops

    def _preview(self, k: Any, p: PreviewUpdated) -> list[Op]:
        end = p.text_end
        meta = {
            "attemptGeneration": p.attempt_generation,
            "blockIndex": p.block_index,
            "length": end,
            "throughSequence": p.through_sequence,
            "occurredAtMs": p.occurred_at_ms,
        }
        live = {"operationId": p.operation_id, "revocable": True, "text": p.text, "textOffset": p.text_offset}
        return [
            [
                "pappend",
                k(self.keys.previews(p.conversation_id, p.operation_id)),
                f"{p.attempt_generation}:{p.block_index}",
                str(p.text_offset),
                str(end),
                p.text,
                _json(meta),
                k(self.keys.stats),
            ],
            self._event(k, p.conversation_id, "preview", {**live, **meta}, if_pset=True),
            ["sadd", k(self.keys.operations(p.conversation_id)), p.operation_id],
        ]


def _pairs(**fields: Any) -> list[str]:
    out: list[str] = []
    for name, value in fields.items():
        out.extend((name, str(value)))
    return out


def plan_batch(keys: ProjectionKeys, records: Sequence[DecodedRecord]) -> BatchPlan:
    return Planner(keys).plan(records)
