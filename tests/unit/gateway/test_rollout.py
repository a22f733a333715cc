"""The rollout switch and the legacy recorder, against the real fold (in-memory ledger) and the fake provider.

Stage 2 of the spec's rollout: the protocol sends requests without tools, the legacy
gateway keeps the tool turns, and its answers reach the history through the same CAS.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from tests.unit.gateway.test_worker import Harness
from turnledger.fake_provider import FakeProvider
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.legacy import (
    RECORDER_ID,
    LegacyExchange,
    LegacyExchangeError,
    LegacyRecorder,
    RecordOutcome,
    parse_exchanges,
)
from turnledger.gateway.provider_request import send_request
from turnledger.gateway.rollout import EMPTY_TOOLSET_DIGEST, RolloutStage, protocol_sends, uses_tools
from turnledger.gateway.tool_executor import ToolExecutor
from turnledger.gateway.worker import GIVE_UP_PREFIX, DispatchWorker, WorkerConfig
from turnledger.model.events import (
    CommittedTurn,
    DispatchAttempt,
    DispatchDecision,
    DispatchState,
    ManifestIssued,
    ToolCallReady,
)
from turnledger.model.graph import BlockRef
from turnledger.model.manifest import DispatchManifest
from turnledger.model.reasons import ReasonCode
from turnledger.topology import Stream

S = DispatchState
ANTHROPIC = "anthropic-messages@1"


def _manifests(records: list) -> list:  # type: ignore[type-arg]
    return [r for r in records if isinstance(r, (ManifestIssued, DispatchDecision))]


async def _harness(stage: RolloutStage) -> AsyncIterator[Harness]:
    ledger = InMemoryLedger()
    async with FakeProvider(seed=3) as fp:
        config = WorkerConfig(settle_timeout_s=10, rollout_stage=stage)
        routes = endpoints_for(fp.base_url, fp.keys.as_env())
        async with DispatchWorker(ledger, routes, config=config) as worker:

            async def observe(records: list) -> None:  # type: ignore[type-arg]
                await worker.observe(_manifests(records))

            ledger.subscribe(Stream.MANIFESTS, observe)
            await worker.go_live()
            yield Harness(ledger, fp, worker)


@pytest.fixture
async def stage2() -> AsyncIterator[Harness]:
    async for h in _harness(RolloutStage.WITHOUT_TOOLS):
        yield h


def _manifest(conv: str, h: Harness) -> DispatchManifest:
    found = [m.manifest for m in h.ledger.of_type(ManifestIssued) if m.manifest.conversation_id == conv]
    assert len(found) == 1
    return found[0]


async def _legacy_send(h: Harness, manifest: DispatchManifest) -> bytes:
    """What the legacy gateway does in stage 2: send a tool request itself and keep the raw answer."""
    endpoint = endpoints_for(h.fp.base_url, h.fp.keys.as_env()).endpoint_for(manifest)
    request = send_request(endpoint, manifest, "")
    async with httpx.AsyncClient() as http:
        response = await http.post(request.url, content=request.content, headers=dict(request.headers))
    assert response.status_code == 200
    return response.content


async def _record(h: Harness, exchanges: list[LegacyExchange]) -> LegacyRecorder:
    recorder = LegacyRecorder(h.ledger, exchanges, settle_timeout_s=10)
    await recorder.__aenter__()
    await recorder.observe(_manifests(h.ledger.records(Stream.MANIFESTS)))  # catch up

    async def observe(records: list) -> None:  # type: ignore[type-arg]
        await recorder.observe(_manifests(records))

    h.ledger.subscribe(Stream.MANIFESTS, observe)
    await recorder.go_live()
    return recorder


async def _settle(recorder: LegacyRecorder) -> None:
    for _ in range(500):
        if not recorder.busy:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the recorder did not settle")


# -- the rule table ------------------------------------------------------------------------


async def test_rule_table_over_real_manifests(stage2: Harness) -> None:
    await stage2.converse("plain", ANTHROPIC, text="hello", tools=False)
    await stage2.converse("tools", ANTHROPIC, tools=True)
    plain, tools = _manifest("plain", stage2), _manifest("tools", stage2)
    assert plain.toolset_digest == EMPTY_TOOLSET_DIGEST and tools.toolset_digest != EMPTY_TOOLSET_DIGEST
    history_only = plain.model_copy(
        update={"blocks": (*plain.blocks, BlockRef(id="r", role="tool", kind="tool_result", digest="d"))}
    )
    expected = {
        RolloutStage.MANIFESTS_ONLY: (False, False, False),
        RolloutStage.WITHOUT_TOOLS: (True, False, False),
        RolloutStage.ALL: (True, True, True),
    }
    for stage, row in expected.items():
        assert tuple(protocol_sends(stage, m) for m in (plain, tools, history_only)) == row, stage
    assert [uses_tools(m) for m in (plain, tools, history_only)] == [False, True, True]


# -- the worker at each stage --------------------------------------------------------------


async def test_without_tools_sends_only_the_request_without_tools(stage2: Harness) -> None:
    await stage2.converse("plain", ANTHROPIC, text="hello", tools=False)
    await stage2.converse("tools", ANTHROPIC, tools=True)
    await stage2.wait_state("op-1", S.COMMITTED, conversation="plain")
    await stage2.wait_state("op-1", S.PREPARED, conversation="tools")
    posts = [r.body for r in stage2.fp.requests if r.method == "POST"]
    assert posts == [_manifest("plain", stage2).request_body.encode()]
    assert stage2.worker.stats.counts["not_taken"] == 1
    assert [t.conversation_id for t in stage2.ledger.of_type(CommittedTurn) if t.operation_id] == ["plain"]


async def test_manifests_only_sends_nothing() -> None:
    async for h in _harness(RolloutStage.MANIFESTS_ONLY):
        await h.converse("plain", ANTHROPIC, text="hello", tools=False)
        await h.converse("tools", ANTHROPIC, tools=True)
        for conv in ("plain", "tools"):
            await h.wait_state("op-1", S.PREPARED, conversation=conv)
        assert h.fp.requests == []
        assert h.worker.stats.counts["not_taken"] == 2
        assert not [e for e in h.ledger.ingress if isinstance(e, DispatchAttempt)]


# -- the legacy recorder -------------------------------------------------------------------


async def test_legacy_answer_of_a_tool_turn_is_committed_through_the_cas(stage2: Harness) -> None:
    h = stage2
    executor = ToolExecutor(h.ledger, rollout_stage=RolloutStage.WITHOUT_TOOLS)

    async def run_tools(records: list) -> None:  # type: ignore[type-arg]
        await executor.handle([r for r in records if isinstance(r, ToolCallReady)])

    h.ledger.subscribe(Stream.TOOL_CALLS, run_tools)
    await h.converse("tools", ANTHROPIC, tools=True)
    await h.wait_state("op-1", S.PREPARED, conversation="tools")
    manifest = _manifest("tools", h)
    answer = await _legacy_send(h, manifest)

    recorder = await _record(h, [LegacyExchange("tools", "op-1", answer)])
    await _settle(recorder)
    try:
        [result] = recorder.results()
        assert (result.outcome, result.state) == (RecordOutcome.COMMITTED, "COMMITTED")
        attempts = [e for e in h.ledger.ingress if isinstance(e, DispatchAttempt)]
        assert [(a.conversation_id, a.worker_id) for a in attempts] == [("tools", RECORDER_ID)]
        assistant = [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id == "op-1"]
        assert len(assistant) == 1 and assistant[0].attempt_generation == 1
        calls = h.ledger.of_type(ToolCallReady)
        assert calls and all(isinstance(json.loads(c.arguments), dict) for c in calls)
        assert [b.kind for b in assistant[0].blocks if b.kind == "tool_call"] == ["tool_call"] * len(calls)
        # the legacy gateway runs tool turns' calls before stage `all`: ours ran none
        assert (executor.calls_run, executor.left_to_legacy) == (0, len(calls))
        # the protocol's worker never sent the tool request
        assert [r for r in h.fp.requests if r.method == "POST"] == [h.fp.requests[0]]
        assert recorder.provider.served == [("tools", "op-1")]
    finally:
        await recorder.__aexit__()


@pytest.mark.parametrize("cut", [1 / 4, 1 / 2, 3 / 4])
async def test_truncated_legacy_answer_commits_nothing_and_cancels(stage2: Harness, cut: float) -> None:
    h = stage2
    await h.converse("tools", ANTHROPIC, tools=True)
    await h.wait_state("op-1", S.PREPARED, conversation="tools")
    answer = await _legacy_send(h, _manifest("tools", h))
    recorder = await _record(h, [LegacyExchange("tools", "op-1", answer[: int(len(answer) * cut)])])
    await _settle(recorder)
    try:
        [result] = recorder.results()
        assert (result.outcome, result.state) == (RecordOutcome.GAVE_UP, "CANCELLED")
        assert result.detail.startswith(GIVE_UP_PREFIX) and "1 attempts failed" in result.detail
        assert [e.worker_id for e in h.ledger.ingress if isinstance(e, DispatchAttempt)] == [RECORDER_ID]
        assert not [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id]
        assert h.ledger.of_type(ToolCallReady) == []
    finally:
        await recorder.__aexit__()


async def test_recorder_reports_what_it_cannot_record_and_leaves_it_alone(stage2: Harness) -> None:
    h = stage2
    await h.converse("plain", ANTHROPIC, text="hello", tools=False)
    await h.wait_state("op-1", S.COMMITTED, conversation="plain")
    await h.converse("tools", ANTHROPIC, tools=True)  # same operation id, another conversation
    await h.wait_state("op-1", S.PREPARED, conversation="tools")
    attempts_before = [e for e in h.ledger.ingress if isinstance(e, DispatchAttempt)]
    exchanges = [
        LegacyExchange("plain", "op-1", b"data: {}\n\n"),  # committed by the protocol already
        LegacyExchange("nobody", "op-9", b"data: {}\n\n"),
    ]
    recorder = await _record(h, exchanges)
    await _settle(recorder)
    try:
        outcomes = {(r.conversation_id, r.operation_id): (r.outcome, r.state) for r in recorder.results()}
        assert outcomes == {
            ("plain", "op-1"): (RecordOutcome.ALREADY_FINAL, "COMMITTED"),
            ("nobody", "op-9"): (RecordOutcome.NOT_FOUND, None),
        }
        assert [e for e in h.ledger.ingress if isinstance(e, DispatchAttempt)] == attempts_before
        assert recorder.provider.served == []
        # the tool turn of the other conversation with the same id was not listed: untouched
        assert h.worker.board.latest[("tools", "op-1")].state == S.PREPARED
    finally:
        await recorder.__aexit__()


# -- the exchanges file --------------------------------------------------------------------


def test_parse_exchanges_reads_lines_and_skips_blank_ones() -> None:
    lines = [
        '{"conversationId": "c1", "operationId": "op-1", "response": "data: x\\n\\n"}',
        "",
        '{"conversationId": "c2", "operationId": "op-1", "response": "event: e", "status": 529}',
    ]
    assert parse_exchanges(lines) == [
        LegacyExchange("c1", "op-1", b"data: x\n\n", 200),
        LegacyExchange("c2", "op-1", b"event: e", 529),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"conversationId": "c1", "response": "x"}', "missing or empty string field(s): operationId"),
        ('{"conversationId": "", "operationId": "o", "response": 3}', "conversationId, response"),
        ('{"conversationId": "c", "operationId": "o", "response": "x", "status": "200"}', "HTTP status"),
        ('{"conversationId": "c", "operationId": "o", "response": "x", "status": true}', "HTTP status"),
        ('{"conversationId": "c", "operationId": "o", "response": "x", "status": 99}', "HTTP status"),
    ],
)
def test_parse_exchanges_names_the_bad_line(line: str, reason: str) -> None:
    good = '{"conversationId": "c0", "operationId": "o", "response": "x"}'
    with pytest.raises(LegacyExchangeError) as info:
        parse_exchanges([good, line], "legacy.jsonl")
    assert info.value.line == 2 and reason in info.value.reason
    assert str(info.value).startswith("legacy.jsonl:2: ")


def test_parse_exchanges_refuses_an_operation_named_twice() -> None:
    line = '{"conversationId": "c", "operationId": "o", "response": "x"}'
    with pytest.raises(LegacyExchangeError, match=r"<exchanges>:3: operation 'o' of 'c' twice"):
        parse_exchanges([line, "", line])


async def test_recorded_answer_of_a_superseded_manifest_commits_nothing() -> None:
    """The conversation moved on after the manifest: the operation was superseded, nothing is recorded."""
    async for h in _harness(RolloutStage.MANIFESTS_ONLY):
        await h.converse("c1", ANTHROPIC, text="hello", tools=False)
        await h.wait_state("op-1", S.PREPARED)
        answer = await _legacy_send(h, _manifest("c1", h))
        await h.ledger.append(h.factory.user_turn("c1", "and one more thing"))
        recorder = await _record(h, [LegacyExchange("c1", "op-1", answer)])
        await _settle(recorder)
        try:
            [result] = recorder.results()
            assert (result.outcome, result.state, result.ok) == (
                RecordOutcome.ALREADY_FINAL,
                "CANCELLED",
                False,
            )
            final = [d for d in h.ledger.of_type(DispatchDecision) if d.operation_id == "op-1"][-1]
            assert (final.state, final.reason) == (S.CANCELLED, ReasonCode.SUPERSEDED)
            assert recorder.provider.served == []  # refused before the send
            assert not [t for t in h.ledger.of_type(CommittedTurn) if t.operation_id]
        finally:
            await recorder.__aexit__()
