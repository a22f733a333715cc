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
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
from turnledger.adapters.registry import ADAPTERS
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
    shown,
    span_after,
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
from turnledger.model.limits import DEFAULT_LIMITS, Limits, has_utf8_form, printable, utf8_size
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition
from turnledger.streaming.runs import merge_runs
from turnledger.topology import Topics

log = logging.getLogger(__name__)
E = TypeVar("E", bound=IngressEvent)


def stream_policy(adapter: str, policy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The dispatch policy that makes the adapter render a streaming request (the worker only streams).

    The adapters render it into the request bytes (so into the manifest digest); it is the API's
    profile's (adapters/profiles.py): APIs that stream by endpoint (Gemini, Bedrock) need nothing, and
    a dispatch whose `policy` rules keeping the response out (Responses' `store: false`) gets no
    background mode. An adapter of an unknown API gets none (the fold rejects the adapter)."""
    profile = PROFILES.get(api_of(adapter))
    return profile.stream_policy(policy) if profile is not None else {}


def streaming_policy(adapter: str, policy: Mapping[str, Any] | None) -> dict[str, Any]:
    """A dispatch's `policy` over the adapter's `stream_policy` for it (the dispatch's keys win)."""
    return {**stream_policy(adapter, policy), **(policy or {})}


def _streamed(adapter: str) -> Check:
    """A streamed dispatch's policy keeps its API's stream flag: the worker reads every answer as a
    stream, so a caller's `{"stream": false}` over the stream policy made a manifest the worker refuses
    to send (CANCELLED WORKER_GAVE_UP, "the manifest's request does not stream"): an operation made and
    cancelled for the caller's mistake, where nothing need be sent."""
    profile = PROFILES.get(api_of(adapter))
    flag = None if profile is None else profile.stream_flag

    def check(name: str, value: Any) -> Iterator[str]:
        if flag is not None and flag in value and value[flag] is not True:
            yield (
                f"{name}[{flag!r}] must be True or left out: the worker streams every answer "
                f"(stream=False builds a request without the stream policy), not {shown(value[flag])}"
            )

    return check


def _sent_policy(adapter: str, max_output_tokens: int) -> Check:
    """The policy the adapter sends, judged by its rows of `adapters/policy_rules.py`, as the ledger
    judges it (`dispatch/request_rules.py`): a policy the provider is sure to refuse is not sent. An
    adapter the registry does not know is the ledger's to refuse (UNKNOWN_ADAPTER)."""

    def check(name: str, value: Any) -> Iterator[str]:
        known = ADAPTERS.get(adapter)
        detail = None if known is None else known.policy_refusal(max_output_tokens, value)
        if detail is not None:
            yield f"{detail} (adapter {adapter})"

    return check


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


GENERATION = whole_number(1)
"""The generation of an attempt: the fold allocates them from 1."""
DELTAS = sequence_of(
    NormalizedDelta, fields={"generation": GENERATION, "delta_sequence": whole_number(0)}, non_empty=True
)
"""One record of a stream's deltas: at least one, each a NormalizedDelta of a generation and at a
sequence a stream has (the assembler drops one below 0 as a duplicate). A delta repeated, or of
another handle or generation, is the ledger's to drop or quarantine."""
REASON_CODE = one_of(ReasonCode, called="a ReasonCode")
INGRESS_SINK = rule(
    "an ingress sink (with an async append(event))",
    lambda v: inspect.iscoroutinefunction(getattr(v, "append", None)),
)


class EventFactory:
    """Builds stamped ingress events; shared by the Kafka client and in-memory test sinks.

    The gateway-side builders check their arguments first (`event_arguments.py`): one a builder
    cannot make a valid event of is an `EventArgumentError` naming it, and nothing is built."""

    def stamp(self, conversation_id: str) -> dict[str, Any]:
        return {"conversation_id": conversation_id, "event_id": new_event_id(), "occurred_at_ms": now_ms()}

    def build(self, cls: type[E], conversation_id: str, **fields: Any) -> E:
        """A stamped `cls` of `fields`; fields pydantic refuses are an EventArgumentError naming each."""
        return self.build_stamped(cls, self.stamp(conversation_id), **fields)

    def build_stamped(self, cls: type[E], stamp: dict[str, Any], **fields: Any) -> E:
        """`build` with the stamp given (a builder whose checks need the event's time takes it first)."""
        try:
            return cls(**stamp, **fields)
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
            # a refused login or certificate: KafkaAccessError; a KDC down, or why no address took a
            # connection: the outage's cause
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
        """`stream` adds the adapter's `stream_policy` for `policy` under it (`streaming_policy`);
        `settle_within_ms` bounds how long the operation may stay non-final (the fold's default: 10 min).
        A policy the adapter's provider is sure to refuse (`adapters/policy_rules.py`, the ledger's rule),
        or, streamed, one that turns the API's stream flag off (`_streamed`), is refused here, nothing
        sent."""
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
                (
                    "settle_within_ms",
                    or_none(span_after(stamp["occurred_at_ms"], ends="its deadline", of="request's")),
                    settle_within_ms,
                ),
            ),
        )
        if stream:
            refuse_bad_arguments("request_dispatch", (("policy", _streamed(adapter), policy or {}),))
        policy = streaming_policy(adapter, policy) if stream else dict(policy or {})
        refuse_bad_arguments(
            "request_dispatch", (("policy", _sent_policy(adapter, max_output_tokens), policy),)
        )
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


def _of_attempt(
    conversation_id: str, operation_id: str, generation: int, generations: Check = GENERATION
) -> tuple[tuple[str, Check, Any], ...]:
    """The arguments that name an attempt, with their checks."""
    return (
        ("conversation_id", NAME, conversation_id),
        ("operation_id", NAME, operation_id),
        ("generation", generations, generation),
    )


class WorkerEvents(EventFactory):
    """The worker-side events of one attempt lifecycle, appended through any `IngressSink`.

    Each builder checks its arguments first (`event_arguments.py`), as the gateway-side ones do: one
    it cannot make a valid event of is an `EventArgumentError` naming it, and nothing is appended."""

    def __init__(self, sink: IngressSink, worker_id: str) -> None:
        """`worker_id` is the lease holder's name: an empty one would hold no lease (the fold checks
        leases only against non-empty ids), so it is refused."""
        refuse_bad_arguments("WorkerEvents", (("sink", INGRESS_SINK, sink), ("worker_id", NAME, worker_id)))
        self.sink = sink
        self.worker_id = worker_id

    async def _appended(self, event: E) -> E:
        await self.sink.append(event)
        return event

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
        """`lease_ms`: from 1, and the lease's end at the attempt's time an Avro long (the fold's
        decisions carry it)."""
        stamp = self.stamp(conversation_id)
        refuse_bad_arguments(
            "attempt",
            (
                ("conversation_id", NAME, conversation_id),
                ("operation_id", NAME, operation_id),
                ("expected_revision", whole_number(0), expected_revision),
                ("expected_cancel_generation", whole_number(0), expected_cancel_generation),
                (
                    "lease_ms",
                    span_after(stamp["occurred_at_ms"], ends="when its lease ends", of="attempt's"),
                    lease_ms,
                ),
                ("replayable", FLAG, replayable),
            ),
        )
        return await self._appended(
            self.build_stamped(
                DispatchAttempt,
                stamp,
                operation_id=operation_id,
                expected_revision=expected_revision,
                expected_cancel_generation=expected_cancel_generation,
                worker_id=self.worker_id,
                lease_ms=lease_ms,
                replayable=replayable,
            )
        )

    async def sent(self, conversation_id: str, operation_id: str, generation: int) -> DispatchSent:
        refuse_bad_arguments("sent", _of_attempt(conversation_id, operation_id, generation))
        fields = {"operation_id": operation_id, "attempt_generation": generation}
        return await self._appended(self.build(DispatchSent, conversation_id, **fields))

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
        refuse_bad_arguments(
            "handle_bound",
            (
                *_of_attempt(conversation_id, operation_id, generation),
                ("handle", NAME, handle),
                ("manifest_digest", NAME, manifest_digest),
                ("resumable", FLAG, resumable),
            ),
        )
        return await self._appended(
            self.build(
                HandleBound,
                conversation_id,
                operation_id=operation_id,
                attempt_generation=generation,
                response_handle=handle,
                manifest_digest=manifest_digest,
                resumable=resumable,
            )
        )

    async def deltas(
        self, conversation_id: str, operation_id: str, generation: int, deltas: Sequence[NormalizedDelta]
    ) -> StreamDeltas:
        """One record of a stream's deltas, consecutive content deltas of a block as one run
        (`streaming/runs.py`): the same deltas in a fraction of the bytes and of the fold's work."""
        refuse_bad_arguments(
            "deltas", (*_of_attempt(conversation_id, operation_id, generation), ("deltas", DELTAS, deltas))
        )
        return await self._appended(
            self.build(
                StreamDeltas,
                conversation_id,
                operation_id=operation_id,
                attempt_generation=generation,
                deltas=merge_runs(deltas),
            )
        )

    async def ended(
        self,
        conversation_id: str,
        operation_id: str,
        generation: int,
        outcome: StreamOutcome,
        *,
        resumable: bool,
        last_delta_sequence: int,
        detail: str | None = None,
    ) -> StreamEnded:
        """`last_delta_sequence`: the last delta appended, -1 for none; `detail`: why it ended, in
        names only (the fold's decision repeats it)."""
        refuse_bad_arguments(
            "ended",
            (
                *_of_attempt(conversation_id, operation_id, generation),
                ("outcome", one_of(StreamOutcome), outcome),
                ("resumable", FLAG, resumable),
                ("last_delta_sequence", whole_number(-1), last_delta_sequence),
                ("detail", or_none(NAME), detail),
            ),
        )
        return await self._appended(
            self.build(
                StreamEnded,
                conversation_id,
                operation_id=operation_id,
                attempt_generation=generation,
                outcome=outcome,
                resumable=resumable,
                last_delta_sequence=last_delta_sequence,
                detail=detail,
            )
        )

    async def _signed(
        self,
        method: str,
        cls: type[E],
        attempt: tuple[str, str, int],
        *more: tuple[str, Check, Any],
        first_generation: int = 1,
        **fields: Any,
    ) -> E:
        """A `cls` of the attempt (conversation id, operation id, generation, its generations from
        `first_generation`) signed with the worker's id, its arguments (and `more`) checked first."""
        conversation_id, operation_id, generation = attempt
        generations = whole_number(first_generation)
        names = _of_attempt(conversation_id, operation_id, generation, generations)
        refuse_bad_arguments(method, (*names, *more))
        return await self._appended(
            self.build(
                cls,
                conversation_id,
                operation_id=operation_id,
                attempt_generation=generation,
                worker_id=self.worker_id,
                **fields,
            )
        )

    async def recovered(self, conversation_id: str, operation_id: str, generation: int) -> RecoveryReported:
        attempt = (conversation_id, operation_id, generation)
        return await self._signed("recovered", RecoveryReported, attempt)

    async def resume_started(
        self, conversation_id: str, operation_id: str, generation: int, handle: str
    ) -> ResumeStarted:
        attempt = (conversation_id, operation_id, generation)
        return await self._signed(
            "resume_started", ResumeStarted, attempt, ("handle", NAME, handle), response_handle=handle
        )

    async def replay_started(self, conversation_id: str, operation_id: str, generation: int) -> ReplayStarted:
        attempt = (conversation_id, operation_id, generation)
        return await self._signed("replay_started", ReplayStarted, attempt)

    async def give_up(
        self, conversation_id: str, operation_id: str, reason: str, reason_code: ReasonCode | None = None
    ) -> CancelRequested:
        """The worker abandons the operation: a cancel marked `workerGaveUp`, with why in its reason
        (and `reason_code` on the CANCELLED decision, WORKER_GAVE_UP without one)."""
        refuse_bad_arguments(
            "give_up",
            (
                ("conversation_id", NAME, conversation_id),
                ("operation_id", NAME, operation_id),
                ("reason", NAME, reason),
                ("reason_code", or_none(REASON_CODE), reason_code),
            ),
        )
        return await self._appended(
            self.build(
                CancelRequested,
                conversation_id,
                operation_id=operation_id,
                reason=reason,
                worker_gave_up=True,
                reason_code=reason_code,
            )
        )

    async def terminated(self, conversation_id: str, operation_id: str, generation: int) -> AttemptTerminated:
        attempt = (conversation_id, operation_id, generation)
        return await self._signed("terminated", AttemptTerminated, attempt)

    async def renew(self, conversation_id: str, operation_id: str, generation: int) -> LeaseRenewed:
        attempt = (conversation_id, operation_id, generation)
        return await self._signed("renew", LeaseRenewed, attempt)

    async def claim_expiry(self, conversation_id: str, operation_id: str, generation: int) -> ExpiryClaimed:
        """`generation` 0 claims the deadline of an operation no attempt was accepted for."""
        attempt = (conversation_id, operation_id, generation)
        return await self._signed("claim_expiry", ExpiryClaimed, attempt, first_generation=0)
