"""Every operation settles: leases, deadlines, interjections, cancels, pauses, empty answers, replays.

One scenario per rule of the liveness design (dispatch/leases.py, turns.py, prepare.py,
attempt.py), with the exact decisions, reasons and records each produces.
"""

from __future__ import annotations

from turnledger.model.deltas import DeltaType, StopReason
from turnledger.model.events import (
    DEFAULT_SETTLE_WITHIN_MS,
    DispatchState,
    StreamOutcome,
    SubmittedBlock,
    TurnSubmitted,
)
from turnledger.model.reasons import ReasonCode

from .scenario import (
    CommittedTurn,
    Conversation,
    DispatchDecision,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    ToolCallReady,
    _DeltaMaker,
    text_stream,
)

S = DispatchState
LEASE = 30_000


def _last(c: Conversation, op: str = "op-1") -> DispatchDecision:
    return [d for d in c.of(DispatchDecision) if d.operation_id == op][-1]


def _streaming(c: Conversation, op: str = "op-1", handle: str = "msg_1", resumable: bool = False) -> None:
    c.request(op)
    c.attempt(op)
    gen = c.state.operations[op].attempt_generation
    c.sent(op, gen)
    c.bind(op, gen, handle, resumable=resumable)


# ------------------------------------------------------------------ the user speaks mid-stream


def test_a_user_turn_mid_stream_supersedes_the_operation_and_the_next_one_waits_for_termination() -> None:
    c = Conversation()
    c.user("weather?")
    _streaming(c)
    stream = text_stream(["It is ", "sunny"])
    c.deltas(stream[:3])
    assert [p.text for p in c.of(PreviewUpdated)] == ["It is "]

    c.user("actually, never mind")
    superseded = _last(c)
    assert (superseded.state, superseded.previous_state, superseded.reason) == (
        S.CANCELLED,
        S.STREAMING,
        ReasonCode.SUPERSEDED,
    )
    assert superseded.attempt_terminated is False
    assert [(r.operation_id, r.reason) for r in c.of(PreviewRetracted)] == [("op-1", ReasonCode.SUPERSEDED)]

    c.deltas(stream[3:])  # the stale answer still arrives: quarantined, never history
    assert [(q.reason, q.attempt_generation) for q in c.of(Quarantined)] == [(ReasonCode.AFTER_CANCEL, 1)]
    assert [t.revision for t in c.of(CommittedTurn)] == [1, 2]

    c.request("op-2")
    assert _last(c, "op-2").state == S.PREPARED and c.state.operations["op-2"].prepared_revision == 2
    c.attempt("op-2", worker="w2")
    busy = _last(c, "op-2")
    assert (busy.accepted, busy.reason) == (False, ReasonCode.CONVERSATION_BUSY)

    c.terminated("op-1", 1, worker="w1")
    confirmed = _last(c)
    assert (confirmed.state, confirmed.reason, confirmed.attempt_terminated) == (
        S.CANCELLED,
        ReasonCode.ATTEMPT_TERMINATED,
        True,
    )
    c.attempt("op-2", worker="w2")
    assert _last(c, "op-2").state == S.DISPATCHING and _last(c, "op-2").lease_owner == "w2"


def test_only_the_lease_holder_confirms_while_its_lease_holds() -> None:
    c = Conversation()
    c.user("weather?")
    _streaming(c)
    c.user("stop")
    c.terminated("op-1", 1, worker="w2")
    assert [(r.reason, r.event_type) for r in c.of(Rejected)] == [
        (ReasonCode.LEASE_NOT_HELD, "AttemptTerminated")
    ]
    assert c.state.operations["op-1"].may_produce_output


def test_waiting_operations_are_prepared_again_not_superseded() -> None:
    c = Conversation()
    c.user("weather?")
    _streaming(c)
    from .scenario import tool_stream

    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Paris"}'])]))
    c.request("op-2")
    assert _last(c, "op-2").state == S.WAITING
    c.tool_results(("call-1", "get_weather", '{"city": "Paris"}'))
    assert [(d.state, d.reason) for d in c.of(DispatchDecision) if d.operation_id == "op-2"] == [
        (S.WAITING, None),
        (S.PREPARED, None),
    ]
    assert len(c.of(ToolCallReady)) == 1


# ------------------------------------------------------------------ leases


def test_a_claim_before_the_lease_expires_is_refused_with_the_times_that_hold() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c)
    bound_at = _last(c).occurred_at_ms
    c.claim(worker="w2")
    refused = _last(c)
    assert (refused.accepted, refused.state, refused.reason) == (
        False,
        S.STREAMING,
        ReasonCode.LEASE_NOT_EXPIRED,
    )
    assert (refused.lease_owner, refused.lease_expires_at_ms) == ("w1", bound_at + LEASE)
    assert (
        refused.deadline_at_ms == c.state.operations["op-1"].request.occurred_at_ms + DEFAULT_SETTLE_WITHIN_MS
    )


def test_deltas_and_heartbeats_renew_the_lease() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c)
    c.advance(LEASE - 100)
    c.deltas(text_stream(["a"], stop=False)[:3])
    c.advance(LEASE - 100)
    c.renew()
    c.advance(LEASE - 100)
    c.claim(worker="w2")
    assert (_last(c).accepted, _last(c).reason) == (False, ReasonCode.LEASE_NOT_EXPIRED)
    c.advance(200)
    c.claim(worker="w2")
    assert (_last(c).state, _last(c).reason) == (S.UNKNOWN, ReasonCode.LEASE_EXPIRED)


def test_an_expired_lease_on_a_plain_stream_terminates_the_attempt_and_another_worker_takes_over() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c)
    c.deltas(text_stream(["half"], stop=False)[:3])
    c.advance(LEASE + 1)
    c.claim(worker="w2")
    expired = _last(c)
    assert (expired.state, expired.reason, expired.attempt_terminated, expired.lease_owner) == (
        S.UNKNOWN,
        ReasonCode.LEASE_EXPIRED,
        True,
        None,
    )
    assert [r.reason for r in c.of(PreviewRetracted)] == [ReasonCode.LEASE_EXPIRED]
    c.attempt(worker="w2")
    taken = _last(c)
    assert (taken.state, taken.attempt_generation, taken.lease_owner) == (S.DISPATCHING, 2, "w2")
    c.deltas(text_stream(["late"], gen=1), gen=1)  # the dead worker's stream, if it was not dead
    assert [q.reason for q in c.of(Quarantined)] == [ReasonCode.STALE_GENERATION]
    c.sent(gen=2)
    c.bind(gen=2, handle="msg_2")
    c.deltas(text_stream(["whole"], handle="msg_2", gen=2), gen=2)
    assert _last(c).state == S.COMMITTED
    assert [(t.attempt_generation, t.blocks[0].text) for t in c.of(CommittedTurn)[1:]] == [(2, "whole")]


def test_an_expired_lease_on_a_kept_response_leaves_it_for_another_worker_to_resume() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c, resumable=True)
    stream = text_stream(["kept ", "answer"])
    c.deltas(stream[:3])
    c.advance(LEASE + 1)
    c.claim(worker="w2")
    expired = _last(c)
    assert (expired.state, expired.attempt_terminated, expired.response_handle) == (S.UNKNOWN, False, "msg_1")
    assert c.of(PreviewRetracted) == []
    c.attempt(worker="w2")
    assert (_last(c).accepted, _last(c).reason) == (False, ReasonCode.OLD_ATTEMPT_NOT_TERMINATED)
    c.resume(handle="msg_1", worker="w2")
    resumed = _last(c)
    assert (resumed.state, resumed.lease_owner, resumed.attempt_generation) == (S.STREAMING, "w2", 1)
    c.deltas(stream)  # read again from the start: the assembler drops what it has
    assert _last(c).state == S.COMMITTED
    assert [t.blocks[0].text for t in c.of(CommittedTurn)[1:]] == ["kept answer"]


def test_lease_holder_events_from_another_worker_are_refused_while_the_lease_holds() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c, resumable=True)
    c.recovered(worker="w2")
    c.renew(worker="w2")
    assert [(r.reason, r.event_type) for r in c.of(Rejected)] == [
        (ReasonCode.LEASE_NOT_HELD, "RecoveryReported"),
        (ReasonCode.LEASE_NOT_HELD, "LeaseRenewed"),
    ]
    assert c.state.operations["op-1"].state == S.STREAMING
    c.recovered(worker="w1")
    assert (_last(c).state, _last(c).reason, _last(c).lease_owner) == (
        S.UNKNOWN,
        ReasonCode.WORKER_RECOVERED,
        "w1",
    )
    c.resume(worker="w2")
    assert c.of(Rejected)[-1].reason == ReasonCode.LEASE_NOT_HELD


def test_the_lease_ends_with_the_attempt() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c)
    c.deltas(text_stream(["done"]))
    committed = _last(c)
    assert (committed.state, committed.lease_owner, committed.lease_expires_at_ms) == (
        S.COMMITTED,
        None,
        None,
    )
    c.advance(LEASE + 1)
    c.claim(worker="w2")
    assert [(r.reason, r.event_type) for r in c.of(Rejected)] == [
        (ReasonCode.ILLEGAL_TRANSITION, "ExpiryClaimed")
    ]


def test_a_cancelled_attempt_whose_worker_is_gone_is_confirmed_by_its_lease_expiry() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c, resumable=True)
    c.cancel("op-1")
    assert (_last(c).state, _last(c).attempt_terminated) == (S.CANCELLED, False)
    c.request("op-2")
    c.attempt("op-2", worker="w2")
    assert _last(c, "op-2").reason == ReasonCode.CONVERSATION_BUSY
    c.advance(LEASE + 1)
    c.claim("op-1", worker="w2")
    confirmed = _last(c)
    assert (confirmed.state, confirmed.reason, confirmed.attempt_terminated) == (
        S.CANCELLED,
        ReasonCode.LEASE_EXPIRED,
        True,
    )
    c.attempt("op-2", worker="w2")
    assert _last(c, "op-2").state == S.DISPATCHING


def test_a_cancel_of_an_attempt_whose_lease_already_expired_confirms_it_at_once() -> None:
    """A kept response whose worker is gone has no lease left to expire: nothing else would confirm it."""
    c = Conversation()
    c.user("hi")
    _streaming(c, resumable=True)
    c.advance(LEASE + 1)
    c.claim(worker="w2")
    assert (_last(c).state, _last(c).lease_owner, _last(c).attempt_terminated) == (S.UNKNOWN, None, False)
    c.user("never mind")
    superseded = _last(c)
    assert (superseded.state, superseded.reason, superseded.attempt_terminated) == (
        S.CANCELLED,
        ReasonCode.SUPERSEDED,
        True,
    )
    c.request("op-2")
    c.attempt("op-2", worker="w2")
    assert _last(c, "op-2").state == S.DISPATCHING


def test_a_cancel_before_any_attempt_does_not_hold_the_conversation() -> None:
    c = Conversation()
    c.user("hi")
    c.request("op-1")
    c.cancel("op-1")
    c.request("op-2")
    c.attempt("op-2")
    assert _last(c, "op-2").state == S.DISPATCHING


# ------------------------------------------------------------------ deadlines


def test_a_prepared_operation_nobody_sends_is_cancelled_at_its_deadline() -> None:
    c = Conversation()
    c.user("hi")
    c.request(settle_within_ms=5_000)
    deadline = _last(c).deadline_at_ms
    c.claim(worker="sweeper")
    assert (_last(c).accepted, _last(c).reason) == (False, ReasonCode.LEASE_NOT_EXPIRED)
    c.advance(5_000)
    c.claim(worker="sweeper")
    settled = _last(c)
    assert (settled.state, settled.previous_state, settled.reason, settled.deadline_at_ms) == (
        S.CANCELLED,
        S.PREPARED,
        ReasonCode.DEADLINE_EXCEEDED,
        deadline,
    )


def test_an_attempt_after_the_deadline_is_refused_and_settles_the_operation() -> None:
    c = Conversation()
    c.user("hi")
    c.request(settle_within_ms=1_000)
    c.advance(1_000)
    c.attempt()
    refused, cancelled = [d for d in c.of(DispatchDecision)][-2:]
    assert (refused.accepted, refused.reason) == (False, ReasonCode.DEADLINE_EXCEEDED)
    assert (cancelled.state, cancelled.reason) == (S.CANCELLED, ReasonCode.DEADLINE_EXCEEDED)


def test_a_streaming_operation_past_its_deadline_is_cancelled_and_still_awaits_termination() -> None:
    c = Conversation()
    c.user("hi")
    c.request(settle_within_ms=LEASE * 4)
    c.attempt()
    c.sent()
    c.bind()
    for _ in range(8):  # alive all along: the lease holds, the deadline does not
        c.advance(LEASE // 2)
        c.renew()
    c.advance(LEASE // 2)
    c.claim(worker="w2")
    settled = _last(c)
    assert (settled.state, settled.reason, settled.attempt_terminated) == (
        S.CANCELLED,
        ReasonCode.DEADLINE_EXCEEDED,
        False,
    )
    c.terminated(worker="w1")
    assert (_last(c).reason, _last(c).attempt_terminated) == (ReasonCode.ATTEMPT_TERMINATED, True)


def test_a_claim_after_both_the_lease_and_the_deadline_does_both() -> None:
    c = Conversation()
    c.user("hi")
    c.request(settle_within_ms=LEASE)
    c.attempt()
    c.advance(LEASE + 5)
    c.claim(worker="w2")
    expired, cancelled = [d for d in c.of(DispatchDecision)][-2:]
    assert (expired.state, expired.reason, expired.attempt_terminated) == (
        S.UNKNOWN,
        ReasonCode.LEASE_EXPIRED,
        True,
    )
    assert (cancelled.state, cancelled.reason) == (S.CANCELLED, ReasonCode.DEADLINE_EXCEEDED)
    assert not c.state.operations["op-1"].may_produce_output


# ------------------------------------------------------------------ pauses


def _snippet(c: Conversation) -> None:
    block = SubmittedBlock(
        id="s1-b0", role="user", kind="retrieved_snippet", trust_label="retrieved", text="doc"
    )
    c.apply(TurnSubmitted(**c._common(), turn_id="s1", blocks=(block,)))


def test_an_unrenderable_graph_pauses_the_conversation_for_that_adapter() -> None:
    c = Conversation()
    c.user("hello")
    _snippet(c)
    c.request("op-1", adapter="anthropic-messages@0")
    assert (_last(c).state, _last(c).reason) == (S.PAUSED, ReasonCode.UNSUPPORTED_KIND)
    assert c.state.paused == {"anthropic-messages@0": "op-1"}
    c.request("op-2", adapter="anthropic-messages@0")
    refused = _last(c, "op-2")
    assert (refused.state, refused.reason) == (S.REJECTED, ReasonCode.CONVERSATION_PAUSED)


def test_an_upgrade_ends_the_pause() -> None:
    c = Conversation()
    c.user("hello")
    _snippet(c)
    c.request("op-1", adapter="anthropic-messages@0")
    c.request("op-2", adapter="anthropic-messages@1")
    assert _last(c, "op-2").state == S.PREPARED
    ended = _last(c, "op-1")
    assert (ended.state, ended.previous_state, ended.reason) == (
        S.CANCELLED,
        S.PAUSED,
        ReasonCode.PAUSE_ENDED,
    )
    assert c.state.paused == {}
    c.request("op-3", adapter="anthropic-messages@0")  # the old adapter may try again: it pauses again
    assert (_last(c, "op-3").state, c.state.paused) == (S.PAUSED, {"anthropic-messages@0": "op-3"})


def test_a_cancel_ends_the_pause() -> None:
    c = Conversation()
    c.user("hello")
    _snippet(c)
    c.request("op-1", adapter="anthropic-messages@0")
    c.cancel("op-1")
    assert (_last(c).state, c.state.paused) == (S.CANCELLED, {})
    c.request("op-2", adapter="anthropic-messages@0")
    assert _last(c, "op-2").state == S.PAUSED


def test_a_paused_operation_settles_at_its_deadline_and_the_pause_stays() -> None:
    c = Conversation()
    c.user("hello")
    _snippet(c)
    c.request("op-1", adapter="anthropic-messages@0", settle_within_ms=1_000)
    c.advance(1_000)
    c.claim(worker="sweeper")
    assert (_last(c).state, _last(c).reason) == (S.CANCELLED, ReasonCode.DEADLINE_EXCEEDED)
    assert c.state.paused == {"anthropic-messages@0": "op-1"}


# ------------------------------------------------------------------ empty answers, replays


def test_an_empty_complete_answer_commits_nothing_and_is_final() -> None:
    c = Conversation()
    c.user("say nothing")
    _streaming(c)
    d = _DeltaMaker("msg_1", 1)
    c.deltas(
        [
            d(DeltaType.MESSAGE_START, -1),
            d(DeltaType.MESSAGE_STOP, -1, stop_reason=StopReason.END_TURN, raw_stop_reason="end_turn"),
        ]
    )
    final = _last(c)
    assert (final.state, final.reason, final.attempt_terminated) == (
        S.COMMITTED,
        ReasonCode.EMPTY_RESPONSE,
        True,
    )
    assert [t.revision for t in c.of(CommittedTurn)] == [1]
    assert c.of(Quarantined) == [] and c.state.graph.revision == 1
    c.request("op-2")
    assert _last(c, "op-2").state == S.PREPARED


def test_a_replayable_attempt_is_replayed_under_the_same_generation() -> None:
    c = Conversation()
    c.user("hi")
    c.request()
    c.attempt(replayable=True)
    c.sent()
    c.bind()
    stream = text_stream(["once ", "more"])
    c.deltas(stream[:3])
    c.ended(StreamOutcome.DISCONNECTED)
    assert (_last(c).state, _last(c).attempt_terminated) == (S.UNKNOWN, False)
    c.advance(LEASE + 1)
    c.claim(worker="w2")
    assert (_last(c).state, _last(c).attempt_terminated, _last(c).lease_owner) == (S.UNKNOWN, False, None)
    c.replay(worker="w2")
    replayed = _last(c)
    assert (replayed.state, replayed.attempt_generation, replayed.lease_owner) == (S.SENT, 1, "w2")
    assert [r.reason for r in c.of(PreviewRetracted)] == [ReasonCode.STREAM_DISCONNECTED]
    c.bind()
    c.deltas(stream)
    assert _last(c).state == S.COMMITTED
    assert [(t.attempt_generation, t.blocks[0].text) for t in c.of(CommittedTurn)[1:]] == [(1, "once more")]


def test_an_attempt_without_kept_keys_cannot_be_replayed() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c)
    c.ended(StreamOutcome.DISCONNECTED)
    c.replay()
    assert [(r.reason, r.event_type) for r in c.of(Rejected)] == [
        (ReasonCode.ILLEGAL_TRANSITION, "ReplayStarted")
    ]
    assert c.state.operations["op-1"].state == S.UNKNOWN


# ------------------------------------------------------------------ the boundaries, to the millisecond


def _next_event_at(c: Conversation, at_ms: int) -> None:
    """Make the next event's time exactly `at_ms` (each event is 1 ms after the last decision here)."""
    c.advance(at_ms - (c.of(DispatchDecision)[-1].occurred_at_ms + 1))


def test_a_lease_expires_at_its_expiry_time_not_a_millisecond_earlier() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c)
    expires = c.state.operations["op-1"].lease_expires_at_ms
    deadline = c.state.operations["op-1"].request.deadline_at_ms
    assert expires is not None
    _next_event_at(c, expires - 1)
    c.claim(worker="w2")
    early = _last(c)
    assert (early.accepted, early.previous_state, early.state, early.reason, early.detail) == (
        False,
        S.STREAMING,
        S.STREAMING,
        ReasonCode.LEASE_NOT_EXPIRED,
        f"lease of w1 until {expires}; deadline {deadline}; claim at {expires - 1} by w2",
    )
    c.claim(worker="w2")  # one millisecond later: at the expiry time itself
    expired = _last(c)
    assert (expired.occurred_at_ms, expired.accepted, expired.state, expired.reason) == (
        expires,
        True,
        S.UNKNOWN,
        ReasonCode.LEASE_EXPIRED,
    )
    assert (expired.detail, expired.attempt_terminated, expired.lease_owner) == (
        "lease of w1 expired",
        True,
        None,
    )


def test_an_expired_lease_of_a_kept_response_says_the_provider_keeps_it() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c, resumable=True)
    c.advance(LEASE)
    c.claim(worker="w2")
    expired = _last(c)
    assert (expired.state, expired.reason, expired.detail, expired.attempt_terminated) == (
        S.UNKNOWN,
        ReasonCode.LEASE_EXPIRED,
        "lease of w1 expired; the provider keeps the response",
        False,
    )


def test_a_cancelled_attempt_confirmed_by_its_lease_expiry_says_so() -> None:
    c = Conversation()
    c.user("hi")
    _streaming(c, resumable=True)
    c.cancel("op-1")
    c.advance(LEASE)
    c.claim("op-1", worker="w2")
    confirmed = _last(c)
    assert (confirmed.state, confirmed.reason, confirmed.detail, confirmed.lease_owner) == (
        S.CANCELLED,
        ReasonCode.LEASE_EXPIRED,
        "lease of w1 expired: attempt 1 counts as terminated",
        None,  # freed: by the handler, and by Step.put once the attempt cannot produce output
    )


def test_a_deadline_passes_at_its_time_not_a_millisecond_earlier() -> None:
    c = Conversation()
    c.user("hi")
    c.request(settle_within_ms=5_000)
    deadline = _last(c).deadline_at_ms
    assert deadline is not None
    _next_event_at(c, deadline - 1)
    c.claim(worker="sweeper")
    early = _last(c)
    assert (early.accepted, early.state, early.reason, early.detail) == (
        False,
        S.PREPARED,
        ReasonCode.LEASE_NOT_EXPIRED,
        f"deadline {deadline}; claim at {deadline - 1} by sweeper",  # no lease: nothing holds one
    )
    c.claim(worker="sweeper")
    late = _last(c)
    assert (late.occurred_at_ms, late.state, late.reason, late.detail) == (
        deadline,
        S.CANCELLED,
        ReasonCode.DEADLINE_EXCEEDED,
        f"not final by its deadline {deadline}",
    )
