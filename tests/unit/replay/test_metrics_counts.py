"""Every spec metric, counted exactly and non-zero, on a workload where each occurs.

Pure: the pure fold produces every output record in memory (tests/unit/dispatch/scenario.py), and the
records go into an `Evidence` by the stream the engine writes each to; no Kafka, no worker. One
conversation per situation, so each count is known by construction:

- `ok`: commits on its first generation; a second attempt after the commit is a CAS_STATE_MISMATCH.
- `stale`: attempts at the wrong revision and cancel generation (two send-CAS conflicts), then a
  disconnect without terminate (UNKNOWN, not terminated: OLD_ATTEMPT_NOT_TERMINATED on a new attempt),
  terminated, a second generation commits; the first generation's late deltas are quarantined
  STALE_GENERATION.
- `orphan`: a tool result for no call (ORPHANED_RESULT) and a duplicated result (DUPLICATE_RESULT).
- `cancel`: a client cancel while streaming, with previews (retracted), then a late delta AFTER_CANCEL.
- `gone`: the worker gave up (CancelRequested worker_gave_up) on a PREPARED operation; a cancel of an
  unknown operation (UNKNOWN_OPERATION).
- `resp`: an OpenAI Responses background stream (resumable): recovered after its handle, resumed, committed.
- `resp-cancelled`: the same, resumed, then cancelled by the client before it commits: not recovered.
- `lost`: an Anthropic stream (not resumable) recovered after its handle: UNKNOWN still open at the end.
- `early`: recovered while SENT (no handle yet): a disconnect without handle, still UNKNOWN.
- `dispatching`: recovered while DISPATCHING (no handle): a disconnect without handle, still UNKNOWN.
- `conflict`: the canonical CAS refuses an answer after a cancel of another operation moved the cancel
  generation; a delta of a foreign handle is quarantined first; op-2's attempt while op-1 streams is
  refused CONVERSATION_BUSY (a refusal that is not a send-CAS conflict).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.unit.dispatch.scenario import WEATHER, Conversation, text_stream, tool_stream
from tests.unit.dispatch.test_provider_answers_commit import (
    answered,
    anthropic_thinking_only,
    chat_blank_text,
    streamed,
)
from turnledger.dispatch.engine import STREAM_OF
from turnledger.model.events import (
    CancelRequested,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    StreamOutcome,
    ToolCallReady,
)
from turnledger.replay.evidence import Evidence, Raw
from turnledger.replay.metrics import Metrics, compute, percentile

NOW = 1_000_000
RESPONSES = ("openai-responses@1", "openai", "openai/gpt-4.1@2025-04")


def _ok() -> Conversation:
    c = Conversation("ok")
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["hi"]))
    c.attempt()  # CAS_STATE_MISMATCH: the operation is COMMITTED
    return c


def _stale() -> Conversation:
    c = Conversation("stale")
    c.user("hello")
    c.request()
    c.attempt(revision=0)  # CAS_REVISION_MISMATCH
    c.attempt(cancel=5)  # CAS_CANCEL_GENERATION_MISMATCH
    c.attempt()
    c.sent()
    c.bind(handle="msg_1")
    old = text_stream(["old"], handle="msg_1")
    c.deltas(old[:3])  # a preview
    c.ended(StreamOutcome.DISCONNECTED)  # UNKNOWN, not terminated, at 1000 + 9
    c.attempt()  # OLD_ATTEMPT_NOT_TERMINATED
    c.advance(500)
    c.terminated()  # previews retracted; UNKNOWN (terminated): the UNKNOWN stretch goes on
    c.attempt()  # generation 2: the UNKNOWN stretch ends
    c.sent(gen=2)
    c.bind(gen=2, handle="msg_2")
    c.deltas(old[3:], gen=1)  # STALE_GENERATION
    c.deltas(text_stream(["new"], handle="msg_2", gen=2), gen=2)
    return c


def _orphan() -> Conversation:
    c = Conversation("orphan")
    c.user("weather?")
    c.dispatch_to_streaming()
    args = '{"city": "Paris"}'
    c.deltas(tool_stream([("call_1", "get_weather", [args])]))
    c.tool_results(("call_9", "get_weather", args))  # ORPHANED_RESULT
    c.tool_results(("call_1", "get_weather", args))
    c.tool_results(("call_1", "get_weather", args))  # DUPLICATE_RESULT
    return c


def _cancel() -> Conversation:
    c = Conversation("cancel")
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["part"])
    c.deltas(stream[:3])
    c.cancel()  # found STREAMING; previews retracted
    c.deltas(stream[3:])  # AFTER_CANCEL (in the transition table's quarantine)
    return c


def _gone() -> Conversation:
    c = Conversation("gone")
    c.user("hello")
    c.request()
    common = c._common()
    c.apply(CancelRequested(**common, operation_id="op-1", reason="3 attempts failed", worker_gave_up=True))
    c.cancel("op-7")  # UNKNOWN_OPERATION: a rejection outside the validator's
    return c


def _resp(cid: str = "resp") -> Conversation:
    c = Conversation(cid)
    c.user("hello")
    adapter, provider, model = RESPONSES
    c.apply(
        DispatchRequested(
            **c._common(),
            operation_id="op-1",
            adapter=adapter,
            provider=provider,
            model_revision=model,
            tools=(WEATHER,),
            max_output_tokens=256,
            policy={"stream": True, "background": True},
        )
    )
    c.attempt()
    c.sent()
    c.bind(handle="resp_1", resumable=True)
    stream = text_stream(["one ", "two"], handle="resp_1")
    c.deltas(stream[:3])
    c.recovered()  # an episode: UNKNOWN, not terminated, bound, resumable
    c.advance(2000)
    c.resume(handle="resp_1")  # the UNKNOWN stretch ends after 2001 ms
    if cid == "resp":
        c.deltas(stream[3:])
    else:
        c.cancel()  # resumed, never committed: an episode not recovered
    return c


def _resp_cancelled() -> Conversation:
    return _resp("resp-cancelled")


def _lost() -> Conversation:
    c = Conversation("lost")
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["x"])[:3])
    c.recovered()  # not resumable: Anthropic keeps no response by its id
    return c


def _early() -> Conversation:
    c = Conversation("early")
    c.user("hello")
    c.request()
    c.attempt()
    c.sent()
    c.recovered()  # while SENT: no handle
    return c


def _dispatching() -> Conversation:
    c = Conversation("dispatching")
    c.user("hello")
    c.request()
    c.attempt()
    c.recovered()  # while DISPATCHING: no handle either
    return c


def _conflict() -> Conversation:
    c = Conversation("conflict")
    c.user("hello")
    c.dispatch_to_streaming()
    c.request("op-2")
    c.attempt("op-2")  # CONVERSATION_BUSY: refused, but not a CAS conflict
    stream = text_stream(["answer"])
    c.deltas([*text_stream(["junk"], handle="msg_other")[:1], *stream[:3]])  # FOREIGN_HANDLE
    c.cancel("op-2")
    c.deltas(stream[3:])  # CANONICAL_CAS_CONFLICT
    return c


CONVERSATIONS = (
    _ok,
    _stale,
    _orphan,
    _cancel,
    _gone,
    _resp,
    _resp_cancelled,
    _lost,
    _early,
    _dispatching,
    _conflict,
)


def workload() -> tuple[Evidence, dict[str, Conversation]]:
    evidence = Evidence()
    conversations = {}
    for build in CONVERSATIONS:
        c = build()
        conversations[c.conversation_id] = c
        for event in _ingress(c):
            evidence.raw.setdefault("ingress", []).append(Raw(0, 0, None, b"", event))
        for record in c.outputs:
            stream = evidence.raw.setdefault(STREAM_OF[type(record)].value, [])
            stream.append(Raw(0, len(stream), None, b"", record))
    return evidence, conversations


def _ingress(c: Conversation) -> list[DispatchRequested]:
    """The dispatch requests (what `partial_tool_calls` reads the offered tools from)."""
    return [event for event in c.events if isinstance(event, DispatchRequested)]


@pytest.fixture
def metrics() -> Metrics:
    """Per test, not per module: mutmut maps each test to the functions it calls."""
    return compute(workload()[0], now_ms=NOW)


def test_validator_rejections_and_result_counts(metrics: Metrics) -> None:
    assert dict(metrics.validator_rejections) == {"ORPHANED_RESULT": 1, "DUPLICATE_RESULT": 1}
    assert (metrics.orphaned_results, metrics.duplicate_results) == (1, 1)
    assert dict(metrics.other_rejections) == {"UNKNOWN_OPERATION": 1}


def test_dispatch_cas_conflicts_by_reason(metrics: Metrics) -> None:
    assert dict(metrics.dispatch_cas_conflicts) == {
        "CAS_STATE_MISMATCH": 1,
        "CAS_REVISION_MISMATCH": 1,
        "CAS_CANCEL_GENERATION_MISMATCH": 1,
        "OLD_ATTEMPT_NOT_TERMINATED": 1,
    }


def test_canonical_cas_conflicts_and_late_blocks(metrics: Metrics) -> None:
    assert metrics.canonical_cas_conflicts == 1
    assert dict(metrics.late_blocks) == {
        "STALE_GENERATION": 1,
        "AFTER_CANCEL": 1,
        "FOREIGN_HANDLE": 1,
        "CANONICAL_CAS_CONFLICT": 1,
    }


def test_preview_retractions(metrics: Metrics) -> None:
    # stale (generation 1 terminated), cancel and resp-cancelled (client cancels), conflict (refused
    # commit); a resume keeps its previews, and lost keeps its own until terminated
    assert metrics.preview_retractions == 4


def test_unknown_ages_and_open_unknowns(metrics: Metrics) -> None:
    c = workload()[1]
    # stale: disconnect to generation 2; resp and resp-cancelled: recovery to resume
    assert sorted(metrics.unknown_ages_ms) == [503, 2001, 2001]
    assert (
        metrics.unknown_open == 4
    )  # lost, early, dispatching, conflict (refused commit: UNKNOWN, terminated)
    opened = {
        cid: next(d.occurred_at_ms for d in conv.outputs if getattr(d, "state", None) == "UNKNOWN")
        for cid, conv in c.items()
        if cid in ("lost", "early", "dispatching", "conflict")
    }
    assert metrics.unknown_open_max_age_ms == NOW - min(opened.values()) > 0


def test_handle_recovery(metrics: Metrics) -> None:
    assert (metrics.handle_episodes, metrics.handle_recovered) == (2, 1)
    assert metrics.handle_recovery_rate == 0.5
    assert metrics.disconnects_without_handle == 2  # early (SENT) and dispatching
    assert metrics.disconnects_not_resumable == 2  # stale (disconnected) and lost (recovered)


def test_operations_final_states_and_generations(metrics: Metrics) -> None:
    assert metrics.operations == 12  # one per conversation, two in conflict
    assert metrics.committed == 4  # ok, stale, orphan, resp
    assert dict(metrics.generations) == {1: 3, 2: 1}
    assert dict(metrics.final_states) == {
        "COMMITTED": 4,
        "CANCELLED": 3,
        "CANCELLED (worker gave up)": 1,
        "UNKNOWN": 4,
    }


def test_client_cancels_and_give_ups(metrics: Metrics) -> None:
    # cancel/op-1 and resp-cancelled/op-1 (STREAMING), conflict/op-2 (PREPARED)
    assert metrics.cancelled == 3
    assert dict(metrics.cancelled_in_flight) == {"STREAMING": 2, "PREPARED": 1}
    assert metrics.given_up == {"gone/op-1": "3 attempts failed"}


def test_partial_tool_dispatches_count_only_incomplete_calls() -> None:
    evidence, _ = workload()
    assert compute(evidence, now_ms=NOW).partial_tool_dispatches == 0
    calls = evidence.of("tool-calls", ToolCallReady)
    assert [(c.conversation_id, c.call_id) for c in calls] == [("orphan", "call_1")]
    cut = calls[0].model_copy(update={"arguments": calls[0].arguments[:5]})
    unoffered = calls[0].model_copy(update={"tool_name": "get_time"})
    evidence.raw["tool-calls"] += [Raw(0, 1, None, b"", unoffered), Raw(0, 2, None, b"", cut)]
    assert compute(evidence, now_ms=NOW).partial_tool_dispatches == 2
    assert compute(evidence, now_ms=NOW, partial_tool_dispatches=7).partial_tool_dispatches == 7


def test_percentile() -> None:
    assert percentile([], 0.5) == 0
    assert percentile([5], 0.99) == 5
    values = [40, 10, 30, 20]
    assert [percentile(values, q) for q in (0.0, 0.25, 0.5, 0.75, 0.99, 1.0)] == [10, 20, 30, 40, 40, 40]
    assert values == [40, 10, 30, 20]


def test_every_count_is_exercised(metrics: Metrics) -> None:
    """Guard against a metric silently dropping to zero: every field of the workload's metrics is set."""
    empty = Metrics()
    unset = [name for name in Metrics.__dataclass_fields__ if getattr(metrics, name) == getattr(empty, name)]
    # zero by the promise; no refusal stop nor cut at the limit in the workload: each counted in its own test
    assert unset == ["partial_tool_dispatches", "refused", "committed_cut", "output_limited"]
    assert Counter(type(r).__name__ for r in workload()[0].records("rejections")) == {"Rejected": 3}


def _renamed(record: Any, suffix: str) -> Any:
    if isinstance(record, ManifestIssued):
        manifest = record.manifest
        return record.model_copy(
            update={
                "manifest": manifest.model_copy(update={"conversation_id": manifest.conversation_id + suffix})
            }
        )
    return record.model_copy(update={"conversation_id": record.conversation_id + suffix})


def test_every_count_adds_up_over_two_copies_of_the_workload(metrics: Metrics) -> None:
    """The same workload under other conversation ids, twice: every count doubles, nothing is overwritten."""
    evidence = workload()[0]
    for stream, raws in evidence.raw.items():
        raws += [
            Raw(0, len(raws) + i, None, b"", _renamed(r.record, "-copy")) for i, r in enumerate(list(raws))
        ]
        evidence.raw[stream] = raws
    twice = compute(evidence, now_ms=NOW)
    for name in Metrics.__dataclass_fields__:
        once, both = getattr(metrics, name), getattr(twice, name)
        if isinstance(once, Counter):
            assert both == Counter({k: 2 * v for k, v in once.items()}), name
        elif isinstance(once, list):
            assert sorted(both) == sorted(once * 2), name
        elif isinstance(once, dict):
            assert both == {**once, **{k.replace("/", "-copy/", 1): v for k, v in once.items()}}, name
        elif name == "unknown_open_max_age_ms":
            assert both == once, name
        else:
            assert both == 2 * once, name
    assert twice.handle_recovery_rate == metrics.handle_recovery_rate


def _evidence(*conversations: Conversation) -> Evidence:
    evidence = Evidence()
    for c in conversations:
        evidence.raw.setdefault("ingress", []).extend(Raw(0, 0, None, b"", e) for e in _ingress(c))
        for record in c.outputs:
            evidence.raw.setdefault(STREAM_OF[type(record)].value, []).append(Raw(0, 0, None, b"", record))
    return evidence


def test_every_disconnect_of_an_operation_counts_not_only_its_first() -> None:
    """One operation, two generations: each generation's disconnect is counted on its own."""
    lost = Conversation("lost-twice")  # Anthropic: not resumable, twice
    lost.user("hello")
    lost.dispatch_to_streaming()
    lost.recovered()
    lost.terminated()
    lost.attempt()
    lost.sent(gen=2)
    lost.bind(gen=2, handle="msg_2")
    lost.recovered(gen=2)
    m = compute(_evidence(lost), now_ms=NOW)
    assert (m.disconnects_not_resumable, m.disconnects_without_handle, m.handle_episodes) == (2, 0, 0)

    early = Conversation("early-then-bound")  # no handle in generation 1, then an episode in generation 2
    early.user("hello")
    adapter, provider, model = RESPONSES
    early.apply(
        DispatchRequested(
            **early._common(),
            operation_id="op-1",
            adapter=adapter,
            provider=provider,
            model_revision=model,
            max_output_tokens=256,
            policy={"stream": True, "background": True},
        )
    )
    early.attempt()
    early.sent()
    early.recovered()
    early.terminated()
    early.attempt()
    early.sent(gen=2)
    early.bind(gen=2, handle="resp_2", resumable=True)
    early.recovered(gen=2)
    early.resume(gen=2, handle="resp_2")
    early.deltas(text_stream(["ok"], handle="resp_2", gen=2), gen=2)
    m = compute(_evidence(early), now_ms=NOW)
    assert (m.disconnects_without_handle, m.handle_episodes, m.handle_recovered) == (1, 1, 1)


def test_an_answer_the_provider_refused_is_counted_as_refused_not_as_a_cancel_or_a_give_up() -> None:
    """The fold settles a refusal stop CANCELLED PROVIDER_REFUSED with no cancel behind it: it was counted
    as a worker's give-up (the reason of the worker's give-up on a refused request is the same)."""
    refusals = answered("anthropic_refusal.sse"), answered("openai_chat_content_filter.sse", "op-2")
    m = compute(_evidence(*refusals), now_ms=NOW)
    assert (m.refused, m.cancelled, m.given_up) == (2, 0, {})
    assert dict(m.final_states) == {"CANCELLED (provider refused)": 2}


def test_an_answer_committed_cut_at_the_output_limit_is_counted_apart_from_whole_ones() -> None:
    """Its COMMITTED decision says OUTPUT_LIMIT_REACHED; a whole answer's says nothing. Two cuts count two;
    a log holding only a refusal that repeats COMMITTED (no accepted commit of the operation in it) is
    judged by that refusal's reason."""
    for name, cut in (("openai_chat_length_text.sse", 1), ("anthropic_stop_sequence.sse", 0)):
        m = compute(_evidence(answered(name)), now_ms=NOW)
        assert (m.committed, m.committed_cut, dict(m.final_states)) == (1, cut, {"COMMITTED": 1}), name
    cuts = answered("openai_chat_length_text.sse"), answered("gemini_max_tokens_text.sse", "op-2")
    m = compute(_evidence(*cuts), now_ms=NOW)
    assert (m.committed, m.committed_cut) == (2, 2)
    [commit] = [d for d in cuts[0].of(DispatchDecision) if d.state == DispatchState.COMMITTED]
    evidence = Evidence()
    evidence.raw["manifests"] = [Raw(0, 0, None, b"", commit.model_copy(update={"accepted": False}))]
    refused_only = compute(evidence, now_ms=NOW)
    assert (refused_only.committed, refused_only.committed_cut) == (1, 1)


def test_an_answer_with_nothing_visible_is_counted_committed_as_an_empty_one_is() -> None:
    """COMMITTED EMPTY_RESPONSE with no turn (`lifecycle.NOTHING_VISIBLE`): an operation committed at its
    generation, as it was when its thinking or blank text committed, never cut; the retraction of its
    blank text's previews is counted."""
    thinking = streamed("anthropic-messages", anthropic_thinking_only())
    blank = streamed("openai-chat", chat_blank_text(), "op-2")
    m = compute(_evidence(thinking, blank), now_ms=NOW)
    assert (m.operations, m.committed, m.committed_cut, m.cancelled, m.preview_retractions) == (2, 2, 0, 0, 1)
    assert (dict(m.final_states), dict(m.generations)) == ({"COMMITTED": 2}, {1: 2})


def test_an_answer_cut_at_the_output_limit_is_counted_on_its_own_line() -> None:
    """The fold settles it CANCELLED OUTPUT_LIMIT_REACHED with no cancel behind it: not a client's cancel,
    not a worker's give-up (before, the worker's new generations ended in one). A call cut, and thinking
    alone: one each."""
    cuts = answered("openai_chat_truncated_length.sse"), answered("anthropic_max_tokens_thinking.sse", "op-2")
    m = compute(_evidence(*cuts), now_ms=NOW)
    assert (m.output_limited, m.refused, m.cancelled, m.given_up) == (2, 0, 0, {})
    assert dict(m.final_states) == {"CANCELLED (output limit)": 2}
