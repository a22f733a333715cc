"""The demo's gateway: drives conversations through the ledger the way a gateway would.

Per conversation: a user turn and a dispatch request; after a committed assistant turn
with tool calls, the next dispatch at once (the fold keeps it WAITING until the tool
executor's results commit, then PREPARES it); after a text answer, the next user turn.
A few conversations also submit invalid tool results at the end (an orphaned result,
a duplicate result) so the validator's rejections show up in the report, and a few
cancel their first dispatch mid-stream (they ask for a slow stream with a marker the
fake provider knows, wait for STREAMING and its first preview, then cancel): one in two of
those (`cancels_text`) offers no tools in that dispatch, so the answer is text and the cancel retracts
a preview that was shown; the others cancel an answer of tool calls, which shows none. A few
interject: the user speaks while the model streams, the operation is superseded (CANCELLED, SUPERSEDED) and
the conversation dispatches again at the new revision. A few move between APIs (none of those cancels or
interjects): each of their dispatches goes to another API's current adapter, asking it to think where
it can (`demo/moving.py`). Every dispatch asks for a
streaming request (`stream_policy`, rendered into the manifest bytes by the adapter). With every fault
kind, a few conversations' first questions carry a fault's marker (`fault_marker`, run.py's
`MARKED_FAULTS`): one answer is cut at the output limit inside a call, one has its call's arguments cut
mid-string, and one is thinking alone, which commits nothing (COMMITTED EMPTY_RESPONSE, no turn): that
conversation's user speaks next, as after a text answer.

The driver learns outcomes only from the output topics (`OBSERVED_STREAMS`): a committed turn, a
REJECTED / PAUSED / CANCELLED decision, or a COMMITTED one with no turn behind it (`commits_no_turn`);
and that an answer is mid-stream from the STREAMING decision and, for a text answer, its first preview
(`PREVIEW_WAIT_S`). (It waited for STREAMING alone before:
whether text had been shown when its cancel landed then depended on how fast the processor answered,
so a text answer cancelled "mid-stream" retracted a preview or not by timing, and a faster processor
made a run with no retraction at all. And every first dispatch offered tools, which the fake model always
answers with calls: no cancel met a text answer, and a run retracted a preview only where a fault cut a
text answer, which a CI run of 16 conversations did not draw.) A worker
that gives up on an operation cancels it with its reason (`gateway.worker.GIVE_UP_PREFIX`), so the
driver hears of it at once instead of waiting out its timeout. "Stalled" is only what got no outcome at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from turnledger.demo.moving import THINKING_MAX_OUTPUT_TOKENS, move_target, moves, thinking_policy
from turnledger.dispatch.state import FINAL_STATES
from turnledger.gateway.client import GatewayClient, ToolResult
from turnledger.gateway.tool_executor import DEMO_TOOLS
from turnledger.gateway.worker import gave_up
from turnledger.model.base import Frozen
from turnledger.model.events import CommittedTurn, DispatchDecision, DispatchState, PreviewUpdated
from turnledger.model.graph import BlockKind
from turnledger.model.reasons import ReasonCode
from turnledger.topology import Stream

S = DispatchState
SETTLED_FAILURES = frozenset({S.REJECTED, S.PAUSED, S.CANCELLED})
OBSERVED_STREAMS = (Stream.COMMITTED, Stream.MANIFESTS, Stream.PREVIEWS)
"""The output topics `Driver.observe` must be fed from (every caller tails these)."""

PREVIEW_WAIT_S = 1.0
"""How long a cancel or an interjection waits, once STREAMING, for the answer's first preview: a text
answer shows one within it, and an answer that is a tool call (no preview) is still streaming. (0.3 s
was too short on a slower machine under CI's load: a run cancelled every text answer before its first
preview, and so retracted none.)"""

SLOW_MARKER = "[demo: slow stream]"
"""Text the fake provider is told (FaultPlan.by_marker) to answer slowly: room to cancel mid-stream."""


def throttled_marker(index: int) -> str:
    """Text in the first user turn of conversation `index` when its first provider request is to be
    refused with a 429 (`FaultPlan.first_with_marker`: one marker a conversation, so one refusal each)."""
    return f"[demo: throttled {index}]"


def cancels_text(index: int) -> bool:
    """Does cancelling conversation `index` cancel a text answer (its first dispatch offers no tools) rather
    than one of tool calls? Every other one, so any two cancelling conversations in a row show both."""
    return index % 2 == 0


def throttled(seed: int, index: int, rate: float) -> bool:
    """Is conversation `index` one whose first request the provider throttles (run.py builds the plan
    from the same draw)?"""
    return random.Random(f"{seed}:throttle:{index}").random() < rate


def cancels(seed: int, index: int, rate: float) -> bool:
    """Does conversation `index` cancel its first dispatch mid-stream (a draw of its own)?"""
    return random.Random(f"{seed}:cancel:{index}").random() < rate


def interjects(seed: int, index: int, rate: float, cancel_rate: float) -> bool:
    """Does conversation `index` speak again mid-stream (never one that cancels)?"""
    return (
        not cancels(seed, index, cancel_rate) and random.Random(f"{seed}:interject:{index}").random() < rate
    )


def fault_marker(kind: str, index: int) -> str:
    """Text in the first user turn of conversation `index` when the fake provider is to answer it with the
    fault `kind` (run.py's `MARKED_FAULTS` says whether on its first request or on every attempt)."""
    return f"[demo: {kind} {index}]"


def plain_conversations(
    seed: int, conversations: int, *, cancel_rate: float, interject_rate: float, throttle_rate: float
) -> list[int]:
    """The conversations that neither cancel, speak mid-stream nor meet a 429, in order: their first
    dispatch offers tools, which the fake model answers with calls, and nothing cuts it short, so a fault
    scripted for their first answer always applies (run.py gives each marked fault one of them)."""
    return [
        i
        for i in range(conversations)
        if not cancels(seed, i, cancel_rate)
        and not interjects(seed, i, interject_rate, cancel_rate)
        and not throttled(seed, i, throttle_rate)
    ]


def commits_no_turn(decision: DispatchDecision) -> bool:
    """Does this decision end its operation COMMITTED with nothing in the history (an answer with nothing
    visible, `EMPTY_RESPONSE`)? No CommittedTurn follows it, so it is the operation's outcome."""
    return decision.state == S.COMMITTED and decision.reason == ReasonCode.EMPTY_RESPONSE


ADAPTERS: tuple[tuple[str, str, str], ...] = (
    ("anthropic-messages@3", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    ("openai-chat@2", "openai", "openai/gpt-4o@2024-08"),
    ("openai-responses@4", "openai", "openai/gpt-4.1@2025-04"),
    ("gemini@3", "google", "google/gemini-2.5-pro@2025-06"),
    ("bedrock-converse@2", "bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05"),
    ("anthropic-messages@1", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
    ("openai-chat@1", "openai", "openai/gpt-4o@2024-08"),
    ("openai-responses@2", "openai", "openai/gpt-4.1@2025-04"),
    ("gemini@2", "google", "google/gemini-2.5-pro@2025-06"),
    ("bedrock-converse@1", "bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05"),
)
"""Conversations go round these: every API (Bedrock over its binary event stream), current and
previous adapter versions side by side."""
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
    failed: int = 0  # a dispatch REJECTED or PAUSED
    gave_up: int = 0  # the worker gave up on a dispatch (attempts exhausted)
    refused: int = 0  # the provider refused the answer (a refusal stop: CANCELLED PROVIDER_REFUSED)
    output_limited: int = 0  # the answer was cut at the output limit (CANCELLED OUTPUT_LIMIT_REACHED)
    nothing_visible: int = 0  # answers with nothing visible (COMMITTED EMPTY_RESPONSE, no turn)
    cancelled: int = 0  # the driver cancelled a dispatch mid-stream, and it settled as CANCELLED
    cancelled_text: int = 0  # of those, text answers (`cancels_text`): each retracted a shown preview
    stalled: int = 0  # no outcome at all within the timeout (or still running at the drive's deadline)
    user_turns: int = 0
    dispatches: int = 0
    tool_rounds: int = 0
    cancels_requested: int = 0
    cancels_too_late: int = 0  # the answer committed before the cancel arrived
    interjections: int = 0  # the user spoke mid-stream and the operation was superseded
    interjections_too_late: int = 0  # the answer committed before the user spoke
    throttled: int = 0  # conversations whose first provider request the provider refused with a 429
    moving: list[str] = field(default_factory=list)  # conversations moving between APIs (demo/moving.py)
    api_changes: int = 0  # dispatches of a moving conversation sent to another API than its previous one
    invalid_submitted: Counter[str] = field(default_factory=Counter)
    given_up: dict[str, str] = field(default_factory=dict)  # operation id → the worker's reason

    @property
    def conversations(self) -> int:
        ended = self.gave_up + self.refused + self.output_limited + self.cancelled
        return self.completed + self.failed + ended + self.stalled


class Driver:
    def __init__(
        self,
        client: GatewayClient,
        *,
        seed: int = 0,
        turns: int = 2,
        invalid_rate: float = 0.08,
        cancel_rate: float = 0.0,
        interject_rate: float = 0.0,
        throttle_rate: float = 0.0,
        move_rate: float = 0.0,
        markers: Mapping[int, str] | None = None,
        op_timeout_s: float = 60.0,
        max_output_tokens: int = 512,
        settle_within_ms: int | None = None,
    ) -> None:
        self.client = client
        self.seed = seed
        self.rng = random.Random(seed)
        self.turns = turns
        self.invalid_rate = invalid_rate
        self.cancel_rate = cancel_rate
        self.interject_rate = interject_rate
        self.throttle_rate = throttle_rate
        self.move_rate = move_rate
        self.markers = dict(markers or {})
        """Conversation index → the marker its first question opens with (`fault_marker`)."""
        self.op_timeout_s = op_timeout_s
        self.max_output_tokens = max_output_tokens
        self.settle_within_ms = settle_within_ms
        self.stats = DriverStats()
        self._waiting: dict[str, asyncio.Future[Frozen]] = {}
        self._streaming: dict[str, asyncio.Event] = {}
        self._shown: dict[str, asyncio.Event] = {}
        """Per operation the driver will cancel or interject: set at its first preview (or outcome)."""
        self._last_state: dict[tuple[str, str], DispatchState] = {}
        """Every operation's state as its last decision on the manifests topic says."""

    # -- outputs -------------------------------------------------------------------------

    async def observe(self, records: list[Frozen]) -> None:
        for record in records:
            if isinstance(record, CommittedTurn) and record.operation_id is not None:
                self._resolve(record.operation_id, record)
            elif isinstance(record, DispatchDecision):
                self._last_state[(record.conversation_id, record.operation_id)] = record.state
                if record.state in SETTLED_FAILURES or commits_no_turn(record):
                    self._resolve(record.operation_id, record)
                elif record.state == S.STREAMING and record.operation_id in self._streaming:
                    self._streaming[record.operation_id].set()
            elif isinstance(record, PreviewUpdated) and record.operation_id in self._shown:
                self._shown[record.operation_id].set()

    def open_operations(self) -> list[tuple[str, str]]:
        """The operations whose last decision seen is not final (COMMITTED, REJECTED, CANCELLED)."""
        return sorted(key for key, state in self._last_state.items() if state not in FINAL_STATES)

    def _resolve(self, operation_id: str, record: Frozen) -> None:
        future = self._waiting.get(operation_id)
        if future is not None and not future.done():
            future.set_result(record)
        for events in (self._streaming, self._shown):
            if operation_id in events:
                events[operation_id].set()

    # -- one conversation -----------------------------------------------------------------

    async def conversation(self, index: int) -> None:
        conv = f"conv-{index:05d}-{uuid.uuid4().hex[:6]}"
        adapter, provider, model = ADAPTERS[index % len(ADAPTERS)]
        answered: list[ToolResult] = []
        cancel = cancels(self.seed, index, self.cancel_rate)
        interject = interjects(self.seed, index, self.interject_rate, self.cancel_rate)
        throttle = throttled(self.seed, index, self.throttle_rate)
        self.stats.throttled += throttle
        move = not cancel and not interject and moves(self.seed, index, self.move_rate)
        if move:
            self.stats.moving.append(conv)
        policy: dict[str, object] = {}
        dispatched = 0
        for turn in range(self.turns):
            question = QUESTIONS[(index + turn) % len(QUESTIONS)]
            if throttle and turn == 0:
                question = f"{throttled_marker(index)} {question}"
            if turn == 0 and index in self.markers:
                question = f"{self.markers[index]} {question}"
            slow = cancel or interject
            await self.client.submit_user_turn(conv, f"{SLOW_MARKER} {question}" if slow else question)
            self.stats.user_turns += 1
            for _round in range(5):
                if move:
                    target = move_target(index, dispatched)
                    adapter, provider, model = target.adapter, target.provider, target.model_revision
                    policy = thinking_policy(target.api)
                    self.stats.api_changes += dispatched > 0
                dispatched += 1
                outcome = await self._dispatch(
                    conv, adapter, provider, model, cancel=cancel, interject=interject,
                    text_only=cancel and cancels_text(index), policy=policy,
                )  # fmt: skip
                if outcome is None:
                    self.stats.stalled += 1
                    return
                if (
                    interject
                    and isinstance(outcome, DispatchDecision)
                    and outcome.reason == ReasonCode.SUPERSEDED
                ):
                    self.stats.interjections += 1
                    interject = False
                    continue  # dispatch again: the interjection is in the history now
                if isinstance(outcome, DispatchDecision) and not commits_no_turn(outcome):
                    if gave_up(outcome):
                        self.stats.gave_up += 1
                        self.stats.given_up[outcome.operation_id] = outcome.detail
                    elif outcome.state == S.CANCELLED and outcome.reason == ReasonCode.PROVIDER_REFUSED:
                        self.stats.refused += 1
                    elif outcome.state == S.CANCELLED and outcome.reason == ReasonCode.OUTPUT_LIMIT_REACHED:
                        self.stats.output_limited += 1
                    elif outcome.state == S.CANCELLED and cancel:
                        self.stats.cancelled += 1
                        self.stats.cancelled_text += cancels_text(index)
                    else:
                        self.stats.failed += 1
                    return
                if cancel:
                    self.stats.cancels_too_late += 1
                    cancel = False
                if interject:
                    self.stats.interjections_too_late += 1
                    interject = False
                if isinstance(outcome, DispatchDecision):
                    self.stats.nothing_visible += 1
                    break  # nothing entered the history: the user speaks next
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

    async def _dispatch(
        self,
        conv: str,
        adapter: str,
        provider: str,
        model: str,
        *,
        cancel: bool = False,
        interject: bool = False,
        text_only: bool = False,
        policy: dict[str, object] | None = None,
    ) -> Frozen | None:
        """One dispatch and its outcome (None: none within the timeout). `text_only` offers no tools, so
        the answer is text: a cancel then waits for its first preview however long that takes."""
        op = f"op-{uuid.uuid4().hex[:16]}"
        future: asyncio.Future[Frozen] = asyncio.get_running_loop().create_future()
        self._waiting[op] = future
        if cancel or interject:
            self._streaming[op], self._shown[op] = asyncio.Event(), asyncio.Event()
        try:
            await self.client.request_dispatch(
                conv,
                operation_id=op,
                adapter=adapter,
                provider=provider,
                model_revision=model,
                tools=() if text_only else DEMO_TOOLS,
                policy=policy or None,
                max_output_tokens=max(self.max_output_tokens, THINKING_MAX_OUTPUT_TOKENS)
                if policy
                else self.max_output_tokens,
                stream=True,
                settle_within_ms=self.settle_within_ms,
            )
            self.stats.dispatches += 1
            if cancel:
                await self._cancel_mid_stream(conv, op, future, text_only=text_only)
            elif interject:
                await self._interject_mid_stream(conv, op, future)
            try:
                return await asyncio.wait_for(future, self.op_timeout_s)
            except TimeoutError:
                return None
        finally:
            self._waiting.pop(op, None)
            self._streaming.pop(op, None)
            self._shown.pop(op, None)

    async def _cancel_mid_stream(
        self, conv: str, op: str, outcome: asyncio.Future[Frozen], *, text_only: bool
    ) -> None:
        """Once the answer is mid-stream (`_mid_stream`), wait a little, then cancel (unless it is
        already settled)."""
        if not await self._mid_stream(op, outcome, self.op_timeout_s if text_only else PREVIEW_WAIT_S):
            return
        await asyncio.sleep(self.rng.uniform(0.05, 0.25))
        await self.client.cancel(conv, op, reason="demo: the user cancelled mid-stream")
        self.stats.cancels_requested += 1

    async def _interject_mid_stream(self, conv: str, op: str, outcome: asyncio.Future[Frozen]) -> None:
        """Once the answer is mid-stream (`_mid_stream`), the user speaks again (unless the answer is
        already settled)."""
        if not await self._mid_stream(op, outcome):
            return
        await asyncio.sleep(self.rng.uniform(0.05, 0.25))
        await self.client.submit_user_turn(conv, "Actually, keep it short.")
        self.stats.user_turns += 1

    async def _mid_stream(
        self, op: str, outcome: asyncio.Future[Frozen], preview_wait_s: float = PREVIEW_WAIT_S
    ) -> bool:
        """Wait for STREAMING, then up to `preview_wait_s` for the first preview; False once settled."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._streaming[op].wait(), self.op_timeout_s)  # set by an outcome too
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._shown[op].wait(), preview_wait_s)
        return not outcome.done()

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
