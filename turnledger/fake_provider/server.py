"""The fake provider server: routing, per-request fault selection, logs, lifecycle.

Loopback only. Each request is served on its own connection (see httpio). The answer is a function of
(seed, request bytes); ids are a function of (seed, request bytes, how often this exact body was seen) or
of the Idempotency-Key, so a retry gets fresh ids and a keyed retry gets the same ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

import orjson

from turnledger.fake_provider import anthropic_messages, bedrock, gemini, openai_chat, openai_responses
from turnledger.fake_provider.api import ApiSpec, ScriptContext, WireEvent
from turnledger.fake_provider.auth import FakeKeys, check
from turnledger.fake_provider.background import BackgroundResponse
from turnledger.fake_provider.delivery import HoldEnd, HoldRecord, Planned, deliver, plan, planned_bytes
from turnledger.fake_provider.errors import BadRequestError, NonLoopbackBindError
from turnledger.fake_provider.faults import (
    CONTENT_FAULTS,
    FAULT_HEADER,
    Fault,
    FaultKind,
    FaultPlan,
    FaultRecord,
    ScriptCursor,
    StreamShape,
    parse_fault_header,
    resolve,
    resolve_disconnect,
    truncate_mid_string,
)
from turnledger.fake_provider.httpio import (
    HttpRequest,
    MalformedRequest,
    ResponseWriter,
    read_request,
)
from turnledger.fake_provider.ids import rng_for
from turnledger.fake_provider.model import (
    Answer,
    Conversation,
    LastTurn,
    cut_at_limit,
    decide,
    refused,
    thinking_only,
)
from turnledger.fake_provider.refusals import refusal_for

LOOPBACK = "127.0.0.1"
IDEMPOTENCY_HEADER = "idempotency-key"
EVENT_STREAM = "application/vnd.amazon.eventstream"
BEDROCK_REQUEST_ID = "x-amzn-requestid"


@dataclass(frozen=True, slots=True)
class Target:
    """What a generation request asks for: the API, whether it streams, the model named in the path."""

    api: ApiSpec
    stream: bool | None = None  # None: the body's `"stream": true` decides
    model: str | None = None
    sse: bool = True  # Gemini's streamGenerateContent without alt=sse answers one JSON array


_ROUTES: dict[str, ApiSpec] = {
    "/v1/messages": anthropic_messages.SPEC,
    "/v1/chat/completions": openai_chat.SPEC,
    "/v1/responses": openai_responses.SPEC,
}
_GEMINI = re.compile(r"/v1beta/models/(?P<model>[^/:]+):(?P<method>streamGenerateContent|generateContent)")
_BEDROCK = re.compile(r"/model/(?P<model>[^/]+)/(?P<method>converse-stream|converse)")


def target_of(path: str, query: dict[str, str]) -> Target | None:
    if path in _ROUTES:
        return Target(_ROUTES[path])
    if m := _GEMINI.fullmatch(path):
        streams = m["method"] == "streamGenerateContent"
        return Target(gemini.SPEC, streams, unquote(m["model"]), sse=query.get("alt") == "sse")
    if m := _BEDROCK.fullmatch(path):
        return Target(bedrock.SPEC, m["method"] == "converse-stream", unquote(m["model"]))
    return None


@dataclass
class ReceivedRequest:
    """One request as received, for tests and demo reports."""

    request_id: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    response_id: str | None = None
    received_at: float = field(default_factory=time.monotonic)
    """`time.monotonic()` when the request was read (when a client's retry came, in tests and reports)."""

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Delivery:
    """Delivery faults resolved for one connection."""

    disconnect_at: int | None = None
    duplicate: int | None = None
    drop_terminal: bool = False
    delay_s: float = 0.0
    late: int = 0
    hold: Fault | None = None
    records: list[Fault] = field(default_factory=list)


class FakeProvider:
    """A loopback HTTP/1.1 server speaking Anthropic Messages, OpenAI Chat, OpenAI Responses and Gemini
    SSE, and Bedrock ConverseStream's binary event stream. Every request must carry its API's
    credential (`keys`; `fp.keys.as_env()` names them as the SDKs read them), as with the real APIs.

    Usage: `async with FakeProvider(seed=1) as fp: base_url = fp.base_url`.
    """

    def __init__(
        self,
        host: str = LOOPBACK,
        port: int = 0,
        seed: int = 0,
        fault_plan: FaultPlan | None = None,
        *,
        background_tick_s: float = 0.002,
        keys: FakeKeys | None = None,
        on_request: Callable[[ReceivedRequest], None] | None = None,
        thinking: bool = False,
        gemini_strict_signatures: bool = False,
    ) -> None:
        """As the real APIs: a body without `"stream": true` gets one JSON reply, and only a Responses
        request with `"background": true` is kept and can be read again by its id.

        `thinking`: every answer is thought through, whether or not the request asks (as a model whose
        thinking is on by default): the Bedrock adapter, gemini@1-2 and Anthropic's before version 3 have
        no setting that asks for it, so a test through the worker turns it on here. Each API signs the
        reasoning as it does (signatures.py), and every request's signatures are checked whatever this says.

        `gemini_strict_signatures`: Gemini answers as Gemini 3 does: it signs the first call of every
        answer, and refuses a request whose current turn has a step whose first call is unsigned
        (gemini.py, `unsigned_step`). Off, it is Gemini 2.5, where the signature is optional: seeded
        scenarios send Gemini histories without signatures."""
        if host != LOOPBACK:
            raise NonLoopbackBindError(host)
        self.host = host
        self.port = port
        self.seed = seed
        self.fault_plan = fault_plan or FaultPlan()
        self.background_tick_s = background_tick_s
        self.keys = keys or FakeKeys()
        self._on_request = on_request
        self.thinking = thinking
        self.gemini_strict_signatures = gemini_strict_signatures
        self.auth_failures: list[tuple[str, int]] = []  # (request id, status)
        self.fault_log: list[FaultRecord] = []
        self.holds: list[HoldRecord] = []
        """How each connection the `hold_open` fault held after its last event ended: the client closed
        it, or its time was up (the fake then ended the body)."""
        self.requests: list[ReceivedRequest] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._seen: Counter[tuple[str, str]] = Counter()
        self._script = ScriptCursor()
        self._idempotency: dict[tuple[str, str], str] = {}  # (api, key) → body hash
        self._previous: dict[tuple[str, str], list[WireEvent]] = {}  # last stream per (api, body hash)
        self._background: dict[str, BackgroundResponse] = {}
        self._stored: dict[str, dict[str, Any]] = {}  # finished non-background Responses objects
        self._reasoned = openai_responses.ReasonedCalls()

    # lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> str:
        """Bind and serve; returns the base URL (`http://127.0.0.1:PORT`)."""
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.base_url

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for rec in self._background.values():
            await rec.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # connection ------------------------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; background generations go on regardless
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await read_request(reader)
        except MalformedRequest as exc:
            await ResponseWriter(writer).send_json(
                400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
            )
            return
        if req is None:
            return
        rid = f"req_{len(self.requests) + 1:06d}"
        received = ReceivedRequest(rid, req.method, req.path, req.headers, req.body)
        self.requests.append(received)
        if self._on_request is not None:
            self._on_request(received)
        out = ResponseWriter(writer, extra_headers={"request-id": rid, "x-request-id": rid}, reader=reader)
        target = target_of(req.path, req.query)
        api = target.api if target is not None else _api_for(req.path)
        try:
            await self._route(req, received, out)
        except BadRequestError as exc:
            if not out.started:
                kind = exc.kind or {404: "not_found_error", 409: "conflict_error"}.get(
                    exc.status, "invalid_request_error"
                )
                out.extra_headers.update(api.error_headers(exc.status))
                await out.send_json(exc.status, api.error_body(exc.message, kind, exc.param, exc.code))

    async def _route(self, req: HttpRequest, received: ReceivedRequest, out: ResponseWriter) -> None:
        if req.path == "/healthz":
            await out.send_json(200, {"ok": True})
            return
        target = target_of(req.path, req.query)
        if target is not None:
            if req.method != "POST":
                raise BadRequestError(f"method {req.method} not allowed on {req.path}", status=405)
            if await self._refused(target.api.name, req, received, out):
                return
            await self._generate(target, req, received, out)
            return
        parts = req.path.strip("/").split("/")
        if len(parts) >= 3 and parts[:2] == ["v1", "responses"]:
            if await self._refused(openai_responses.SPEC.name, req, received, out):
                return
            if len(parts) == 3 and req.method == "GET":
                await self._retrieve(parts[2], req, received, out)
                return
            if len(parts) == 4 and parts[3] == "cancel" and req.method == "POST":
                await self._cancel(parts[2], out)
                return
        raise BadRequestError(f"no route for {req.method} {req.path}", status=404)

    async def _refused(
        self, api: str, req: HttpRequest, received: ReceivedRequest, out: ResponseWriter
    ) -> bool:
        """Answer a request without the API's valid credential as the API does; True if refused."""
        failure = check(api, req, self.keys)
        if failure is None:
            return False
        self.auth_failures.append((received.request_id, failure.status))
        out.extra_headers.update(failure.headers)
        await out.send_json(failure.status, failure.body)
        return True

    # generation ------------------------------------------------------------------------------------

    async def _generate(
        self, target: Target, req: HttpRequest, received: ReceivedRequest, out: ResponseWriter
    ) -> None:
        api = target.api
        try:
            body = req.json()
        except ValueError:
            raise BadRequestError("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequestError("request body must be a JSON object")
        conv = api.parse(body)
        if api.signatures is not None:
            api.signatures.check(body, self.seed, strict=self.gemini_strict_signatures)
        if api is openai_responses.SPEC:
            self._reasoned.check(body)
        if target.model is not None:
            conv = replace(conv, model=target.model)
        if self.thinking:
            conv = replace(conv, thinking=True)
        body_hash = hashlib.sha256(req.body).hexdigest()
        key = req.headers.get(IDEMPOTENCY_HEADER)
        connection = 0
        if key:
            known = self._idempotency.setdefault((api.name, key), body_hash)
            if known != body_hash:
                raise BadRequestError("Idempotency-Key reused with a different request body", status=409)
            basis = f"{api.name}:key:{key}"
            connection = self._seen[(api.name, basis)]
            self._seen[(api.name, basis)] += 1
        else:
            occurrence = self._seen[(api.name, body_hash)]
            self._seen[(api.name, body_hash)] += 1
            basis = f"{api.name}:{body_hash}:{occurrence}"
        stream = body.get("stream") is True if target.stream is None else target.stream
        background = api is openai_responses.SPEC and body.get("background") is True
        ctx = ScriptContext(
            seed=self.seed,
            basis=basis,
            model=conv.model,
            input_tokens=max(1, len(req.body) // 4),
            rng=rng_for(self.seed, "split", req.body),
            request=body,
            background=background,
            strict_signatures=self.gemini_strict_signatures,
        )
        if background:
            rid = openai_responses.response_id(ctx)
            received.response_id = rid
            existing = self._background.get(rid)
            if existing is not None:  # a keyed retry reattaches to the same generation
                await self._reattach(existing, req, received, out, stream)
                return
        answer = decide(conv, rng_for(self.seed, "answer", req.body))
        fault_rng = rng_for(self.seed, "faults", basis)
        # A keyed request sent again gets the same response, content faults included, over a new
        # connection: its delivery faults (a cut, a duplicate, no stop, pacing) are drawn afresh.
        delivery_rng = (
            rng_for(self.seed, "faults", f"{basis}:connection:{connection}") if connection else fault_rng
        )
        header = req.headers.get(FAULT_HEADER)
        fault_plan = self.fault_plan
        requested = (
            parse_fault_header(header)
            if header is not None
            else fault_plan.scripted(self._script, req.body, _last_user_text(conv))
            + _redrawn(fault_plan, fault_rng, delivery_rng)
        )
        by_kind = {f.kind: f for f in reversed(requested)}  # the first mention of a kind wins
        applied: list[Fault] = []
        refusal = refusal_for(api.name, by_kind)
        if refusal is not None:  # refused before anything is generated: nothing is kept or stored
            self._log(received, [refusal.fault])
            out.extra_headers.update(refusal.headers)
            await out.send_json(refusal.status, refusal.body)
            return

        # content faults: they change what is generated (what the model says, then where it is stopped)
        if FaultKind.THINKING_ONLY in by_kind:
            thinking_rng = rng_for(self.seed, "thinking", req.body)
            answer = thinking_only(answer, thinking_rng, streams_thinking=api.streams_thinking)
            applied.append(Fault(FaultKind.THINKING_ONLY))
        refusal_stop = by_kind.get(FaultKind.REFUSAL_AFTER)
        if refusal_stop is not None:
            answer, words = refused(answer, refusal_stop.value)
            applied.append(Fault(FaultKind.REFUSAL_AFTER, words))
        limit = resolve(
            [f for f in by_kind.values() if f.kind is FaultKind.MAX_TOKENS_IN_CALL],
            StreamShape(0, len(answer.tool_calls), False),
            fault_rng,
        )
        for f in limit:
            assert f.value is not None
            answer = cut_at_limit(answer, f.value)
            ctx.truncated[f.value] = truncate_mid_string(answer.tool_calls[f.value].arguments_json)
        applied.extend(limit)
        trunc = resolve(
            [f for f in by_kind.values() if f.kind is FaultKind.TRUNCATED_ARGS],
            StreamShape(0, len(answer.tool_calls), False),
            fault_rng,
        )
        for f in trunc:
            assert f.value is not None
            ctx.truncated[f.value] = truncate_mid_string(answer.tool_calls[f.value].arguments_json)
        applied.extend(trunc)
        if api is openai_responses.SPEC:
            self._reasoned.remember(answer, ctx)
        if api is bedrock.SPEC:
            out.extra_headers[BEDROCK_REQUEST_ID] = bedrock.request_id(ctx)
            out.stream_content_type = EVENT_STREAM
        if not stream and not background:
            await self._answer_plain(api, answer, ctx, by_kind, fault_rng, applied, received, out, body_hash)
            return
        events: list[WireEvent] = list(api.script(answer, ctx))
        if not target.sse:
            received.response_id = _response_id_of(events)
            self._log(received, applied)
            await out.send_json(200, [e.data for e in events])
            return
        err = resolve(
            [f for f in by_kind.values() if f.kind is FaultKind.ERROR_EVENT],
            StreamShape(len(events), 0, False),
            fault_rng,
        )
        for f in err:
            assert f.value is not None
            events = [*events[: f.value], api.error_event(ctx, f.value)]
        applied.extend(err)
        previous = self._previous.get((api.name, body_hash))
        delivery = self._delivery(
            [f for f in by_kind.values() if f.kind not in CONTENT_FAULTS],
            events,
            previous is not None and api.late_events,
            delivery_rng,
        )
        late = [e for e in (previous or []) if not e.terminal][-delivery.late :] if delivery.late else []
        if not background:
            received.response_id = out.extra_headers.get(BEDROCK_REQUEST_ID) or _response_id_of(events)
            self._previous[(api.name, body_hash)] = events
        if background:
            if body.get("store") is False:
                raise BadRequestError("background mode requires store=true", param="background")
            tick = delivery.delay_s or self.background_tick_s
            rec = BackgroundResponse(
                received.response_id or "",
                events,
                lambda status, output: openai_responses.response_object(ctx, status, output),
                streamable=stream,
                body_hash=body_hash,
            )
            self._background[rec.response_id] = rec
            rec.start(tick)
            if not stream:
                self._log(received, applied)
                await out.send_json(200, rec.snapshot())
                return
            delivery.delay_s = 0.0  # pacing is the generation's, not the connection's
            planned = plan(
                events,
                duplicate=delivery.duplicate,
                drop_terminal=delivery.drop_terminal,
                late=late,
                gated=True,
            )
            disconnect = self._cut(delivery, planned, delivery_rng)
            self._log(received, applied + delivery.records)
            await deliver(
                out,
                planned,
                disconnect_at=disconnect,
                wait_for=rec.wait_for,
                hold=self._hold(delivery, received, out),
            )
            return
        planned = plan(events, duplicate=delivery.duplicate, drop_terminal=delivery.drop_terminal, late=late)
        disconnect = self._cut(delivery, planned, delivery_rng)
        self._log(received, applied + delivery.records)
        complete = await deliver(
            out,
            planned,
            disconnect_at=disconnect,
            delay_s=delivery.delay_s,
            hold=self._hold(delivery, received, out),
        )
        if complete and api is openai_responses.SPEC and not err and body.get("store") is not False:
            self._stored[received.response_id or ""] = openai_responses.final_object(answer, ctx)

    def _delivery(
        self, faults: list[Fault], events: Sequence[WireEvent], has_previous: bool, rng: random.Random
    ) -> _Delivery:
        d = _Delivery()
        for f in resolve(faults, StreamShape(len(events), 0, has_previous), rng):
            if f.kind is FaultKind.DISCONNECT:
                d.disconnect_at = -1 if f.value is None else f.value  # resolved against bytes in _cut
                continue
            if f.kind is FaultKind.DUPLICATE:
                d.duplicate = f.value
            elif f.kind is FaultKind.MISSING_STOP:
                d.drop_terminal = True
            elif f.kind is FaultKind.SLOW:
                d.delay_s = (f.value or 0) / 1000.0
            elif f.kind is FaultKind.LATE_EVENTS:
                d.late = f.value or 0
            elif f.kind is FaultKind.HOLD_OPEN:
                d.hold = f
            d.records.append(f)
        return d

    def _hold(
        self, delivery: _Delivery, received: ReceivedRequest, out: ResponseWriter
    ) -> Callable[[], Awaitable[HoldEnd]] | None:
        """The `hold_open` fault of this connection, which records how it ended in `holds`."""
        fault = delivery.hold
        if fault is None:
            return None

        async def hold() -> HoldEnd:
            began = time.monotonic()
            within_s = None if fault.value is None else fault.value / 1000.0
            ended = HoldEnd.CLIENT_CLOSED if await out.client_closed(within_s) else HoldEnd.TIME_UP
            self.holds.append(HoldRecord(received.request_id, ended, time.monotonic() - began))
            return ended

        return hold

    @staticmethod
    def _cut(delivery: _Delivery, planned: list[Planned], rng: random.Random) -> int | None:
        """Resolve the disconnect byte against the planned body (always strictly inside it)."""
        if delivery.disconnect_at is None:
            return None
        total = planned_bytes(planned)
        raw = None if delivery.disconnect_at < 0 else delivery.disconnect_at
        fault = resolve_disconnect(Fault(FaultKind.DISCONNECT, raw), total, rng)
        assert fault.value is not None
        fault = Fault(FaultKind.DISCONNECT, max(0, min(fault.value, total - 1)))
        delivery.records.append(fault)
        return fault.value

    async def _answer_plain(
        self,
        api: ApiSpec,
        answer: Answer,
        ctx: ScriptContext,
        by_kind: dict[FaultKind, Fault],
        rng: random.Random,
        applied: list[Fault],
        received: ReceivedRequest,
        out: ResponseWriter,
        body_hash: str,
    ) -> None:
        """Non-streaming answer; error_event becomes an HTTP error, slow a delay, disconnect a cut body."""
        obj = api.final_object(answer, ctx)
        received.response_id = str(obj.get("id"))
        if FaultKind.SLOW in by_kind:
            slow = resolve([by_kind[FaultKind.SLOW]], StreamShape(1, 0, False), rng)[0]
            applied.append(slow)
            await asyncio.sleep((slow.value or 0) / 1000.0)
        if FaultKind.ERROR_EVENT in by_kind:
            applied.append(Fault(FaultKind.ERROR_EVENT, 0))
            self._log(received, applied)
            status, kind = (
                (529, "overloaded_error") if api is anthropic_messages.SPEC else (500, "server_error")
            )
            await out.send_json(
                status, api.error_body("Overloaded" if status == 529 else "server error", kind, None, None)
            )
            return
        if FaultKind.DISCONNECT in by_kind:
            size = len(orjson.dumps(obj))
            cut = resolve_disconnect(by_kind[FaultKind.DISCONNECT], size, rng)
            n = max(0, min(cut.value or 0, size - 1))
            applied.append(Fault(FaultKind.DISCONNECT, n))
            self._log(received, applied)
            await out.send_json(200, obj, cut_at=n)
            return
        self._log(received, applied)
        if api is openai_responses.SPEC and ctx.request.get("store") is not False:
            self._stored[received.response_id] = obj
        await out.send_json(200, obj)

    # background retrieval ----------------------------------------------------------------------------

    async def _retrieve(
        self, response_id: str, req: HttpRequest, received: ReceivedRequest, out: ResponseWriter
    ) -> None:
        received.response_id = response_id
        stream = req.query.get("stream") == "true"
        rec = self._background.get(response_id)
        if rec is None:
            if response_id in self._stored and not stream:
                await out.send_json(200, self._stored[response_id])
                return
            if response_id in self._stored:
                raise BadRequestError("only background responses created with stream=true can be streamed")
            raise BadRequestError(f"No response found with id '{response_id}'.", status=404)
        if not stream:
            await out.send_json(200, rec.snapshot())
            return
        await self._reattach(rec, req, received, out, True)

    async def _reattach(
        self,
        rec: BackgroundResponse,
        req: HttpRequest,
        received: ReceivedRequest,
        out: ResponseWriter,
        stream: bool,
    ) -> None:
        """Stream a stored background response from `starting_after + 1` (or return its snapshot)."""
        if not stream:
            await out.send_json(200, rec.snapshot())
            return
        if not rec.streamable:
            raise BadRequestError("only background responses created with stream=true can be streamed")
        raw_after = req.query.get("starting_after")
        try:
            after = int(raw_after) if raw_after not in (None, "") else -1
        except ValueError:
            raise BadRequestError("starting_after must be an integer", param="starting_after") from None
        start = max(0, after + 1)
        reads = self._seen[("resume", rec.response_id)]
        self._seen[("resume", rec.response_id)] += 1
        rng = rng_for(self.seed, "faults", f"resume:{rec.response_id}:{reads}")
        header = req.headers.get(FAULT_HEADER)
        requested = (
            parse_fault_header(header)
            if header is not None
            else (self.fault_plan.scripted(self._script) + self.fault_plan.draw(rng))  # counted too
        )
        faults = [
            f for f in {f.kind: f for f in reversed(requested)}.values() if f.kind not in CONTENT_FAULTS
        ]
        delivery = self._delivery(faults, rec.events, start > 0, rng)
        late = rec.events[max(0, start - delivery.late) : start] if delivery.late else []
        planned = plan(
            rec.events,
            start=start,
            duplicate=delivery.duplicate,
            drop_terminal=delivery.drop_terminal,
            late=late,
            gated=True,
        )
        disconnect = self._cut(delivery, planned, rng)
        self._log(received, delivery.records)
        await deliver(
            out,
            planned,
            disconnect_at=disconnect,
            delay_s=delivery.delay_s,
            wait_for=rec.wait_for,
            hold=self._hold(delivery, received, out),
        )

    async def _cancel(self, response_id: str, out: ResponseWriter) -> None:
        rec = self._background.get(response_id)
        if rec is None:
            if response_id in self._stored:
                raise BadRequestError("Only responses created with background=true can be cancelled.")
            raise BadRequestError(f"No response found with id '{response_id}'.", status=404)
        await rec.cancel()
        await out.send_json(200, rec.snapshot())

    def _log(self, received: ReceivedRequest, faults: list[Fault]) -> None:
        self.fault_log.extend(FaultRecord(received.request_id, f) for f in faults)


def _last_user_text(conv: Conversation) -> str:
    """The last text part of the request's last turn when that turn is the user's text, else ""
    (`FaultPlan.by_last_user_marker`): where an API merges consecutive user turns, the latest words."""
    return conv.last_user_part if conv.last is LastTurn.USER_TEXT else ""


def _api_for(path: str) -> ApiSpec:
    if path.startswith("/v1/messages"):
        return anthropic_messages.SPEC
    if path.startswith("/v1/chat"):
        return openai_chat.SPEC
    return openai_responses.SPEC


def _response_id_of(events: list[WireEvent]) -> str | None:
    first = events[0].data if events else None
    if isinstance(first, dict):
        if isinstance(first.get("responseId"), str):
            return str(first["responseId"])
        if isinstance(first.get("message"), dict):
            return str(first["message"]["id"])
        if isinstance(first.get("response"), dict):
            return str(first["response"]["id"])
        if "id" in first:
            return str(first["id"])
    return None


def _redrawn(
    fault_plan: FaultPlan, fault_rng: random.Random, delivery_rng: random.Random
) -> tuple[Fault, ...]:
    """The plan's random faults: all from `fault_rng` on a first connection; on a keyed request's later
    connection, the content faults from `fault_rng` (the same response) and the delivery faults from
    `delivery_rng` (this connection)."""
    drawn = fault_plan.draw(fault_rng)
    if delivery_rng is fault_rng:
        return drawn
    fresh = fault_plan.draw(delivery_rng)
    kept = {f.kind for f in drawn if f.kind in CONTENT_FAULTS} | {
        f.kind for f in fresh if f.kind not in CONTENT_FAULTS
    }
    return tuple(Fault(kind) for kind in FaultKind if kind in kept)
