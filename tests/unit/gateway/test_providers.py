"""Every API through the worker, the real fold (in-memory ledger) and the fake provider, with the
credentials the fake checks: a commit, a tool round, a disconnect and retry, truncated arguments;
an adapter with no route settles; a missing credential is refused as the API refuses it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping

import pytest

from tests.unit.gateway.ledger import InMemoryLedger
from turnledger.fake_provider import FakeProvider, FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.gateway.client import EventFactory, stream_policy
from turnledger.gateway.endpoints import ProviderRoutes, endpoints_for
from turnledger.gateway.tool_executor import DEMO_TOOLS, ToolExecutor
from turnledger.gateway.worker import DispatchWorker, WorkerConfig, gave_up
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    HandleBound,
    ManifestIssued,
    ToolCallReady,
)
from turnledger.model.graph import BlockKind
from turnledger.model.reasons import ReasonCode
from turnledger.topology import Stream

S = DispatchState

#: adapter → (provider, model revision, API path prefix on the wire)
APIS: Mapping[str, tuple[str, str, str]] = {
    "anthropic-messages@2": ("anthropic", "anthropic/claude-sonnet-4@2025-05", "/v1/messages"),
    "openai-chat@2": ("openai", "openai/gpt-4o@2024-08", "/v1/chat/completions"),
    "openai-responses@2": ("openai", "openai/gpt-4.1@2025-04", "/v1/responses"),
    "gemini@2": (
        "google",
        "google/gemini-2.5-pro@2025-06",
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
    ),
    "bedrock-converse@1": ("bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05", "/model/"),
}
ROLLBACK = {"anthropic-messages@0": ("anthropic", "anthropic/claude-sonnet-4@2025-05", "/v1/messages")}


class Harness:
    def __init__(self, ledger: InMemoryLedger, fp: FakeProvider, worker: DispatchWorker) -> None:
        self.ledger, self.fp, self.worker = ledger, fp, worker
        self.factory = EventFactory()

    async def converse(
        self, conv: str, adapter: str, op: str = "op-1", text: str = "weather in Paris?", tools: bool = True
    ) -> None:
        await self.ledger.append(self.factory.user_turn(conv, text))
        await self.request(conv, adapter, op, tools=tools)

    async def request(self, conv: str, adapter: str, op: str, tools: bool = True) -> None:
        provider, model, _ = {**APIS, **ROLLBACK}[adapter]
        await self.ledger.append(
            DispatchRequested(
                **self.factory.stamp(conv),
                operation_id=op,
                adapter=adapter,
                provider=provider,
                model_revision=model,
                tools=DEMO_TOOLS if tools else (),
                max_output_tokens=512,
                policy=stream_policy(adapter),
            )
        )

    async def settled(self, conv: str, op: str, timeout: float = 15.0) -> DispatchDecision:
        """The operation's final decision once the worker is idle (a condition, polled)."""
        final = {S.COMMITTED, S.CANCELLED, S.REJECTED, S.PAUSED}
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            latest = self.worker.board.latest.get((conv, op))
            if latest is not None and latest.state in final and not self.worker.busy:
                return latest
            await asyncio.sleep(0.01)
        raise AssertionError(f"{conv}/{op} did not settle: {self.worker.board.latest.get((conv, op))}")

    def assistant_turns(self, conv: str) -> list[CommittedTurn]:
        return [t for t in self.ledger.of_type(CommittedTurn) if t.conversation_id == conv and t.operation_id]

    def posts(self) -> list[bytes]:
        return [r.body for r in self.fp.requests if r.method == "POST"]


def _with_keys(fp: FakeProvider) -> ProviderRoutes:
    return endpoints_for(fp.base_url, fp.keys.as_env())


async def _harness(
    plan: FaultPlan | None = None,
    routes_of: Callable[[FakeProvider], ProviderRoutes] = _with_keys,
    tools_run: bool = False,
) -> AsyncIterator[Harness]:
    ledger = InMemoryLedger()
    async with FakeProvider(seed=4, fault_plan=plan) as fp:
        config = WorkerConfig(settle_timeout_s=10, max_attempts=3)
        routes = routes_of(fp)
        async with DispatchWorker(ledger, routes, config=config) as worker:

            async def observe(records: list) -> None:  # type: ignore[type-arg]
                await worker.observe([r for r in records if isinstance(r, ManifestIssued | DispatchDecision)])

            ledger.subscribe(Stream.MANIFESTS, observe)
            if tools_run:
                executor = ToolExecutor(ledger)

                async def run_tools(records: list) -> None:  # type: ignore[type-arg]
                    await executor.handle([r for r in records if isinstance(r, ToolCallReady)])

                ledger.subscribe(Stream.TOOL_CALLS, run_tools)
            await worker.go_live()
            yield Harness(ledger, fp, worker)


@pytest.mark.parametrize("adapter", [*APIS, *ROLLBACK])
async def test_tool_round_commits_calls_then_an_answer_that_pairs_every_result(adapter: str) -> None:
    async for h in _harness(tools_run=True):
        await h.converse("c1", adapter)
        first = await h.settled("c1", "op-1")
        assert first.state == S.COMMITTED and first.attempt_generation == 1
        [calls_turn] = h.assistant_turns("c1")
        calls = [b for b in calls_turn.blocks if b.kind == BlockKind.TOOL_CALL]
        assert calls and len(h.ledger.of_type(ToolCallReady)) == len(calls)
        await h.request("c1", adapter, "op-2")
        second = await h.settled("c1", "op-2")
        assert second.state == S.COMMITTED
        answer = h.assistant_turns("c1")[-1]
        assert [b.kind for b in answer.blocks] == ["text"]
        # the fake names every result it was given: each one reached it, paired with its call
        assert answer.blocks[0].text is not None and answer.blocks[0].text.count(" returned: ") == len(calls)
        manifests = [m.manifest for m in h.ledger.of_type(ManifestIssued)]
        assert h.posts() == [m.request_body.encode() for m in manifests]
        assert all(
            r.path.startswith(APIS.get(adapter, ROLLBACK.get(adapter, ("", "", "")))[2])
            for r in h.fp.requests
        )
        assert h.fp.auth_failures == []


@pytest.mark.parametrize("adapter", list(APIS))
async def test_plain_commit_binds_the_handle_first(adapter: str) -> None:
    async for h in _harness():
        await h.converse("c1", adapter, text="tell me something", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED
        [bound] = [e for e in h.ledger.ingress if isinstance(e, HandleBound)]
        [post] = [r for r in h.fp.requests if r.method == "POST"]
        assert bound.response_handle == post.response_id and bound.response_handle
        [turn] = h.assistant_turns("c1")
        assert [b.kind for b in turn.blocks] == ["text"]


@pytest.mark.parametrize("adapter", list(APIS))
async def test_disconnect_then_a_new_generation_or_a_resume_commits_once(adapter: str) -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 600),)})
    async for h in _harness(plan):
        await h.converse("c1", adapter, text="tell me something", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED
        resumed = adapter.startswith("openai-responses")  # background + stream: kept by the provider
        assert final.attempt_generation == (1 if resumed else 2)
        assert [r.method for r in h.fp.requests] == (["POST", "GET"] if resumed else ["POST", "POST"])
        assert len(h.assistant_turns("c1")) == 1


@pytest.mark.parametrize("adapter", list(APIS))
async def test_truncated_arguments_never_commit_the_retry_does(adapter: str) -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.TRUNCATED_ARGS),)})
    async for h in _harness(plan):
        await h.converse("c1", adapter)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        [turn] = h.assistant_turns("c1")
        assert turn.attempt_generation == 2
        calls = h.ledger.of_type(ToolCallReady)
        assert calls and all(c.attempt_generation == 2 and json.loads(c.arguments) for c in calls)
        posts = h.posts()
        assert len(posts) == 2 and posts[0] == posts[1]


async def test_an_adapter_without_a_route_settles_with_a_reason_naming_it() -> None:
    def only_openai_chat(fp: FakeProvider) -> ProviderRoutes:
        return ProviderRoutes([r for r in _with_keys(fp).routes if r.name == "openai-chat"])

    async for h in _harness(routes_of=only_openai_chat):
        await h.converse("c1", "gemini@2")
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final)
        assert final.reason == ReasonCode.NO_PROVIDER_ENDPOINT
        assert "no provider endpoint configured for adapter gemini@2" in final.detail
        assert h.fp.requests == []
        assert h.worker.stats.counts["no_endpoint"] == 1


@pytest.mark.parametrize("adapter", list(APIS))
async def test_without_credentials_the_api_refuses_and_the_operation_gives_up(adapter: str) -> None:
    async for h in _harness(routes_of=lambda fp: endpoints_for(fp.base_url)):  # no credential in env
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final)
        expected = 403 if adapter.split("@")[0] in ("gemini", "bedrock-converse") else 401
        assert [status for _, status in h.fp.auth_failures] == [expected] * 3
        assert h.worker.stats.counts[f"http_{expected}"] == 3
        assert not h.assistant_turns("c1")
