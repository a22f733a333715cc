"""The demo's gateway: drives conversations through the ledger the way a gateway would.

Per conversation: a user turn and a dispatch request; after a committed assistant turn
with tool calls, the next dispatch at once (the fold keeps it WAITING until the tool
executor's results commit, then PREPARES it); after a text answer, the next user turn.
A few conversations also submit invalid tool results at the end (an orphaned result,
a duplicate result) so the validator's rejections show up in the report. The driver
learns outcomes only from the output topics.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field

from turnledger.gateway.client import GatewayClient, ToolResult
from turnledger.gateway.tool_executor import DEMO_TOOLS
from turnledger.model.base import Frozen
from turnledger.model.events import CommittedTurn, DispatchDecision, DispatchState
from turnledger.model.graph import BlockKind

S = DispatchState
SETTLED_FAILURES = frozenset({S.REJECTED, S.PAUSED, S.CANCELLED})

ADAPTERS: tuple[tuple[str, str, str], ...] = (
    ("anthropic-messages@1", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    ("openai-chat@1", "openai", "openai/gpt-4o@2024-08"),
    ("openai-responses@1", "openai", "openai/gpt-4.1@2025-04"),
)
QUESTIONS = (
    "What is the weather in Lisbon, and is invoice INV-1042 paid?",
    "Check the weather for Oslo please.",
    "Can you look up invoice INV-7 for me?",
    "Compare the weather in Paris and Rome.",
    "Summarize where we are.",
)


@dataclass
class DriverStats:
    completed: int = 0
    failed: int = 0
    stalled: int = 0
    user_turns: int = 0
    dispatches: int = 0
    tool_rounds: int = 0
    invalid_submitted: Counter[str] = field(default_factory=Counter)


class Driver:
    def __init__(
        self,
        client: GatewayClient,
        *,
        seed: int = 0,
        turns: int = 2,
        invalid_rate: float = 0.08,
        op_timeout_s: float = 60.0,
        max_output_tokens: int = 512,
    ) -> None:
        self.client = client
        self.rng = random.Random(seed)
        self.turns = turns
        self.invalid_rate = invalid_rate
        self.op_timeout_s = op_timeout_s
        self.max_output_tokens = max_output_tokens
        self.stats = DriverStats()
        self._waiting: dict[str, asyncio.Future[Frozen]] = {}

    # -- outputs -------------------------------------------------------------------------

    async def observe(self, records: list[Frozen]) -> None:
        for record in records:
            if (isinstance(record, CommittedTurn) and record.operation_id) or (
                isinstance(record, DispatchDecision) and record.state in SETTLED_FAILURES
            ):
                self._resolve(record.operation_id, record)

    def _resolve(self, operation_id: str, record: Frozen) -> None:
        future = self._waiting.get(operation_id)
        if future is not None and not future.done():
            future.set_result(record)

    # -- one conversation -----------------------------------------------------------------

    async def conversation(self, index: int) -> None:
        conv = f"conv-{index:05d}-{uuid.uuid4().hex[:6]}"
        adapter, provider, model = ADAPTERS[index % len(ADAPTERS)]
        answered: list[ToolResult] = []
        for turn in range(self.turns):
            await self.client.submit_user_turn(conv, QUESTIONS[(index + turn) % len(QUESTIONS)])
            self.stats.user_turns += 1
            for _round in range(4):
                outcome = await self._dispatch(conv, adapter, provider, model)
                if outcome is None:
                    self.stats.stalled += 1
                    return
                if isinstance(outcome, DispatchDecision):
                    self.stats.failed += 1
                    return
                assert isinstance(outcome, CommittedTurn)
                calls = [b for b in outcome.blocks if b.kind == BlockKind.TOOL_CALL]
                if not calls:
                    break
                self.stats.tool_rounds += 1
                answered.extend(
                    ToolResult(
                        b.call_id or "", b.tool_name or "", b.argument_digest or "", b.generation or 0, "ok"
                    )
                    for b in calls
                )
        await self._maybe_invalid(conv, answered)
        self.stats.completed += 1

    async def _dispatch(self, conv: str, adapter: str, provider: str, model: str) -> Frozen | None:
        op = f"op-{uuid.uuid4().hex[:16]}"
        future: asyncio.Future[Frozen] = asyncio.get_running_loop().create_future()
        self._waiting[op] = future
        try:
            await self.client.request_dispatch(
                conv,
                operation_id=op,
                adapter=adapter,
                provider=provider,
                model_revision=model,
                tools=DEMO_TOOLS,
                max_output_tokens=self.max_output_tokens,
            )
            self.stats.dispatches += 1
            try:
                return await asyncio.wait_for(future, self.op_timeout_s)
            except TimeoutError:
                return None
        finally:
            self._waiting.pop(op, None)

    async def _maybe_invalid(self, conv: str, answered: list[ToolResult]) -> None:
        """Invalid submissions the validator must refuse: they must never reach a provider."""
        if self.rng.random() < self.invalid_rate:
            orphan = ToolResult(
                f"call_orphan_{uuid.uuid4().hex[:8]}", "get_weather", "sha256:" + "0" * 64, 1, "{}"
            )
            await self.client.submit_tool_results(conv, [orphan])
            self.stats.invalid_submitted["orphaned_result"] += 1
        if answered and self.rng.random() < self.invalid_rate:
            again = answered[0]
            await self.client.submit_tool_results(conv, [again], turn_id=f"dup-{uuid.uuid4().hex[:8]}")
            self.stats.invalid_submitted["duplicate_result"] += 1
