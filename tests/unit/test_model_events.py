"""The ingress and output records of `model/events.py`: their names, words, defaults and refusals.

Promise 6 ("bad input gets a clear, typed rejection") starts here: a record that does not fit its
model is refused by pydantic with a typed error naming the wire field, and a record that leaves an
optional field out takes the default its docstring documents (the fold reads those defaults: a lease
of 30 s, a deadline 10 minutes after the request, an empty worker id that any worker matches).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from turnledger.model import events
from turnledger.model.events import (
    CancelRequested,
    DispatchRequested,
    DispatchSent,
    PreviewUpdated,
    StreamEnded,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.reasons import ReasonCode

HEAD = {"conversationId": "c", "eventId": "e", "occurredAtMs": 7}
"""The three fields every ingress event carries, on the wire (camelCase)."""
DUMPED_HEAD = {"conversation_id": "c", "event_id": "e", "occurred_at_ms": 7}
ATTEMPT = {"operationId": "o", "attemptGeneration": 2}
DUMPED_ATTEMPT = {"operation_id": "o", "attempt_generation": 2}
DELTA = {"responseHandle": "h", "generation": 2, "blockIndex": 0, "deltaSequence": 0, "type": "text_delta"}


def test_the_record_tables_name_every_record_once_in_order() -> None:
    """The codec maps these tables by record name: a record left out could not be read or written."""
    assert [t.__name__ for t in events.INGRESS_EVENT_TYPES] == [
        "TurnSubmitted",
        "DispatchRequested",
        "DispatchAttempt",
        "DispatchSent",
        "HandleBound",
        "StreamDeltas",
        "StreamEnded",
        "CancelRequested",
        "RecoveryReported",
        "ResumeStarted",
        "AttemptTerminated",
        "ReplayStarted",
        "LeaseRenewed",
        "ExpiryClaimed",
    ]
    assert [t.__name__ for t in events.OUTPUT_RECORD_TYPES] == [
        "CommittedTurn",
        "ManifestIssued",
        "DispatchDecision",
        "ToolCallReady",
        "PreviewUpdated",
        "PreviewRetracted",
        "Quarantined",
        "Rejected",
        "ConversationSnapshot",
    ]


def test_states_and_outcomes_are_the_wire_words() -> None:
    """The Avro enums' symbols: a state read back from the changelog or a topic is one of these."""
    assert [s.value for s in events.DispatchState] == [
        "WAITING",
        "REJECTED",
        "PAUSED",
        "PREPARED",
        "DISPATCHING",
        "SENT",
        "STREAMING",
        "COMMITTED",
        "UNKNOWN",
        "CANCELLED",
    ]
    assert [o.value for o in events.StreamOutcome] == ["completed", "disconnected", "provider_error"]


BLOCK = {"id": "b0", "role": "user", "kind": "text", "trustLabel": "user"}
DUMPED_BLOCK = {
    "id": "b0",
    "role": "user",
    "kind": "text",
    "trust_label": "user",
    "status": "committed",
    "text": None,
    "call_id": None,
    "tool_name": None,
    "arguments": None,
    "argument_digest": None,
    "generation": None,
    "result_status": None,
    "signature": None,
    "signed_by": None,
    "item_id": None,
}

INGRESS_DEFAULTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "TurnSubmitted",
        {"turnId": "t", "blocks": [BLOCK]},
        {"turn_id": "t", "blocks": (DUMPED_BLOCK,), "expected_revision": None},
    ),
    (
        "DispatchRequested",
        {"operationId": "o", "adapter": "a", "provider": "p", "modelRevision": "m", "maxOutputTokens": 5},
        {
            "operation_id": "o",
            "adapter": "a",
            "provider": "p",
            "model_revision": "m",
            "tools": (),
            "max_output_tokens": 5,
            "policy": {},
            "settle_within_ms": None,
        },
    ),
    (
        "DispatchAttempt",
        {"operationId": "o", "expectedRevision": 3, "expectedCancelGeneration": 0, "workerId": "w"},
        {
            "operation_id": "o",
            "expected_revision": 3,
            "expected_cancel_generation": 0,
            "worker_id": "w",
            "lease_ms": 30_000,
            "replayable": False,
        },
    ),
    ("DispatchSent", ATTEMPT, DUMPED_ATTEMPT),
    (
        "HandleBound",
        {**ATTEMPT, "responseHandle": "h", "manifestDigest": "d"},
        {**DUMPED_ATTEMPT, "response_handle": "h", "manifest_digest": "d", "resumable": False},
    ),
    (
        "StreamEnded",
        {**ATTEMPT, "outcome": "disconnected"},
        {
            **DUMPED_ATTEMPT,
            "outcome": "disconnected",
            "resumable": False,
            "last_delta_sequence": -1,
            "detail": None,
        },
    ),
    (
        "CancelRequested",
        {},
        {"operation_id": None, "reason": "", "worker_gave_up": False, "reason_code": None},
    ),
    ("RecoveryReported", {**ATTEMPT, "workerId": "w"}, {**DUMPED_ATTEMPT, "worker_id": "w"}),
    (
        "ResumeStarted",
        {**ATTEMPT, "responseHandle": "h"},
        {**DUMPED_ATTEMPT, "response_handle": "h", "worker_id": ""},
    ),
    ("AttemptTerminated", ATTEMPT, {**DUMPED_ATTEMPT, "worker_id": ""}),
    ("ReplayStarted", {**ATTEMPT, "workerId": "w"}, {**DUMPED_ATTEMPT, "worker_id": "w"}),
    ("LeaseRenewed", {**ATTEMPT, "workerId": "w"}, {**DUMPED_ATTEMPT, "worker_id": "w"}),
    ("ExpiryClaimed", {**ATTEMPT, "workerId": "w"}, {**DUMPED_ATTEMPT, "worker_id": "w"}),
]


@pytest.mark.parametrize(("name", "given", "dumped"), INGRESS_DEFAULTS, ids=[c[0] for c in INGRESS_DEFAULTS])
def test_an_ingress_event_with_only_its_required_fields_takes_the_documented_defaults(
    name: str, given: dict[str, Any], dumped: dict[str, Any]
) -> None:
    """What the fold reads when a producer leaves an optional field out (or an older schema had none)."""
    event = getattr(events, name).model_validate({**HEAD, **given})
    assert event.model_dump() == {**DUMPED_HEAD, **dumped}


def test_stream_deltas_keep_their_deltas_in_stream_order() -> None:
    """StreamDeltas has no default; its deltas are a tuple in the order given."""
    second = {**DELTA, "deltaSequence": 1, "text": "b"}
    event = events.StreamDeltas.model_validate(
        {**HEAD, **ATTEMPT, "deltas": [{**DELTA, "text": "a"}, second]}
    )
    assert [(d.delta_sequence, d.text) for d in event.deltas] == [(0, "a"), (1, "b")]
    assert type(event.deltas) is tuple


OUTPUT_DEFAULTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "CommittedTurn",
        {
            "conversationId": "c",
            "revision": 1,
            "turnId": "t",
            "sourceEventId": "e",
            "blocks": [],
            "occurredAtMs": 7,
        },
        {
            "conversation_id": "c",
            "revision": 1,
            "turn_id": "t",
            "source_event_id": "e",
            "operation_id": None,
            "attempt_generation": None,
            "blocks": (),
            "occurred_at_ms": 7,
        },
    ),
    (
        "DispatchDecision",
        {
            "conversationId": "c",
            "operationId": "o",
            "state": "SENT",
            "conversationRevision": 3,
            "cancelGeneration": 1,
            "sourceEventId": "e",
            "occurredAtMs": 7,
        },
        {
            "conversation_id": "c",
            "operation_id": "o",
            "state": "SENT",
            "previous_state": None,
            "accepted": True,
            "reason": None,
            "detail": "",
            "conversation_revision": 3,
            "cancel_generation": 1,
            "attempt_generation": 0,
            "idempotency_key": None,
            "manifest_digest": None,
            "response_handle": None,
            "source_event_id": "e",
            "occurred_at_ms": 7,
            "lease_owner": None,
            "lease_expires_at_ms": None,
            "deadline_at_ms": None,
            "attempt_terminated": False,
        },
    ),
    (
        "ToolCallReady",
        {
            "conversationId": "c",
            "revision": 3,
            **ATTEMPT,
            "blockId": "b",
            "callId": "k",
            "toolName": "n",
            "arguments": "{}",
            "argumentDigest": "d",
            "occurredAtMs": 7,
        },
        {
            "conversation_id": "c",
            "revision": 3,
            **DUMPED_ATTEMPT,
            "block_id": "b",
            "call_id": "k",
            "tool_name": "n",
            "arguments": "{}",
            "argument_digest": "d",
            "schema_digest": None,
            "occurred_at_ms": 7,
        },
    ),
    (
        "PreviewUpdated",
        {
            "conversationId": "c",
            **ATTEMPT,
            "blockIndex": 0,
            "text": "hi",
            "throughSequence": 4,
            "occurredAtMs": 7,
        },
        {
            "conversation_id": "c",
            **DUMPED_ATTEMPT,
            "block_index": 0,
            "text": "hi",
            "through_sequence": 4,
            "occurred_at_ms": 7,
            "text_offset": 0,
        },
    ),
    (
        "Quarantined",
        {"conversationId": "c", **ATTEMPT, "reason": "STALE_GENERATION", "eventType": "StreamDeltas"}
        | {"eventId": "e", "occurredAtMs": 7},
        {
            "conversation_id": "c",
            **DUMPED_ATTEMPT,
            "reason": "STALE_GENERATION",
            "event_type": "StreamDeltas",
            "event_id": "e",
            "detail": "",
            "occurred_at_ms": 7,
        },
    ),
    (
        "Rejected",
        {"reason": "UNSPECIFIED"},
        {
            "conversation_id": None,
            "operation_id": None,
            "reason": "UNSPECIFIED",
            "detail": "",
            "event_type": None,
            "event_id": None,
            "source_topic": None,
            "source_partition": None,
            "source_offset": None,
            "occurred_at_ms": 0,
        },
    ),
]


@pytest.mark.parametrize(("name", "given", "dumped"), OUTPUT_DEFAULTS, ids=[c[0] for c in OUTPUT_DEFAULTS])
def test_an_output_record_with_only_its_required_fields_takes_the_documented_defaults(
    name: str, given: dict[str, Any], dumped: dict[str, Any]
) -> None:
    """A reader of an output topic (projections, the gateway) sees these for the fields left out."""
    record = getattr(events, name).model_validate(given)
    assert record.model_dump() == dumped


def _request(**more: Any) -> DispatchRequested:
    required = {
        "operationId": "o",
        "adapter": "a",
        "provider": "p",
        "modelRevision": "m",
        "maxOutputTokens": 5,
    }
    return DispatchRequested.model_validate({**HEAD, **required, **more})


def test_a_request_without_a_bound_must_be_final_ten_minutes_after_it() -> None:
    """`deadline_at_ms`: the request's time plus its bound, or plus 600,000 ms when it sets none; a
    bound of 0 is a bound (the deadline is the request's own time), not "none"."""
    assert _request().deadline_at_ms == 7 + 600_000 == 7 + events.DEFAULT_SETTLE_WITHIN_MS
    assert _request(settleWithinMs=5).deadline_at_ms == 12
    assert _request(settleWithinMs=0).deadline_at_ms == 7


def test_each_request_left_without_a_policy_has_its_own_empty_one() -> None:
    """The default policy is a new dict per request, never one shared by them all."""
    first, second = _request(), _request()
    assert first.policy == second.policy == {}
    assert first.policy is not second.policy


def test_a_previews_end_counts_code_points_from_its_offset() -> None:
    """`text_end`: where the reader's preview ends once this record is applied (code points, not bytes)."""
    fields = {"conversationId": "c", **ATTEMPT, "blockIndex": 0, "throughSequence": 4, "occurredAtMs": 7}
    preview = PreviewUpdated.model_validate({**fields, "text": "h\u00e9\U0001f600", "textOffset": 5})
    assert preview.text_end == 8
    assert PreviewUpdated.model_validate({**fields, "text": "abc"}).text_end == 3


def _errors(model: type[Any], data: dict[str, Any]) -> list[tuple[str, tuple[Any, ...], Any]]:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(data)
    assert refused.value.title == model.__name__
    return [(e["type"], e["loc"], e["input"]) for e in refused.value.errors()]


def test_bad_ingress_is_refused_with_typed_errors_naming_the_wire_fields() -> None:
    """A missing field, an unknown one and an unparsable value: one error each, by wire name, in
    field order, with the value given (what a rejection's detail carries)."""
    given = {**HEAD, "occurredAtMs": "soon", "attemptGeneration": 1, "extraField": True}
    assert _errors(DispatchSent, given) == [
        ("int_parsing", ("occurredAtMs",), "soon"),
        ("missing", ("operationId",), given),
        ("extra_forbidden", ("extraField",), True),
    ]


def test_an_outcome_or_a_reason_code_not_in_its_enum_is_refused() -> None:
    """Enum fields take the wire words only, in their case: `COMPLETED` is not `completed`."""
    assert _errors(StreamEnded, {**HEAD, **ATTEMPT, "outcome": "COMPLETED"}) == [
        ("enum", ("outcome",), "COMPLETED")
    ]
    assert _errors(CancelRequested, {**HEAD, "reasonCode": "BORED"}) == [("enum", ("reasonCode",), "BORED")]
    cancel = CancelRequested.model_validate({**HEAD, "reasonCode": "DEADLINE_EXCEEDED"})
    assert cancel.reason_code is ReasonCode.DEADLINE_EXCEEDED


def test_a_block_of_a_turn_refuses_an_unknown_field_by_its_place_in_the_turn() -> None:
    """A nested refusal names the path to the field: the turn's blocks, the block's index, the field."""
    assert _errors(TurnSubmitted, {**HEAD, "turnId": "t", "blocks": [BLOCK, {**BLOCK, "colour": "red"}]}) == [
        ("extra_forbidden", ("blocks", 1, "colour"), "red")
    ]


def test_an_event_cannot_be_changed_once_built() -> None:
    """Events are frozen: the fold may keep and share them without copying."""
    event = DispatchSent.model_validate({**HEAD, **ATTEMPT})
    with pytest.raises(ValidationError) as refused:
        event.operation_id = "other"
    assert [(e["type"], e["loc"]) for e in refused.value.errors()] == [("frozen_instance", ("operation_id",))]
    assert event.operation_id == "o"


def test_an_event_takes_its_python_names_and_its_wire_names_alike() -> None:
    """`populate_by_name`: the engine builds events by field name, producers send camelCase."""
    by_name = SubmittedBlock(id="b0", role="user", kind="text", trust_label="user")
    assert by_name == SubmittedBlock.model_validate(BLOCK)
    assert by_name.model_dump() == DUMPED_BLOCK
