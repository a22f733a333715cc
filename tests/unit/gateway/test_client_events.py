"""What the gateway client builds and how it words a refusal: every event builder's exact event
(stamped with a fixed id and time), the stream policy it asks for, and the refusal's fields."""

from __future__ import annotations

import time

import pytest

from turnledger.codec import UnencodableRecord
from turnledger.gateway import client as client_module
from turnledger.gateway.client import (
    EventFactory,
    RefusedEventError,
    ToolResult,
    WorkerEvents,
    encode_for_sending,
    now_ms,
    stream_policy,
    streaming_policy,
)
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.events import (
    AttemptTerminated,
    CancelRequested,
    DispatchAttempt,
    DispatchRequested,
    DispatchSent,
    ExpiryClaimed,
    HandleBound,
    IngressEvent,
    LeaseRenewed,
    RecoveryReported,
    ReplayStarted,
    ResumeStarted,
    StreamDeltas,
    StreamEnded,
    StreamOutcome,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.graph import ResultStatus
from turnledger.model.limits import Limits
from turnledger.model.reasons import ReasonCode
from turnledger.streaming.runs import merge_runs

STAMP = {"conversation_id": "conv-1", "event_id": "ev-1", "occurred_at_ms": 1234}


@pytest.fixture
def fixed_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event built gets event id `ev-1` and time 1234 ms."""
    monkeypatch.setattr(client_module, "new_event_id", lambda: "ev-1")
    monkeypatch.setattr(client_module, "now_ms", lambda: 1234)


class Sink:
    """An `IngressSink` that keeps what it was given, in order."""

    def __init__(self) -> None:
        self.events: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)


def test_now_ms_is_the_wall_clock_in_whole_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """An event's time is the clock's seconds times 1000, cut to an int."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.1239)
    assert now_ms() == 1_700_000_000_123


def test_the_stream_policy_is_the_apis_and_none_for_an_unknown_api() -> None:
    """The policy that makes each adapter stream, by the API before the `@`; nothing for an unknown one."""
    assert stream_policy("anthropic-messages@1") == {"stream": True}
    assert stream_policy("openai-chat@2") == {"stream": True, "stream_options": {"include_usage": True}}
    assert stream_policy("openai-responses@1") == {"stream": True, "background": True}
    assert stream_policy("gemini@1") == {}
    assert stream_policy("no-such-api@1") == {}


def test_a_dispatch_asked_not_to_be_stored_streams_without_background_mode() -> None:
    """Background mode keeps the response whatever `store` says: `store: false` leaves it out; the
    dispatch's own keys still win, a `background` it names included."""
    assert stream_policy("openai-responses@4", {"store": False}) == {"stream": True}
    assert streaming_policy("openai-responses@4", {"store": False}) == {"stream": True, "store": False}
    assert streaming_policy("openai-responses@4", {"store": True}) == {
        "stream": True,
        "background": True,
        "store": True,
    }
    assert streaming_policy("openai-responses@4", {"store": False, "background": True}) == {
        "stream": True,
        "background": True,
        "store": False,
    }
    assert streaming_policy("openai-responses@4", None) == {"stream": True, "background": True}
    assert streaming_policy("no-such-api@1", {"store": False}) == {"store": False}


def test_a_user_turn_is_one_user_text_block(fixed_stamp: None) -> None:
    """Given ids and an expected revision are kept; the block id defaults to `<turn>/b0`."""
    event = EventFactory().user_turn("conv-1", "hi", turn_id="u-7", expected_revision=3)
    block = SubmittedBlock(id="u-7/b0", role="user", kind="text", trust_label="user", text="hi")
    assert event == TurnSubmitted(**STAMP, turn_id="u-7", blocks=(block,), expected_revision=3)
    named = EventFactory().user_turn("conv-1", "hi", turn_id="u-7", block_id="blk")
    assert named.blocks[0].id == "blk" and named.expected_revision is None


def test_a_user_turn_without_an_id_gets_a_fresh_one(fixed_stamp: None) -> None:
    """`u-` and 12 hex digits, a new one each time."""
    first, second = (EventFactory().user_turn("conv-1", "hi") for _ in range(2))
    for event in (first, second):
        prefix, _, digits = event.turn_id.partition("-")
        assert (prefix, len(digits), int(digits, 16) >= 0) == ("u", 12, True)
        assert event.blocks[0].id == f"{event.turn_id}/b0"
    assert first.turn_id != second.turn_id


def test_tool_results_are_one_tool_block_per_result(fixed_stamp: None) -> None:
    """Each result becomes a TOOL_RESULT block `t-<call id>`; the turn id joins the call ids."""
    results = [
        ToolResult("c1", "search", "d1", 2, "found"),
        ToolResult("c2", "fetch", "d2", 3, "boom", status=ResultStatus.ERROR),
    ]
    event = EventFactory().tool_results("conv-1", results)
    expected = [
        SubmittedBlock(
            id="t-c1",
            role="tool",
            kind="tool_result",
            trust_label="tool",
            text="found",
            call_id="c1",
            tool_name="search",
            argument_digest="d1",
            generation=2,
            result_status="success",
        ),
        SubmittedBlock(
            id="t-c2",
            role="tool",
            kind="tool_result",
            trust_label="tool",
            text="boom",
            call_id="c2",
            tool_name="fetch",
            argument_digest="d2",
            generation=3,
            result_status="error",
        ),
    ]
    assert event == TurnSubmitted(**STAMP, turn_id="tr-c1+c2", blocks=tuple(expected))
    assert EventFactory().tool_results("conv-1", results, turn_id="mine").turn_id == "mine"


async def test_every_worker_event_is_built_whole_and_appended_in_order(fixed_stamp: None) -> None:
    """Each worker-side builder appends exactly the event it returns, with the worker's id."""
    sink = Sink()
    worker = WorkerEvents(sink, "w-9")
    delta, more = (
        NormalizedDelta(
            response_handle="h-1",
            generation=6,
            block_index=0,
            delta_sequence=n,
            type=DeltaType.TEXT_DELTA,
            text=t,
        )
        for n, t in ((1, "a"), (2, "b"))
    )
    built = [
        await worker.attempt("conv-1", "op", 4, 5),
        await worker.attempt("conv-1", "op", 4, 5, lease_ms=777, replayable=True),
        await worker.sent("conv-1", "op", 6),
        await worker.handle_bound("conv-1", "op", 6, "h-1", "digest"),
        await worker.handle_bound("conv-1", "op", 6, "h-1", "digest", resumable=True),
        await worker.deltas("conv-1", "op", 6, [delta, more]),
        await worker.ended("conv-1", "op", 6, StreamOutcome.COMPLETED, resumable=True, last_delta_sequence=2),
        await worker.recovered("conv-1", "op", 6),
        await worker.resume_started("conv-1", "op", 6, "h-1"),
        await worker.replay_started("conv-1", "op", 6),
        await worker.give_up("conv-1", "op", "no key"),
        await worker.give_up("conv-1", "op", "no key", ReasonCode.PROVIDER_ERROR),
        await worker.terminated("conv-1", "op", 6),
        await worker.renew("conv-1", "op", 6),
        await worker.claim_expiry("conv-1", "op", 6),
    ]
    op = {**STAMP, "operation_id": "op"}
    gen = {**op, "attempt_generation": 6}
    assert built == [
        DispatchAttempt(
            **op, expected_revision=4, expected_cancel_generation=5, worker_id="w-9", lease_ms=30_000
        ),
        DispatchAttempt(
            **op,
            expected_revision=4,
            expected_cancel_generation=5,
            worker_id="w-9",
            lease_ms=777,
            replayable=True,
        ),
        DispatchSent(**gen),
        HandleBound(**gen, response_handle="h-1", manifest_digest="digest", resumable=False),
        HandleBound(**gen, response_handle="h-1", manifest_digest="digest", resumable=True),
        StreamDeltas(**gen, deltas=merge_runs([delta, more])),
        StreamEnded(**gen, outcome=StreamOutcome.COMPLETED, resumable=True, last_delta_sequence=2),
        RecoveryReported(**gen, worker_id="w-9"),
        ResumeStarted(**gen, response_handle="h-1", worker_id="w-9"),
        ReplayStarted(**gen, worker_id="w-9"),
        CancelRequested(**op, reason="no key", worker_gave_up=True),
        CancelRequested(**op, reason="no key", worker_gave_up=True, reason_code=ReasonCode.PROVIDER_ERROR),
        AttemptTerminated(**gen, worker_id="w-9"),
        LeaseRenewed(**gen, worker_id="w-9"),
        ExpiryClaimed(**gen, worker_id="w-9"),
    ]
    assert len(built[5].deltas) == 1  # the two content deltas of one block travel as one run
    assert sink.events == built


def _dispatch(policy: dict[str, object]) -> DispatchRequested:
    return DispatchRequested(
        **STAMP,
        operation_id="op",
        adapter="anthropic-messages@1",
        provider="p",
        model_revision="m",
        max_output_tokens=5,
        policy=policy,
    )


def test_a_refusal_names_the_event_its_id_the_reason_and_the_detail() -> None:
    """`str(error)` and the fields a caller reads, with the id made printable."""
    event = EventFactory().user_turn("conv-1", "bad \ud800").model_copy(update={"event_id": "e\ud800"})
    with pytest.raises(RefusedEventError) as caught:
        encode_for_sending(event)
    error = caught.value
    detail = "/event_id, /blocks/0/text holds a lone surrogate (text with no UTF-8 form)"
    assert (error.event_type, error.event_id, error.reason, error.detail) == (
        "TurnSubmitted",
        "e\\ud800",
        ReasonCode.UNENCODABLE_TEXT,
        detail,
    )
    assert str(error) == f"TurnSubmitted e\\ud800 not sent: UNENCODABLE_TEXT: {detail}"


def test_a_lone_surrogate_in_a_key_or_a_nested_value_is_named_by_its_path() -> None:
    """A dict key is named `<key>` under its parent; a value under its (printable) key."""
    with pytest.raises(RefusedEventError) as caught:
        encode_for_sending(_dispatch({"k\ud800": {"ok": ["\udc00"]}}))
    assert caught.value.detail == (
        "/policy/<key>, /policy/k\\ud800/ok/0 holds a lone surrogate (text with no UTF-8 form)"
    )


def test_at_most_five_places_are_named() -> None:
    """Six fields with lone surrogates: the first five paths, in the event's order."""
    policy = {f"p{i}": "\ud800" for i in range(6)}
    with pytest.raises(RefusedEventError) as caught:
        encode_for_sending(_dispatch(policy))
    assert caught.value.detail == (
        "/policy/p0, /policy/p1, /policy/p2, /policy/p3, /policy/p4 holds a lone surrogate "
        "(text with no UTF-8 form)"
    )


def test_an_encoding_failure_that_is_not_about_text_is_raised_as_it_is() -> None:
    """No lone surrogate to blame (a time past Avro's long): the codec's own error, not a refusal."""
    event = EventFactory().user_turn("conv-1", "fine").model_copy(update={"occurred_at_ms": 2**70})
    with pytest.raises(UnencodableRecord) as caught:
        encode_for_sending(event, Limits())
    assert type(caught.value) is UnencodableRecord
    assert str(caught.value) == "turnledger.v1.TurnSubmitted: Python int too large to convert to C long"
