"""The worker, the real fold (an in-memory ledger) and the fake provider with the credentials it
checks, set up for a test of every API (test_providers.py, test_provider_failures_worker.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx

from tests.unit.gateway.ledger import InMemoryLedger
from turnledger.fake_provider import FakeProvider, FaultPlan, ReceivedRequest
from turnledger.gateway.client import EventFactory, streaming_policy
from turnledger.gateway.endpoints import ProviderRoutes, endpoints_for
from turnledger.gateway.tool_executor import DEMO_TOOLS, ToolExecutor
from turnledger.gateway.worker import DispatchWorker, WorkerConfig
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchRequested,
    DispatchState,
    ManifestIssued,
    ToolCallReady,
)
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
LATEST = {
    "openai-responses@3": ("openai", "openai/o4-mini@2025-04", "/v1/responses"),
    "openai-responses@4": ("openai", "openai/o4-mini@2025-04", "/v1/responses"),
    "gemini@3": APIS["gemini@2"],
    "anthropic-messages@3": APIS["anthropic-messages@2"],
    "bedrock-converse@2": APIS["bedrock-converse@1"],
}
"""Adapters newer than those every API's tests run (test_signatures_worker.py)."""


class Harness:
    def __init__(self, ledger: InMemoryLedger, fp: FakeProvider, worker: DispatchWorker) -> None:
        self.ledger, self.fp, self.worker = ledger, fp, worker
        self.factory = EventFactory()

    async def converse(
        self,
        conv: str,
        adapter: str,
        op: str = "op-1",
        text: str = "weather in Paris?",
        tools: bool = True,
        model: str | None = None,
        policy: Mapping[str, Any] | None = None,
        max_output_tokens: int = 512,
    ) -> None:
        await self.ledger.append(self.factory.user_turn(conv, text))
        await self.request(
            conv, adapter, op, tools=tools, model=model, policy=policy, max_output_tokens=max_output_tokens
        )

    async def request(
        self,
        conv: str,
        adapter: str,
        op: str,
        tools: bool = True,
        settle_within_ms: int | None = None,
        model: str | None = None,
        policy: Mapping[str, Any] | None = None,
        max_output_tokens: int = 512,
    ) -> None:
        """`model`: a model revision other than the adapter's in `APIS` (the same route serves it);
        `policy`: dispatch policy keys beside the streaming ones; `max_output_tokens` above a thinking
        budget where the policy asks Claude to think (the ledger refuses one that is not)."""
        provider, model_of_api, _ = {**APIS, **ROLLBACK, **LATEST}[adapter]
        model = model or model_of_api
        await self.ledger.append(
            DispatchRequested(
                **self.factory.stamp(conv),
                operation_id=op,
                adapter=adapter,
                provider=provider,
                model_revision=model,
                tools=DEMO_TOOLS if tools else (),
                max_output_tokens=max_output_tokens,
                policy=streaming_policy(adapter, policy),
                settle_within_ms=settle_within_ms,
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


def with_keys(fp: FakeProvider) -> ProviderRoutes:
    return endpoints_for(fp.base_url, fp.keys.as_env())


async def harness(
    plan: FaultPlan | None = None,
    routes_of: Callable[[FakeProvider], ProviderRoutes] = with_keys,
    tools_run: bool = False,
    config: WorkerConfig | None = None,
    on_request: Callable[[FakeProvider, ReceivedRequest], None] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    thinking: bool = False,
    gemini_strict_signatures: bool = False,
) -> AsyncIterator[Harness]:
    """`config`: the worker's (else a 10 s settle timeout and 3 attempts); `on_request`: called as the
    fake receives each request, before it answers; `transport`: the worker's HTTP transport (a proxy in
    front of the fake), else its own client's; `thinking`: the fake thinks on every answer;
    `gemini_strict_signatures`: the fake's Gemini requires signatures as Gemini 3 does."""
    ledger = InMemoryLedger()
    provider: list[FakeProvider] = []

    def received(request: ReceivedRequest) -> None:
        if on_request is not None:
            on_request(provider[0], request)

    async with (
        FakeProvider(
            seed=4,
            fault_plan=plan,
            on_request=received,
            thinking=thinking,
            gemini_strict_signatures=gemini_strict_signatures,
        ) as fp,
        httpx.AsyncClient(transport=transport or httpx.AsyncHTTPTransport()) as http,
    ):
        provider.append(fp)
        config = config or WorkerConfig(settle_timeout_s=10, max_attempts=3)
        routes = routes_of(fp)
        async with DispatchWorker(
            ledger, routes, config=config, http=None if transport is None else http
        ) as worker:

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
