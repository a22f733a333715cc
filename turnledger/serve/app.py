"""The ASGI app of `turnledger serve` (Starlette).

Reads come from the projections (`ProjectionReader`) and from each conversation's live event stream, the
capped Redis Stream the projector's script appends to in the same call that applies a batch
(`projections/script.py`): exactly once, whatever the number of projectors or `serve` instances. The SSE
ids are the stream's entry ids, so a client that reconnects with `Last-Event-ID` (EventSource does it on
its own) resumes right after the last event it saw: nothing lost, nothing repeated. The only writes are a
user turn, a dispatch request and a cancel, all through the `GatewayClient` (ingress), never to Redis;
their bodies are read strictly (`serve/bodies.py`), a body refused is a 400 naming the field, and so is
an argument the gateway client refuses (`EventArgumentError`, a ValueError: a blank id, a dispatch policy
the adapter's provider is sure to refuse), nothing sent.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar, cast

import orjson
from redis.asyncio.connection import Connection
from redis.exceptions import RedisClusterException, RedisError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnledger.adapters.admission import ModelRegistry
from turnledger.errors import DispatchRequestError, KafkaUnavailableError, RequestBodyError
from turnledger.gateway.client import GatewayClient, RefusedEventError
from turnledger.observability.runtime_metrics import SERVE_EVENTS, SERVE_REQUESTS, SERVE_STREAMS
from turnledger.processors.model_registry import load_model_registry
from turnledger.projections.keys import DEFAULT_KEY_PREFIX, ProjectionKeys
from turnledger.projections.reader import ProjectionReader
from turnledger.projections.replies import bytes_hash, scored_list
from turnledger.projections.shards import discover
from turnledger.redisconn.cluster import RedisClient, connection_kwargs
from turnledger.serve.bodies import CancelBody, DispatchBody, TurnBody, listing_limit, read_body
from turnledger.serve.dispatch_defaults import DispatchDefaults, dispatch_refusal
from turnledger.serve.redis_failures import RedisFailures

StreamEntries = list[tuple[bytes, dict[bytes, bytes]]]
BODY_FIELDS = {"adapter": "adapter", "provider": "provider", "model_revision": "modelRevision"}
"""A dispatch body's field by the `DispatchDefaults` field it overrides."""
T = TypeVar("T")

_STREAM_ID = re.compile(r"[0-9]+-[0-9]+")
STATIC_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
RETRY_AFTER_REDIS_FAILED_MS = 3000
"""EventSource's wait before it resumes a stream that Redis's failure ended: a restart may be over."""


@dataclass(frozen=True)
class ServeConfig:
    key_prefix: str = DEFAULT_KEY_PREFIX
    token: str | None = None
    block_ms: int = 4_000
    """XREAD BLOCK timeout; an SSE comment is sent when it passes, to keep proxies from closing. Below
    the Redis client's read timeout (redis-py 8's default `socket_timeout` is 5 s): a longer block is
    read as a Redis that does not answer, which ended every idle stream as an outage. serve cuts it to
    its client's (`block_within`)."""
    batch: int = 200
    dispatch: DispatchDefaults = field(default_factory=DispatchDefaults)
    models: ModelRegistry = field(default_factory=load_model_registry)
    """What a dispatch's body may name (`dispatch_defaults.dispatch_refusal`)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


class BearerToken:
    """Every request carries `Authorization: Bearer <token>` (or `?token=`, for EventSource and the page
    link, which cannot set headers); compared in constant time. Without a token, everything is open
    (loopback only: the CLI refuses another address without one)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.token:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token", "")
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            given = header[7:].strip()
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            response = JSONResponse(
                {"error": "unauthorized"}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class RequestCounter:
    """Counts every HTTP answer by its route template (never the raw path: conversation ids would make
    one series each) and status code."""

    def __init__(self, app: ASGIApp, routes: list[Route]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            SERVE_REQUESTS.labels(self._template(scope), str(status["code"])).inc()

    def _template(self, scope: Scope) -> str:
        """The route the router chose, or (a request refused before routing, e.g. without its token)
        the one it would have chosen."""
        chosen = scope.get("route")
        if isinstance(chosen, Route):
            return chosen.path
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return route.path
        return "unmatched"


class Layout:
    """The projection's keys as Redis holds it (split in slot groups or not, `shards.discover`): the
    page may be served before the first projector records the split, so an unsplit answer is asked
    again after `recheck_s`; a split one is kept (it changes only by a rebuild)."""

    def __init__(self, redis: RedisClient, prefix: str, recheck_s: float = 5.0) -> None:
        self.redis, self.prefix, self.recheck_s = redis, prefix, recheck_s
        self._keys: ProjectionKeys | None = None
        self._read_at = 0.0

    async def keys(self) -> ProjectionKeys:
        now = time.monotonic()
        if self._keys is None or (not self._keys.split and now - self._read_at >= self.recheck_s):
            self._keys, self._read_at = await discover(self.prefix, self.redis), now
        return self._keys


def create_app(redis: RedisClient, gateway: GatewayClient, config: ServeConfig | None = None) -> Starlette:
    """The serve API and page; `config` None is `ServeConfig()`, made on the call (it loads the model
    registry, which TURNLEDGER_MODEL_REGISTRY may name: not at import)."""
    return _app(redis, gateway, config or ServeConfig())


def read_timeout_s(redis: RedisClient) -> float | None:
    """How long `redis` waits for an answer before it takes Redis for gone (`socket_timeout`; redis-py 8
    sets 5 s when the URL sets none; None: for ever)."""
    kwargs = connection_kwargs(redis)  # what its connections are made with
    given = {"socket_timeout": kwargs["socket_timeout"]} if "socket_timeout" in kwargs else {}
    timeout = Connection(**given).socket_timeout
    return None if timeout is None else float(timeout)


def block_within(block_ms: int, read_timeout: float | None) -> int:
    """`block_ms`, cut to four fifths of the client's read timeout: a block the client stops reading
    before it ends is taken for a Redis that does not answer, and ends every idle stream (a URL's
    `?socket_timeout=1` included). At least 1 ms: 0 is XREAD's "block for ever"."""
    if read_timeout is None:
        return block_ms
    return max(1, min(block_ms, int(read_timeout * 800)))


def _app(redis: RedisClient, gateway: GatewayClient, config: ServeConfig) -> Starlette:
    layout = Layout(redis, config.key_prefix)
    redis_failures = RedisFailures(redis)

    async def index(request: Request) -> Response:
        html = resources.files("turnledger.serve").joinpath("static/index.html").read_text("utf-8")
        return Response(html, media_type="text/html", headers=_page_headers())

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return _json({"error": "not found"}, 404)
        body = resources.files("turnledger.serve").joinpath(f"static/{name}").read_text("utf-8")
        return Response(body, media_type=STATIC_FILES[name], headers=_page_headers())

    async def conversations(request: Request) -> Response:
        limit = listing_limit(request.query_params.get("limit"))
        keys = await layout.keys()
        rows: list[tuple[bytes, float]] = []
        for group in keys.groups:  # each slot group's newest, then the newest of them all
            rows += scored_list(await redis.zrevrange(group.conversations, 0, limit - 1, withscores=True))
        if keys.split:
            rows = sorted(rows, key=lambda row: (row[1], row[0]), reverse=True)[:limit]
        out = []
        for member, score in rows:
            conv = member.decode()
            raw = bytes_hash(await redis.hgetall(keys.conversation(conv)))
            info = {k.decode(): v.decode() for k, v in raw.items()}
            out.append(
                {
                    "conversationId": conv,
                    "updatedAtMs": int(score),
                    "revision": int(info["revision"]) if "revision" in info else None,
                    "turns": int(info.get("turns", "0")),
                }
            )
        return _json({"conversations": out})

    async def conversation(request: Request) -> Response:
        conv = request.path_params["conversation"]
        keys = await layout.keys()
        reader = ProjectionReader(redis, config.key_prefix, keys)
        # the stream position first: whatever the snapshot holds beyond it comes again as events, which
        # the page applies idempotently (by block id, by operation and generation); nothing is missed
        last = cast(StreamEntries, await redis.xrevrange(keys.events(conv), count=1))
        last_id = last[0][0].decode() if last else "0-0"
        previews = await reader.previews(conv)
        return _json(
            {
                "conversationId": conv,
                "revision": await reader.revision(conv),
                "lastEventId": last_id,
                "history": [b.to_json_dict() for b in await reader.history(conv)],
                "operations": [op.to_json() for op in await reader.operations(conv)],
                "previews": [
                    {
                        "operationId": p.operation_id,
                        "attemptGeneration": p.attempt_generation,
                        "blockIndex": p.block_index,
                        "text": p.text,
                        "textOffset": 0,
                        "length": p.length,
                        "throughSequence": p.through_sequence,
                        "revocable": True,
                    }
                    for p in previews
                ],
                "quarantine": [q.to_json_dict() for q in await reader.quarantine(conv)],
                "rejections": [r.to_json_dict() for r in await reader.rejections(conv)],
            }
        )

    async def events(request: Request) -> Response:
        conv = request.path_params["conversation"]
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "0-0"
        if not _is_stream_id(after):
            return _json({"error": f"not a stream id: {after!r}"}, 400)
        key = (await layout.keys()).events(conv)
        # asked before the answer starts: a stream asked while Redis is down is a 503, which the page
        # retries with backoff, not a stream that opens and ends at once (a split layout asks Redis nothing)
        trimmed = await _trimmed_past(redis, key, after)
        return StreamingResponse(
            _sse(redis, key, after, trimmed, config, redis_failures),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def post_turn(request: Request) -> Response:
        conv = request.path_params["conversation"]
        body = read_body(TurnBody, await request.body())
        event = await gateway.submit_user_turn(conv, body.text, expected_revision=body.expected_revision)
        return _json({"turnId": event.turn_id, "eventId": event.event_id}, 202)

    async def post_dispatch(request: Request) -> Response:
        conv = request.path_params["conversation"]
        body = read_body(DispatchBody, await request.body())
        d = config.dispatch
        adapter = _given(body.adapter, d.adapter)
        provider = _given(body.provider, d.provider)
        model_revision = _given(body.model_revision, d.model_revision)
        refusal = dispatch_refusal(adapter, provider, model_revision, config.models)
        if refusal is not None:
            raise DispatchRequestError(BODY_FIELDS[refusal.checked], refusal.value, refusal.why)
        event = await gateway.request_dispatch(
            conv,
            adapter=adapter,
            provider=provider,
            model_revision=model_revision,
            max_output_tokens=_given(body.max_output_tokens, d.max_output_tokens),
            operation_id=body.operation_id,
            policy=body.policy,
        )
        return _json({"operationId": event.operation_id, "eventId": event.event_id}, 202)

    async def post_cancel(request: Request) -> Response:
        conv = request.path_params["conversation"]
        body = read_body(CancelBody, await request.body())
        await gateway.cancel(conv, body.operation_id, _given(body.reason, "cancelled from serve"))
        return _json({"cancelled": body.operation_id}, 202)

    async def refused(request: Request, exc: Exception) -> Response:
        return _json({"error": str(exc)}, 422)

    async def bad_body(request: Request, exc: Exception) -> Response:
        return _json({"error": f"bad request: {exc}"}, 400)

    async def unavailable(request: Request, exc: Exception) -> Response:
        return _json({"error": str(exc)}, 503)

    async def redis_failed(request: Request, exc: Exception) -> Response:
        status, error = redis_failures.answer(cast(RedisError | RedisClusterException, exc))
        return _json({"error": error}, status)

    c = "/api/conversations/{conversation:str}"
    routes = [
        Route("/", index),
        Route("/static/{name:str}", static),
        Route("/api/conversations", conversations),
        Route(c, conversation),
        Route(c + "/events", events),
        Route(c + "/turns", post_turn, methods=["POST"]),
        Route(c + "/dispatch", post_dispatch, methods=["POST"]),
        Route(c + "/cancel", post_cancel, methods=["POST"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(RequestCounter, routes=routes), Middleware(BearerToken, token=config.token)],
        exception_handlers={
            RefusedEventError: refused,
            DispatchRequestError: refused,
            orjson.JSONDecodeError: bad_body,
            RequestBodyError: bad_body,
            ValueError: bad_body,
            KafkaUnavailableError: unavailable,
            RedisError: redis_failed,
            RedisClusterException: redis_failed,
        },
    )


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


def _page_headers() -> dict[str, str]:
    """No inline script or style may run (the page inserts every text with textContent anyway)."""
    return {
        "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-cache",
    }


def sse_frame(entry_id: str, kind: str, data: str) -> bytes:
    # data is one line of JSON (orjson never emits a raw newline), so one `data:` field suffices
    return f"id: {entry_id}\nevent: {kind}\ndata: {data}\n\n".encode()


def unavailable_frame(error: str) -> bytes:
    """The last frame of a stream whose Redis failed: no id (the client's last one stays its resume
    point), and the wait before EventSource reconnects."""
    data = orjson.dumps({"error": error}).decode()
    return f"retry: {RETRY_AFTER_REDIS_FAILED_MS}\nevent: unavailable\ndata: {data}\n\n".encode()


async def _sse(
    redis: RedisClient,
    key: str,
    after: str,
    trimmed: str | None,
    config: ServeConfig,
    failures: RedisFailures,
) -> AsyncIterator[bytes]:
    """The stream after `after` (a `reset` first when `trimmed`, `_trimmed_past`). Redis failing under
    it ends it, cleanly, with an `unavailable` event: the client resumes after its last event, by id,
    once Redis answers (a 503 meanwhile). Retrying Redis here instead would keep a response open that
    looks live while nothing can flow, once per open page."""
    yield b"retry: 1000\n\n"
    if trimmed is not None:
        SERVE_EVENTS.labels("reset").inc()
        yield sse_frame(after, "reset", orjson.dumps({"firstId": trimmed}).decode())
    SERVE_STREAMS.inc()
    try:
        async for frame in _entries(redis, key, after, config):
            yield frame
    except (RedisError, RedisClusterException) as exc:
        yield unavailable_frame(failures.stream_ended(exc))
    finally:
        SERVE_STREAMS.dec()


def _is_stream_id(text: str) -> bool:
    """What Redis takes for a stream entry id: two numbers of 64 bits, matched whole (with `$` a
    trailing newline went through, with `\\d` digits other than ASCII's, and Redis refused them only
    once the stream had started)."""
    return _STREAM_ID.fullmatch(text) is not None and max(_stream_id(text)) < 2**64


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq)


async def _trimmed_past(redis: RedisClient, key: str, after: str) -> str | None:
    """The stream's first id when the client's last event is older than the oldest entry kept: the cap
    may have trimmed entries it has not seen, so it must load the snapshot again (a `reset` event).
    None when nothing it has not seen can be gone. Redis is asked from the start too (`0-0`): down, that
    is the 503 before the stream starts, which EventSource ends on, not a stream opened and ended at
    once, which it reopens every 3 s for as long as Redis is down."""
    first = cast(list[tuple[bytes, object]], await redis.xrange(key, count=1))
    if not first or after == "0-0":
        return None
    first_id = first[0][0].decode()
    return first_id if _stream_id(first_id) > _stream_id(after) else None


async def _entries(redis: RedisClient, key: str, last: str, config: ServeConfig) -> AsyncIterator[bytes]:
    while True:
        reply = cast(
            list[tuple[bytes, StreamEntries]],
            await redis.xread({key: last}, count=config.batch, block=config.block_ms),
        )
        if not reply:
            yield b": keepalive\n\n"
            continue
        for _stream, entries in reply:
            for entry_id, fields in entries:
                last = entry_id.decode()
                kind = fields.get(b"type", b"unknown").decode()
                data = fields.get(b"data", b"{}").decode()
                SERVE_EVENTS.labels(kind).inc()
                yield sse_frame(last, kind, data)
