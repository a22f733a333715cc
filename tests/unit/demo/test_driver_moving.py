"""The demo's driver sends a moving conversation's every dispatch to the next API's current adapter, with
the policy that asks it to think, and counts the moves (`turnledger/demo/moving.py`). The driver's client
here appends to a list instead of Kafka and answers each dispatch at once on the driver's outputs: a tool
call to the first dispatch of a user turn, text to the next."""

from __future__ import annotations

from turnledger.adapters.registry import LATEST
from turnledger.demo.driver import ADAPTERS, Driver
from turnledger.demo.moving import THINKING_MAX_OUTPUT_TOKENS, THINKING_POLICIES
from turnledger.gateway.client import GatewayClient, stream_policy
from turnledger.model.events import CommittedTurn, DispatchRequested, IngressEvent, TurnSubmitted
from turnledger.model.graph import Block, BlockKind
from turnledger.model.limits import DEFAULT_LIMITS

RESPONSES_POLICY = {**stream_policy(LATEST["openai-responses"]), **THINKING_POLICIES["openai-responses"]}


class AnsweringClient(GatewayClient):
    def __init__(self) -> None:  # no Kafka producer: `append` is this class's own
        self.limits = DEFAULT_LIMITS
        self.driver: Driver | None = None
        self.events: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.events.append(event)
        if isinstance(event, DispatchRequested):
            assert self.driver is not None
            await self.driver.observe([self._answer(event)])

    def _answer(self, request: DispatchRequested) -> CommittedTurn:
        since_user = 0
        for event in reversed(self.events[:-1]):
            if isinstance(event, TurnSubmitted):
                break
            since_user += isinstance(event, DispatchRequested)
        kind = BlockKind.TOOL_CALL if since_user == 0 else BlockKind.TEXT
        n = len(self.events)
        block = Block(
            id=f"b{n}", role="assistant", kind=kind, turn_id=f"t{n}", revision=n, ordering=n,
            trust_label="model", text="sunny" if kind == BlockKind.TEXT else None,
            call_id=f"call_{n}" if kind == BlockKind.TOOL_CALL else None,
            tool_name="get_weather" if kind == BlockKind.TOOL_CALL else None,
            argument_digest="sha256:" + "1" * 64 if kind == BlockKind.TOOL_CALL else None,
            generation=1 if kind == BlockKind.TOOL_CALL else None,
        )  # fmt: skip
        return CommittedTurn(
            conversation_id=request.conversation_id, revision=n, turn_id=f"t{n}", source_event_id=f"e{n}",
            operation_id=request.operation_id, attempt_generation=1, blocks=(block,), occurred_at_ms=n,
        )  # fmt: skip

    def dispatched(self) -> list[tuple[str, str, str, dict[str, object]]]:
        return [
            (e.adapter, e.provider, e.model_revision, dict(e.policy))
            for e in self.events
            if isinstance(e, DispatchRequested)
        ]


async def _drive(index: int, **rates: float) -> tuple[Driver, AnsweringClient]:
    client = AnsweringClient()
    driver = Driver(client, seed=7, turns=2, invalid_rate=0.0, op_timeout_s=5.0, **rates)
    client.driver = driver
    await driver.conversation(index)
    return driver, client


async def test_a_moving_conversation_sends_each_dispatch_to_the_next_api_asking_it_to_think() -> None:
    driver, client = await _drive(0, move_rate=1.0)
    assert client.dispatched() == [
        (LATEST["anthropic-messages"], "anthropic", "anthropic/claude-sonnet-4@2025-05",
         {**stream_policy(LATEST["anthropic-messages"]), **THINKING_POLICIES["anthropic-messages"]}),
        (LATEST["openai-responses"], "openai", "openai/o4-mini@2025-04", RESPONSES_POLICY),
        (LATEST["gemini"], "google", "google/gemini-2.5-pro@2025-06", THINKING_POLICIES["gemini"]),
        (LATEST["bedrock-converse"], "bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05",
         THINKING_POLICIES["bedrock-converse"]),
    ]  # fmt: skip
    budgets = [e.max_output_tokens for e in client.events if isinstance(e, DispatchRequested)]
    assert budgets == [THINKING_MAX_OUTPUT_TOKENS] * 4
    s = driver.stats
    assert (len(s.moving), s.api_changes, s.dispatches, s.tool_rounds, s.completed) == (1, 3, 4, 2, 1)
    assert s.moving == [client.events[0].conversation_id]
    assert s.moving[0].startswith("conv-00000-")


async def test_a_conversation_that_does_not_move_stays_on_its_adapter_with_no_thinking() -> None:
    driver, client = await _drive(1, move_rate=0.0)
    adapter, provider, model = ADAPTERS[1]
    assert client.dispatched() == [(adapter, provider, model, stream_policy(adapter))] * 4
    assert (driver.stats.moving, driver.stats.api_changes, driver.stats.completed) == ([], 0, 1)


async def test_a_cancelling_or_interjecting_conversation_does_not_move() -> None:
    """Every dispatch of a moving conversation is to complete (demo check): none is cancelled on purpose."""
    for rates in ({"cancel_rate": 1.0}, {"interject_rate": 1.0}):
        driver, client = await _drive(1, move_rate=1.0, **rates)
        assert (driver.stats.moving, driver.stats.api_changes) == ([], 0), rates
        assert {d[0] for d in client.dispatched()} == {ADAPTERS[1][0]}, rates
