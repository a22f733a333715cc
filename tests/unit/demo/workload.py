"""A small clean workload for the demo's checks (`turnledger/demo/checks.py`), and the means to seed
violations into it.

The records are the pure fold's own (tests/unit/dispatch/scenario.py), put in an in-memory `Evidence` on
the stream the engine writes each to; the provider requests are those a faithful worker sends (the
manifest's own request bytes under the CAS's idempotency key); the projection holds what a faithful
projector would. Three conversations, each a situation the checks must not count:

- `a`: a tool call (op-1) committed with its `ToolCallReady`, its result submitted, then a text answer
  (op-2) committed; op-1's request sent twice (a retry of the same bytes).
- `b`: a text answer cancelled while streaming (its preview retracted), its late deltas quarantined
  AFTER_CANCEL; its handle `resp_b1` resumed (GET) and cancelled (POST .../cancel).
- `c`: a turn refused for two reasons (two orphaned tool results: two `Rejected` of one event), and the
  first turn delivered twice (committed once, refused once as DUPLICATE_TURN).

Event ids are unique across the conversations (`e1`.., `e101`.., `e201`..), as the client's uuids are.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from tests.unit.dispatch.scenario import Conversation, text_stream, tool_stream
from turnledger.dispatch.engine import STREAM_OF
from turnledger.fake_provider import ReceivedRequest
from turnledger.model.base import Frozen
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    IngressEvent,
    ManifestIssued,
    Quarantined,
)
from turnledger.model.graph import Block
from turnledger.projections.reader import OperationStatus, Preview
from turnledger.replay.evidence import Evidence, Raw

S = DispatchState
PARIS = '{"city":"Paris"}'


def _tool_then_text() -> Conversation:
    c = Conversation("a")
    c.user("weather in Paris?")
    c.dispatch_to_streaming("op-1", handle="msg_a1")
    c.deltas(tool_stream([("call_1", "get_weather", ['{"city":', '"Paris"}'])], handle="msg_a1"))
    c.tool_results(("call_1", "get_weather", PARIS))
    c.dispatch_to_streaming("op-2", handle="msg_a2")
    c.deltas(text_stream(["sunny"], handle="msg_a2"), op="op-2")
    return c


def _cancelled() -> Conversation:
    c = Conversation("b", _ids=itertools.count(101))
    c.user("tell me a story")
    c.dispatch_to_streaming(handle="resp_b1")
    stream = text_stream(["once upon a time"], handle="resp_b1")
    c.deltas(stream[:3])  # a preview
    c.cancel("op-1")
    c.deltas(stream[3:])  # quarantined AFTER_CANCEL
    return c


def _refused() -> Conversation:
    c = Conversation("c", _ids=itertools.count(201))
    c.user("hello")
    c.tool_results(("call_9", "get_weather", '{"city":"Oslo"}'), ("call_8", "get_weather", '{"city":"Rome"}'))
    c.apply(c.events[0])
    return c


def conversations() -> list[Conversation]:
    return [_tool_then_text(), _cancelled(), _refused()]


def stream_of(record: Frozen) -> str:
    return "ingress" if isinstance(record, IngressEvent) else STREAM_OF[type(record)].value


def add(evidence: Evidence, *records: Frozen) -> Evidence:
    """Append each record to its stream, after what is there."""
    for record in records:
        stream = evidence.raw.setdefault(stream_of(record), [])
        stream.append(Raw(0, len(stream), None, b"", record))
    return evidence


def evidence_of(*conversations: Conversation) -> Evidence:
    evidence = Evidence()
    for c in conversations:
        add(evidence, *c.events, *c.outputs)
    return evidence


def workload() -> Evidence:
    return evidence_of(*conversations())


def without(evidence: Evidence, record: Frozen) -> Evidence:
    """The evidence with this record (found by equality, every copy) taken off its stream."""
    stream = stream_of(record)
    evidence.raw[stream] = [r for r in evidence.raw[stream] if r.record != record]
    return evidence


def of(evidence: Evidence, cls: type[Frozen], **fields: Any) -> list[Any]:
    """The records of a type whose fields have these values, in stream order."""
    stream = "ingress" if issubclass(cls, IngressEvent) else STREAM_OF[cls].value
    return [r for r in evidence.of(stream, cls) if all(getattr(r, k) == v for k, v in fields.items())]


def one(evidence: Evidence, cls: type[Frozen], **fields: Any) -> Any:
    found = of(evidence, cls, **fields)
    assert len(found) == 1, found
    return found[0]


def last_decision(evidence: Evidence, conversation: str, op: str) -> DispatchDecision:
    decisions: list[DispatchDecision] = of(
        evidence, DispatchDecision, conversation_id=conversation, operation_id=op
    )
    return decisions[-1]


def accepted_attempt(evidence: Evidence, conversation: str, op: str) -> DispatchDecision:
    attempt: DispatchDecision = one(
        evidence,
        DispatchDecision,
        conversation_id=conversation,
        operation_id=op,
        state=S.DISPATCHING,
        accepted=True,
    )
    return attempt


def manifest_issued(evidence: Evidence, conversation: str, op: str) -> ManifestIssued:
    found: list[ManifestIssued] = [
        m
        for m in of(evidence, ManifestIssued)
        if (m.manifest.conversation_id, m.manifest.operation_id) == (conversation, op)
    ]
    assert len(found) == 1, found
    return found[0]


def post(request_id: str, key: str | None, body: bytes, path: str = "/v1/messages") -> ReceivedRequest:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["idempotency-key"] = key
    return ReceivedRequest(request_id, "POST", path, headers, body)


def post_of(evidence: Evidence, request_id: str, conversation: str, op: str) -> ReceivedRequest:
    """The request a faithful worker sends for the operation's accepted attempt."""
    body = manifest_issued(evidence, conversation, op).manifest.request_body.encode("utf-8")
    return post(request_id, accepted_attempt(evidence, conversation, op).idempotency_key, body)


def get(request_id: str, path: str) -> ReceivedRequest:
    return ReceivedRequest(request_id, "GET", path, {}, b"")


def requests_of(evidence: Evidence) -> list[ReceivedRequest]:
    """a/op-1 twice (a retry of the same bytes), a/op-2, b/op-1, b's handle resumed and cancelled."""
    return [
        post_of(evidence, "req_000001", "a", "op-1"),
        post_of(evidence, "req_000002", "a", "op-1"),
        post_of(evidence, "req_000003", "a", "op-2"),
        post_of(evidence, "req_000004", "b", "op-1"),
        get("req_000005", "/v1/responses/resp_b1"),
        post("req_000006", None, b"", "/v1/responses/resp_b1/cancel"),
    ]


class Projection:
    """Stands in for `ProjectionReader`: the five reads `check_projections` makes, answered from dicts."""

    def __init__(self) -> None:
        self.blocks: dict[str, list[Block]] = {}
        self.revisions: dict[str, int] = {}
        self.operations: dict[tuple[str, str], OperationStatus] = {}
        self.current_previews: dict[str, list[Preview]] = {}
        self.quarantined: dict[str, list[Quarantined]] = {}
        self.asked: list[tuple[str, str]] = []
        """(read, conversation) of every read, in order."""

    async def history(self, conversation: str) -> list[Block]:
        self.asked.append(("history", conversation))
        return list(self.blocks.get(conversation, []))

    async def revision(self, conversation: str) -> int | None:
        self.asked.append(("revision", conversation))
        return self.revisions.get(conversation)

    async def operation(self, conversation: str, op_id: str) -> OperationStatus | None:
        self.asked.append(("operation", conversation))
        return self.operations.get((conversation, op_id))

    async def previews(self, conversation: str) -> list[Preview]:
        self.asked.append(("previews", conversation))
        return list(self.current_previews.get(conversation, []))

    async def quarantine(self, conversation: str) -> list[Quarantined]:
        self.asked.append(("quarantine", conversation))
        return list(self.quarantined.get(conversation, []))


def status(conversation: str, op: str, state: str, generation: int) -> OperationStatus:
    return OperationStatus(op, conversation, state, None, generation, None, None, None, None, None, {})


def preview(conversation: str, op: str, text: str = "once") -> Preview:
    return Preview(conversation, op, 1, 0, text, 2, 1_000)


def projection_of(evidence: Evidence) -> Projection:
    """What a faithful projector holds for the evidence: every committed block, the last revision, each
    operation's last decision, no preview, the quarantine topic."""
    projection = Projection()
    blocks: dict[str, list[Block]] = defaultdict(list)
    for turn in evidence.of("committed", CommittedTurn):
        blocks[turn.conversation_id].extend(turn.blocks)
        projection.revisions[turn.conversation_id] = turn.revision
    projection.blocks = dict(blocks)
    for d in evidence.of("manifests", DispatchDecision):
        key = (d.conversation_id, d.operation_id)
        projection.operations[key] = status(*key, d.state.value, d.attempt_generation)
    quarantined: dict[str, list[Quarantined]] = defaultdict(list)
    for q in evidence.of("quarantine", Quarantined):
        quarantined[q.conversation_id].append(q)
    projection.quarantined = dict(quarantined)
    return projection
