"""The dispatch state machine, one scenario per rule, with exact outputs."""

from __future__ import annotations

from turnledger.model.events import DispatchState, StreamOutcome
from turnledger.model.reasons import ReasonCode

from .scenario import (
    CommittedTurn,
    Conversation,
    DispatchDecision,
    ManifestIssued,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    ToolCallReady,
    text_stream,
    tool_stream,
)

S = DispatchState
ARGS = '{"city": "Paris"}'


def _states(c: Conversation, op: str = "op-1") -> list[DispatchState]:
    return [d.state for d in c.of(DispatchDecision) if d.operation_id == op and d.accepted]


def _reasons(c: Conversation) -> list[ReasonCode]:
    return [r.reason for r in c.of(Rejected)]


def test_user_turn_commits_revision_one() -> None:
    c = Conversation()
    out = c.user("hello")
    assert [type(o) for o in out] == [CommittedTurn]
    turn = out[0]
    assert isinstance(turn, CommittedTurn)
    assert turn.revision == 1 and [b.id for b in turn.blocks] == ["u1-b0"]
    assert c.state.graph.revision == 1


def test_full_text_dispatch_commits_exactly_one_assistant_turn() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["Hel", "lo ", "there"]))
    turns = c.of(CommittedTurn)
    assert [t.revision for t in turns] == [1, 2]
    assistant = turns[1]
    assert assistant.operation_id == "op-1" and assistant.attempt_generation == 1
    assert [(b.role, b.kind, b.text) for b in assistant.blocks] == [("assistant", "text", "Hello there")]
    assert _states(c) == [S.PREPARED, S.DISPATCHING, S.SENT, S.STREAMING, S.COMMITTED]
    assert c.of(ToolCallReady) == []


def test_previews_are_coalesced_per_event_and_never_committed_early() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["Hel", "lo"])
    c.deltas(stream[:4])  # message_start, block_start, two text deltas: still a preview
    previews = c.of(PreviewUpdated)
    assert [(p.block_index, p.text) for p in previews] == [(0, "Hello")]
    assert len(c.of(CommittedTurn)) == 1
    c.deltas(stream[4:])
    assert len(c.of(CommittedTurn)) == 2


def test_manifest_is_issued_once_with_the_request_digest() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    manifests = c.of(ManifestIssued)
    assert len(manifests) == 1
    manifest = manifests[0].manifest
    assert manifest.conversation_revision == 1 and manifest.adapter == "anthropic-messages@1"
    assert manifest.manifest_digest.startswith("sha256:") and manifest.request_digest.startswith("sha256:")
    assert [b.id for b in manifest.blocks] == ["u1-b0"]


def test_duplicate_dispatch_request_is_rejected() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.request()
    assert _reasons(c) == [ReasonCode.DUPLICATE_OPERATION]
    assert len(c.of(ManifestIssued)) == 1


def test_empty_conversation_is_rejected_without_manifest() -> None:
    c = Conversation()
    c.request()
    assert c.state.operations["op-1"].state == S.REJECTED
    assert c.of(ManifestIssued) == []
    assert c.of(DispatchDecision)[0].reason == ReasonCode.EMPTY_SEQUENCE


def test_second_attempt_is_a_cas_conflict() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt()
    c.attempt()
    decisions = c.of(DispatchDecision)
    assert [(d.state, d.accepted) for d in decisions] == [
        (S.PREPARED, True),
        (S.DISPATCHING, True),
        (S.DISPATCHING, False),
    ]
    assert decisions[-1].reason == ReasonCode.CAS_STATE_MISMATCH
    assert c.state.operations["op-1"].attempt_generation == 1


def test_attempt_with_stale_revision_or_cancel_generation_conflicts() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt(revision=0)
    c.attempt(cancel=7)
    conflicts = [d.reason for d in c.of(DispatchDecision) if not d.accepted]
    assert conflicts == [ReasonCode.CAS_REVISION_MISMATCH, ReasonCode.CAS_CANCEL_GENERATION_MISMATCH]
    assert c.state.operations["op-1"].state == S.PREPARED


def test_prepared_operation_is_superseded_when_the_conversation_moves_on() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.user("are you there?")
    superseded = c.of(DispatchDecision)[-1]
    assert (superseded.state, superseded.reason, superseded.conversation_revision) == (
        S.CANCELLED,
        ReasonCode.SUPERSEDED,
        2,
    )
    c.attempt(revision=1)
    decision = c.of(DispatchDecision)[-1]
    assert not decision.accepted and decision.reason == ReasonCode.CAS_STATE_MISMATCH


def test_handle_bound_to_another_manifest_is_rejected() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt()
    c.sent()
    before = c.state
    c.bind(digest="sha256:" + "0" * 64)
    assert _reasons(c) == [ReasonCode.HANDLE_BOUND_TO_OTHER_MANIFEST]
    assert c.state == before


def test_tool_calls_reach_the_ledger_only_after_the_canonical_commit() -> None:
    c = Conversation()
    c.user("weather in Paris and Rome?")
    c.dispatch_to_streaming()
    stream = tool_stream(
        [
            ("call-1", "get_weather", ['{"ci', 'ty": "Paris"}']),
            ("call-2", "get_weather", ['{"city": "Rome"}']),
        ]
    )
    c.deltas(stream[:-1])
    assert c.of(ToolCallReady) == []
    c.deltas(stream[-1:])
    ready = c.of(ToolCallReady)
    assert [(r.call_id, r.arguments, r.revision) for r in ready] == [
        ("call-1", '{"city": "Paris"}', 2),
        ("call-2", '{"city": "Rome"}', 2),
    ]
    assert c.state.operations["op-1"].state == S.COMMITTED


def test_truncated_arguments_never_dispatch_and_retract_previews() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    stream = tool_stream([("call-1", "get_weather", ['{"city": "Par'])], stop_reason=StopReason_MAX())
    c.deltas(stream)
    assert c.of(ToolCallReady) == []
    assert len(c.of(CommittedTurn)) == 1
    op = c.state.operations["op-1"]
    assert op.state == S.CANCELLED and op.attempt_terminated  # cut by the limit: no new generation
    assert c.of(DispatchDecision)[-1].reason is ReasonCode.OUTPUT_LIMIT_REACHED


def StopReason_MAX():
    from turnledger.model.deltas import StopReason

    return StopReason.MAX_TOKENS


def test_missing_stop_never_commits() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["partial"], stop=False))
    c.ended(StreamOutcome.COMPLETED)
    assert len(c.of(CommittedTurn)) == 1
    assert c.state.operations["op-1"].state == S.UNKNOWN
    assert c.of(DispatchDecision)[-1].reason == ReasonCode.MISSING_STOP
    assert len(c.of(PreviewRetracted)) == 1


def test_late_deltas_after_commit_go_to_quarantine() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["hi"])
    c.deltas(stream)
    c.deltas(stream)
    q = c.of(Quarantined)
    assert [(x.reason, x.attempt_generation) for x in q] == [(ReasonCode.AFTER_COMMIT, 1)]
    assert len(c.of(CommittedTurn)) == 2


def test_duplicated_deltas_commit_once() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["a", "b", "c"])
    c.deltas(stream[:3] + stream[:3] + stream[3:4] + stream[2:])
    turns = c.of(CommittedTurn)
    assert len(turns) == 2 and turns[1].blocks[0].text == "abc"


def test_recovery_then_resume_same_generation_commits_once() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["one ", "two"])
    c.deltas(stream[:3])
    c.recovered()
    assert c.state.operations["op-1"].state == S.UNKNOWN
    c.attempt()
    assert c.of(DispatchDecision)[-1].reason == ReasonCode.OLD_ATTEMPT_NOT_TERMINATED
    c.resume()
    c.deltas(stream[1:])  # the resumed stream repeats what we already acknowledged
    turns = c.of(CommittedTurn)
    assert len(turns) == 2 and turns[1].blocks[0].text == "one two"
    assert turns[1].attempt_generation == 1


def test_new_generation_only_after_the_old_attempt_is_terminated() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    old = text_stream(["old ", "answer"], handle="msg_1", gen=1)
    c.deltas(old[:3])
    c.ended(StreamOutcome.DISCONNECTED)
    c.attempt()
    assert c.of(DispatchDecision)[-1].reason == ReasonCode.OLD_ATTEMPT_NOT_TERMINATED
    c.terminated()
    assert len(c.of(PreviewRetracted)) == 1
    c.attempt()
    assert c.state.operations["op-1"].attempt_generation == 2
    c.sent(gen=2)
    c.bind(gen=2, handle="msg_2")
    c.deltas(old[3:], gen=1)  # the old stream resumes after the new one started
    assert [q.reason for q in c.of(Quarantined)] == [ReasonCode.STALE_GENERATION]
    c.deltas(text_stream(["new"], handle="msg_2", gen=2), gen=2)
    turns = c.of(CommittedTurn)
    assert len(turns) == 2 and turns[1].blocks[0].text == "new" and turns[1].attempt_generation == 2


def test_cancel_bumps_generation_and_quarantines_late_blocks() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["a", "b"])
    c.deltas(stream[:3])
    c.cancel()
    assert c.state.cancel_generation == 1
    assert c.state.operations["op-1"].state == S.CANCELLED
    c.deltas(stream[3:])
    assert [q.reason for q in c.of(Quarantined)] == [ReasonCode.AFTER_CANCEL]
    assert len(c.of(CommittedTurn)) == 1


def test_waiting_until_every_call_has_its_result_then_prepared() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(
        tool_stream([("call-1", "get_weather", [ARGS]), ("call-2", "get_weather", ['{"city": "Rome"}'])])
    )
    c.request("op-2")
    assert c.state.operations["op-2"].state == S.WAITING
    assert len(c.of(ManifestIssued)) == 1
    c.tool_results(("call-1", "get_weather", ARGS))
    assert c.state.operations["op-2"].state == S.WAITING
    c.tool_results(("call-2", "get_weather", '{"city": "Rome"}'))
    assert c.state.operations["op-2"].state == S.PREPARED
    assert len(c.of(ManifestIssued)) == 2


def test_orphaned_and_duplicate_results_are_rejected_and_not_committed() -> None:
    c = Conversation()
    c.user("weather?")
    c.tool_results(("call-9", "get_weather", ARGS))
    assert _reasons(c) == [ReasonCode.ORPHANED_RESULT]
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", [ARGS])]))
    c.tool_results(("call-1", "get_weather", ARGS))
    c.tool_results(("call-1", "get_weather", ARGS))
    assert _reasons(c) == [ReasonCode.ORPHANED_RESULT, ReasonCode.DUPLICATE_RESULT]
    assert [t.revision for t in c.of(CommittedTurn)] == [1, 2, 3]


def test_unknown_kind_in_legacy_adapter_pauses_without_manifest() -> None:
    c = Conversation()
    c.user("hello")
    from turnledger.model.events import SubmittedBlock, TurnSubmitted

    c.apply(
        TurnSubmitted(
            conversation_id=c.conversation_id,
            event_id="snip",
            occurred_at_ms=5,
            turn_id="s1",
            blocks=(
                SubmittedBlock(
                    id="s1-b0", role="user", kind="retrieved_snippet", trust_label="retrieved", text="doc"
                ),
            ),
        )
    )
    c.request(adapter="anthropic-messages@0")
    assert c.state.operations["op-1"].state == S.PAUSED
    assert c.of(ManifestIssued) == []
    assert c.of(DispatchDecision)[-1].reason == ReasonCode.UNSUPPORTED_KIND


def test_over_budget_request_is_rejected_without_manifest() -> None:
    c = Conversation()
    c.user("hello " * 10)
    c.request(max_output_tokens=10_000_000)
    assert c.state.operations["op-1"].state == S.REJECTED
    assert c.of(DispatchDecision)[-1].reason == ReasonCode.TOKEN_BUDGET_EXCEEDED
    assert c.of(ManifestIssued) == []


def test_illegal_transition_leaves_state_unchanged() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    before = c.state
    c.sent(gen=0)
    c.recovered(gen=0)
    assert _reasons(c) == [ReasonCode.ILLEGAL_TRANSITION, ReasonCode.ILLEGAL_TRANSITION]
    assert c.state == before


def test_unknown_operation_is_rejected() -> None:
    c = Conversation()
    c.sent("nope")
    assert _reasons(c) == [ReasonCode.UNKNOWN_OPERATION]


def test_submitted_assistant_blocks_are_refused() -> None:
    from turnledger.model.events import SubmittedBlock, TurnSubmitted

    c = Conversation()
    c.apply(
        TurnSubmitted(
            conversation_id=c.conversation_id,
            event_id="x",
            occurred_at_ms=1,
            turn_id="a1",
            blocks=(SubmittedBlock(id="a", role="assistant", kind="text", trust_label="model", text="hi"),),
        )
    )
    assert _reasons(c) == [ReasonCode.INVALID_EVENT]
    assert c.of(CommittedTurn) == []


def test_state_round_trips_through_json() -> None:
    from turnledger.dispatch.state import ConversationState

    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["a"], stop=False))
    restored = ConversationState.model_validate_json(c.state.model_dump_json())
    assert restored == c.state


def test_stream_end_after_the_attempt_settled_is_a_no_op() -> None:
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Par'])]))
    settled = c.state
    assert settled.operations["op-1"].state == S.UNKNOWN
    assert c.ended(StreamOutcome.COMPLETED) == []
    assert c.state == settled
