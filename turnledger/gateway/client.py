"""The producing side a gateway embeds: every ingress event, Avro-encoded, keyed by conversation.

One `GatewayClient` wraps one idempotent `AIOKafkaProducer` (acks=all). Keying by
conversation id puts every event of a conversation on one partition, which is what
gives the fold its total order per conversation; idempotence keeps a retried send
from appearing twice in that order. Events carry their own id and time (the core
never reads a clock), so they are stamped here, on the producing side.

The worker-side appends (attempt, sent, handle, deltas, end, recovery, resume,
termination) go through the same client: they are ingress events like any other.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerIdMapping,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)
from pydantic import ValidationError

from turnledger.adapters.profiles import PROFILES, api_of
from turnledger.codec import UnencodableRecord, encode
from turnledger.errors import GatewayError, KafkaUnavailableError
from turnledger.gateway.event_arguments import (
    FLAG,
    NAME,
    TEXT,
    Check,
    EventArgumentError,
    each,
    json_object,
    one_of,
    or_none,
    pydantic_problem,
    refuse_bad_arguments,
    rule,
    sequence_of,
    whole_number,
)
from turnledger.kafka.connection import diagnose, kafka_options
from turnledger.model.deltas import NormalizedDelta
from turnledger.model.events import (
    DEFAULT_LEASE_MS,
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
from turnledger.model.graph import TERMINAL_RESULT_STATUSES, BlockKind, ResultStatus, Role, TrustLabel
from turnledger.model.limits import AVRO_LONG_MAX, DEFAULT_LIMITS, Limits, has_utf8_form, printable, utf8_size
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition
from turnledger.streaming.runs import merge_runs
from turnledger.topology import Topics

log = logging.getLogger(__name__)
E = TypeVar("E", bound=IngressEvent)


def stream_policy(adapter: str) -> dict[str, Any]:
    """The dispatch policy that makes the adapter render a streaming request (the worker only streams).

    The adapters render it into the request bytes (so into the manifest digest); it is the API's
    profile's (adapters/profiles.py): APIs that stream by endpoint (Gemini, Bedrock) need nothing.
    An adapter of an unknown API gets none (the fold rejects the adapter)."""
    profile = PROFILES.get(api_of(adapter))
    return profile.stream_policy() if profile is not None else {}


def new_event_id() -> str:
    return uuid.uuid4().hex


def now_ms() -> int:
    return int(time.time() * 1000)


class RefusedEventError(GatewayError, ValueError):
    """The client refuses to send an event the ledger would refuse: `reason` is the code the
    processor would give it (UNENCODABLE_TEXT, BLOCK_TOO_LARGE, TOO_MANY_BLOCKS, RECORD_TOO_LARGE).
    Nothing of the batch it was in has been sent."""

    def __init__(self, event: IngressEvent, reason: ReasonCode, detail: str) -> None:
        self.event_type = type(event).__name__
        self.event_id = printable(event.event_id)
        self.reason = reason
        self.detail = detail
        super().__init__(f"{self.event_type} {self.event_id} not sent: {reason}: {detail}")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, f"{path}/<key>")
            yield from _strings(item, f"{path}/{printable(str(key))}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}/{index}")


def _unencodable_text(event: IngressEvent) -> str | None:
    bad = [path for path, text in _strings(event.model_dump(), "") if not has_utf8_form(text)]
    return f"{', '.join(bad[:5])} holds a lone surrogate (text with no UTF-8 form)" if bad else None


def _too_many_blocks(event: IngressEvent, limits: Limits) -> str | None:
    if not isinstance(event, TurnSubmitted) or len(event.blocks) <= limits.max_blocks_per_turn:
        return None
    return f"the turn has {len(event.blocks)} blocks, at most {limits.max_blocks_per_turn}"


def _block_too_large(event: IngressEvent, limits: Limits) -> str | None:
    if not isinstance(event, TurnSubmitted):
        return None
    for block in event.blocks:
        size = utf8_size((block.text, block.arguments, block.signature))
        if size > limits.max_block_bytes:
            return f"block {printable(block.id)} is {size} bytes, at most {limits.max_block_bytes}"
    return None


SEND_CHECKS: tuple[tuple[ReasonCode, Callable[[IngressEvent, Limits], str | None]], ...] = (
    (ReasonCode.TOO_MANY_BLOCKS, _too_many_blocks),
    (ReasonCode.BLOCK_TOO_LARGE, _block_too_large),
)
"""What the client checks before encoding, with the code the processor's validator would give
(`sequence/rules.py`, on the same `model/limits.py` primitives). Text with no UTF-8 form is found
when the encoding fails (UNENCODABLE_TEXT, so valid events pay no extra walk), and the record size
on the encoded bytes (RECORD_TOO_LARGE)."""


def encode_for_sending(event: IngressEvent, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The event's Avro bytes, or RefusedEventError with the reason the ledger would refuse it for."""
    for reason, check in SEND_CHECKS:
        detail = check(event, limits)
        if detail is not None:
            raise RefusedEventError(event, reason, detail)
    try:
        value = encode(event)
    except UnencodableRecord:
        detail = _unencodable_text(event)
        if detail is None:
            raise
        raise RefusedEventError(event, ReasonCode.UNENCODABLE_TEXT, detail) from None
    if len(value) > limits.max_record_bytes:
        detail = f"record of {len(value)} bytes, at most {limits.max_record_bytes}"
        raise RefusedEventError(event, ReasonCode.RECORD_TOO_LARGE, detail)
    return value


class IngressSink(Protocol):
    """Anything that appends ingress events in order per conversation (Kafka, or a test ledger)."""

    async def append(self, event: IngressEvent) -> None: ...


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One terminal result envelope for one tool call of a canonical assistant turn."""

    call_id: str
    tool_name: str
    argument_digest: str
    generation: int
    text: str
    status: ResultStatus = ResultStatus.SUCCESS

    def block(self) -> SubmittedBlock:
        return SubmittedBlock(
            id=f"t-{self.call_id}",
            role=Role.TOOL,
            kind=BlockKind.TOOL_RESULT,
            trust_label=TrustLabel.TOOL,
            text=self.text,
            call_id=self.call_id,
            tool_name=self.tool_name,
            argument_digest=self.argument_digest,
            generation=self.generation,
            result_status=self.status,
        )


TOOL_RESULTS = sequence_of(
    ToolResult,
    fields={
        "call_id": NAME,
        "tool_name": NAME,
        "argument_digest": NAME,
        "generation": whole_number(1),
        "text": TEXT,
        "status": one_of(TERMINAL_RESULT_STATUSES),
    },
    unique="call_id",
    non_empty=True,
)
"""The results of one tool-results turn: one terminal result per call (a call's generation is its
attempt's, from 1), each call answered once."""


INGRESS_EVENT = rule("an ingress event (an IngressEvent)", lambda v: isinstance(v, IngressEvent))
ITERABLE = rule("an iterable of ingress events", lambda v: isinstance(v, Iterable))
TOOLS = sequence_of(ToolDefinition, fields={"name": NAME, "input_schema": json_object}, unique="name")
"""The tools offered to the model: each a ToolDefinition, its schema JSON, no name twice (a provider
refuses two tools of one name)."""


def settle_within(occurred_at_ms: int) -> Check:
    """A request's `settle_within_ms`: from 1, and its deadline (its time plus it) an Avro long."""
    high = AVRO_LONG_MAX - occurred_at_ms
    return rule(
        f"an integer from 1 to {high} (the request's time, {occurred_at_ms} ms, plus it is its "
        "deadline, an Avro long)",
        lambda v: type(v) is int and 1 <= v <= high,
    )


class EventFactory:
    """Builds stamped ingress events; shared by the Kafka client and in-memory test sinks.

    The gateway-side builders check their arguments first (`event_arguments.py`): one a builder
    cannot make a valid event of is an `EventArgumentError` naming it, and nothing is built."""

    def stamp(self, conversation_id: str) -> dict[str, Any]:
        return {"conversation_id": conversation_id, "event_id": new_event_id(), "occurred_at_ms": now_ms()}

    def build(self, cls: type[E], conversation_id: str, **fields: Any) -> E:
        """A stamped `cls` of `fields`; fields pydantic refuses are an EventArgumentError naming each."""
        try:
            return cls(**self.stamp(conversation_id), **fields)
        except ValidationError as exc:
            raise EventArgumentError(cls.__name__, map(pydantic_problem, exc.errors())) from None

    def user_turn(
        self,
        conversation_id: str,
        text: str,
        *,
        turn_id: str | None = None,
        block_id: str | None = None,
        expected_revision: int | None = None,
    ) -> TurnSubmitted:
        refuse_bad_arguments(
            "user_turn",
            (
                ("conversation_id", NAME, conversation_id),
                ("text", NAME, text),
                ("turn_id", or_none(NAME), turn_id),
                ("block_id", or_none(NAME), block_id),
                ("expected_revision", or_none(whole_number(0)), expected_revision),
            ),
        )
        turn_id = f"u-{uuid.uuid4().hex[:12]}" if turn_id is None else turn_id
        block = SubmittedBlock(
            id=f"{turn_id}/b0" if block_id is None else block_id,
            role=Role.USER,
            kind=BlockKind.TEXT,
            trust_label=TrustLabel.USER,
            text=text,
        )
        return TurnSubmitted(
            **self.stamp(conversation_id),
            turn_id=turn_id,
            blocks=(block,),
            expected_revision=expected_revision,
        )

    def tool_results(
        self, conversation_id: str, results: Sequence[ToolResult], *, turn_id: str | None = None
    ) -> TurnSubmitted:
        refuse_bad_arguments(
            "tool_results",
            (
                ("conversation_id", NAME, conversation_id),
                ("results", TOOL_RESULTS, results),
                ("turn_id", or_none(NAME), turn_id),
            ),
        )
        turn_id = "tr-" + "+".join(r.call_id for r in results) if turn_id is None else turn_id
        return TurnSubmitted(
            **self.stamp(conversation_id), turn_id=turn_id, blocks=tuple(r.block() for r in results)
        )


SESSION_BROKEN: tuple[type[KafkaError], ...] = (
    OutOfOrderSequenceNumber,
    UnknownProducerId,
    InvalidProducerIdMapping,
)
"""Errors after which an idempotent producer's session is unusable: aiokafka neither resets the
partition's sequence nor bumps the epoch (KIP-360), so every later send to that partition fails
the same way. Seen after a broker restart under load (the chaos test's worker and driver)."""


class GatewayClient(EventFactory):
    """Async producer of ingress events. Use as `async with GatewayClient(bootstrap) as client:`.

    Kafka outages surface as `KafkaUnavailableError`, which callers retry (`retry.ride_out`); a
    broken idempotent session (`SESSION_BROKEN`) does too, after the client has replaced its
    producer with a new one, so a retry runs on a new producer id instead of failing for ever. A
    retried append may have been written the first time as well: appends are at least once, as with
    any retry after an outage, and the fold refuses a repeated turn id, dispatch request or delta."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topic: str = Topics().ingress,
        client_id: str = "turnledger-gateway",
        request_timeout_ms: int = 15_000,
        linger_ms: int = 2,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        """`limits`: the processor's size limits, so that the client refuses what the ledger would."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.limits = limits
        self._options: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "client_id": client_id,
            "enable_idempotence": True,
            "acks": "all",
            "linger_ms": linger_ms,
            "request_timeout_ms": request_timeout_ms,
            "max_batch_size": 256 * 1024,
            **kafka_options(),
        }
        self._producer = AIOKafkaProducer(**self._options)
        self._started = False
        self._replacement_pending = False
        self.sessions_replaced = 0
        """How many times a broken idempotent session made the client start a new producer."""

    async def start(self) -> None:
        try:
            await self._producer.start()
        except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
            await self._producer.stop()
            # a refused login or certificate: KafkaAccessError; a KDC down: the outage's cause
            cause = await diagnose(self.bootstrap) or exc
            raise KafkaUnavailableError(self.bootstrap, cause, action="start the ingress producer") from exc
        self._started = True

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()

    async def __aenter__(self) -> GatewayClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the one primitive -------------------------------------------------------------

    async def append(self, event: IngressEvent) -> None:
        """Append one event and wait for the broker's acknowledgement (acks=all)."""
        refuse_bad_arguments("append", (("event", INGRESS_EVENT, event),))
        await self.append_many((event,))

    async def append_many(self, events: Iterable[IngressEvent]) -> None:
        """Send in order and wait for all acknowledgements; per-conversation order is kept by the key.

        Every event is checked and encoded before the first is sent: RefusedEventError (or
        EventArgumentError, for an item that is no ingress event) sends none."""
        refuse_bad_arguments("append_many", (("events", ITERABLE, events),))
        batch = tuple(events)
        refuse_bad_arguments("append_many", (("events", each(INGRESS_EVENT), batch),))
        encoded = [(event, encode_for_sending(event, self.limits)) for event in batch]
        action = f"append to {self.topic!r}"
        if self._replacement_pending:
            await self._start_replacement(f"start the replacement ingress producer to {action}")
        producer = self._producer
        futures = []
        try:
            for event, value in encoded:
                futures.append(
                    await producer.send(self.topic, value=value, key=event.conversation_id.encode("utf-8"))
                )
            for future in futures:
                await future
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            raise KafkaUnavailableError(self.bootstrap, exc, action=action) from exc
        except SESSION_BROKEN as exc:
            await self._replace(producer)
            raise KafkaUnavailableError(
                self.bootstrap,
                exc,
                action=action,
                reachable_but="the producer's idempotent session broke (a broker restart can do that); a new "
                "producer replaced it, retry the append",
            ) from exc
        except KafkaError as exc:
            if exc.retriable:
                raise KafkaUnavailableError(self.bootstrap, exc, action=action) from exc
            raise

    async def _replace(self, broken: AIOKafkaProducer) -> None:
        """A new producer for the broken one, once however many appends saw it break; if Kafka is
        away it is started by the next append."""
        if broken is not self._producer:
            return
        self._producer = AIOKafkaProducer(**self._options)
        self._replacement_pending = True
        self.sessions_replaced += 1
        log.warning("the ingress producer's idempotent session broke; replacing it with a new producer")
        with contextlib.suppress(Exception):
            await broken.stop()
        with contextlib.suppress(KafkaUnavailableError):
            await self._start_replacement("start the replacement ingress producer")

    async def _start_replacement(self, action: str) -> None:
        try:
            await self._producer.start()
        except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = AIOKafkaProducer(**self._options)
            raise KafkaUnavailableError(self.bootstrap, exc, action=action) from exc
        self._replacement_pending = False

    # -- gateway side ------------------------------------------------------------------

    async def submit_user_turn(self, conversation_id: str, text: str, **kwargs: Any) -> TurnSubmitted:
        event = self.user_turn(conversation_id, text, **kwargs)
        await self.append(event)
        return event

    async def submit_tool_results(
        self, conversation_id: str, results: Sequence[ToolResult], *, turn_id: str | None = None
    ) -> TurnSubmitted:
        event = self.tool_results(conversation_id, results, turn_id=turn_id)
        await self.append(event)
        return event

    async def request_dispatch(
        self,
        conversation_id: str,
        *,
        adapter: str,
        provider: str,
        model_revision: str,
        max_output_tokens: int,
        tools: Sequence[ToolDefinition] = (),
        policy: dict[str, Any] | None = None,
        operation_id: str | None = None,
        stream: bool = True,
        settle_within_ms: int | None = None,
    ) -> DispatchRequested:
        """`stream` adds the adapter's `stream_policy` under `policy` (explicit policy keys win);
        `settle_within_ms` bounds how long the operation may stay non-final (the fold's default: 10 min)."""
        stamp = self.stamp(conversation_id)
        refuse_bad_arguments(
            "request_dispatch",
            (
                ("conversation_id", NAME, conversation_id),
                ("adapter", NAME, adapter),
                ("provider", NAME, provider),
                ("model_revision", NAME, model_revision),
                ("max_output_tokens", whole_number(1), max_output_tokens),
                ("tools", TOOLS, tools),
                ("policy", or_none(json_object), policy),
                ("operation_id", or_none(NAME), operation_id),
                ("stream", FLAG, stream),
                ("settle_within_ms", or_none(settle_within(stamp["occurred_at_ms"])), settle_within_ms),
            ),
        )
        policy = {**(stream_policy(adapter) if stream else {}), **(policy or {})}
        event = DispatchRequested(
            **stamp,
            operation_id=f"op-{uuid.uuid4().hex[:16]}" if operation_id is None else operation_id,
            adapter=adapter,
            provider=provider,
            model_revision=model_revision,
            tools=tuple(tools),
            max_output_tokens=max_output_tokens,
            policy=policy,
            settle_within_ms=settle_within_ms,
        )
        await self.append(event)
        return event

    async def cancel(self, conversation_id: str, operation_id: str | None = None, reason: str = "") -> None:
        """Cancel the operation, or with None every open operation of the conversation."""
        refuse_bad_arguments(
            "cancel",
            (
                ("conversation_id", NAME, conversation_id),
                ("operation_id", or_none(NAME), operation_id),
                ("reason", TEXT, reason),
            ),
        )
        await self.append(
            CancelRequested(**self.stamp(conversation_id), operation_id=operation_id, reason=reason)
        )


class WorkerEvents(EventFactory):
    """The worker-side events of one attempt lifecycle, appended through any `IngressSink`."""

    def __init__(self, sink: IngressSink, worker_id: str) -> None:
        self.sink = sink
        self.worker_id = worker_id

    async def attempt(
        self,
        conversation_id: str,
        operation_id: str,
        expected_revision: int,
        expected_cancel_generation: int,
        *,
        lease_ms: int = DEFAULT_LEASE_MS,
        replayable: bool = False,
    ) -> DispatchAttempt:
        event = self.build(
            DispatchAttempt,
            conversation_id,
            operation_id=operation_id,
            expected_revision=expected_revision,
            expected_cancel_generation=expected_cancel_generation,
            worker_id=self.worker_id,
            lease_ms=lease_ms,
            replayable=replayable,
        )
        await self.sink.append(event)
        return event

    async def sent(self, conversation_id: str, operation_id: str, generation: int) -> DispatchSent:
        event = self.build(
            DispatchSent, conversation_id, operation_id=operation_id, attempt_generation=generation
        )
        await self.sink.append(event)
        return event

    async def handle_bound(
        self,
        conversation_id: str,
        operation_id: str,
        generation: int,
        handle: str,
        manifest_digest: str,
        *,
        resumable: bool = False,
    ) -> HandleBound:
        event = self.build(
            HandleBound,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            response_handle=handle,
            manifest_digest=manifest_digest,
            resumable=resumable,
        )
        await self.sink.append(event)
        return event

    async def deltas(
        self, conversation_id: str, operation_id: str, generation: int, deltas: Sequence[NormalizedDelta]
    ) -> StreamDeltas:
        """One record of a stream's deltas, consecutive content deltas of a block as one run
        (`streaming/runs.py`): the same deltas in a fraction of the bytes and of the fold's work."""
        event = self.build(
            StreamDeltas,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            deltas=merge_runs(deltas),
        )
        await self.sink.append(event)
        return event

    async def ended(
        self,
        conversation_id: str,
        operation_id: str,
        generation: int,
        outcome: StreamOutcome,
        *,
        resumable: bool,
        last_delta_sequence: int,
    ) -> StreamEnded:
        event = self.build(
            StreamEnded,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            outcome=outcome,
            resumable=resumable,
            last_delta_sequence=last_delta_sequence,
        )
        await self.sink.append(event)
        return event

    async def recovered(self, conversation_id: str, operation_id: str, generation: int) -> RecoveryReported:
        event = self.build(
            RecoveryReported,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            worker_id=self.worker_id,
        )
        await self.sink.append(event)
        return event

    async def resume_started(
        self, conversation_id: str, operation_id: str, generation: int, handle: str
    ) -> ResumeStarted:
        event = self.build(
            ResumeStarted,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            response_handle=handle,
            worker_id=self.worker_id,
        )
        await self.sink.append(event)
        return event

    async def replay_started(self, conversation_id: str, operation_id: str, generation: int) -> ReplayStarted:
        event = self.build(
            ReplayStarted,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            worker_id=self.worker_id,
        )
        await self.sink.append(event)
        return event

    async def give_up(
        self, conversation_id: str, operation_id: str, reason: str, reason_code: ReasonCode | None = None
    ) -> CancelRequested:
        """The worker abandons the operation: a cancel marked `workerGaveUp`, with why in its reason
        (and `reason_code` on the CANCELLED decision, WORKER_GAVE_UP without one)."""
        event = self.build(
            CancelRequested,
            conversation_id,
            operation_id=operation_id,
            reason=reason,
            worker_gave_up=True,
            reason_code=reason_code,
        )
        await self.sink.append(event)
        return event

    async def terminated(self, conversation_id: str, operation_id: str, generation: int) -> AttemptTerminated:
        event = self.build(
            AttemptTerminated,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            worker_id=self.worker_id,
        )
        await self.sink.append(event)
        return event

    async def renew(self, conversation_id: str, operation_id: str, generation: int) -> LeaseRenewed:
        event = self.build(
            LeaseRenewed,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            worker_id=self.worker_id,
        )
        await self.sink.append(event)
        return event

    async def claim_expiry(self, conversation_id: str, operation_id: str, generation: int) -> ExpiryClaimed:
        event = self.build(
            ExpiryClaimed,
            conversation_id,
            operation_id=operation_id,
            attempt_generation=generation,
            worker_id=self.worker_id,
        )
        await self.sink.append(event)
        return event
