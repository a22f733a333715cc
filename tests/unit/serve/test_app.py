"""The read API of `turnledger serve` (`serve/app.py`) over an in-memory Redis and a fake gateway: the
listing and a conversation's snapshot as the projection holds them (split in slot groups or not), the
live stream's frames, resume and reset, the writes handed to the gateway, the token, the request
counter, and what each failure is answered with. On the real Redis and Kafka:
tests/integration/serve/test_api.py."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from types import SimpleNamespace
from typing import Any, cast

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from pydantic import StrictBool
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from starlette.applications import Starlette

from tests.unit.projections.test_reader import MemoryRedis, block, preview_json, quarantined, rejected
from turnledger.adapters.admission import ModelRegistry, builtin_registry
from turnledger.codec import decode
from turnledger.errors import KafkaUnavailableError, RequestBodyError
from turnledger.gateway import client as client_module
from turnledger.gateway.client import GatewayClient, RefusedEventError
from turnledger.model.events import DispatchRequested
from turnledger.model.reasons import ReasonCode
from turnledger.projections.keys import ProjectionKeys
from turnledger.redisconn.client import redis_client
from turnledger.redisconn.cluster import RedisClient
from turnledger.redisconn.refusals import CHECK_LOGIN
from turnledger.serve import app as serve_app
from turnledger.serve.app import (
    STATIC_FILES,
    BearerToken,
    DispatchDefaults,
    Layout,
    ServeConfig,
    create_app,
    sse_frame,
)
from turnledger.serve.bodies import Body, Name, read_body
from turnledger.serve.redis_failures import RedisFailures

Entry = tuple[bytes, dict[bytes, bytes]]


class StreamRedis(MemoryRedis):
    """`MemoryRedis` with ranges of any length and streams: XRANGE, XREVRANGE and an XREAD that
    answers what is past the id it is given, else (a BLOCK that passed) an empty reply after one turn
    of the loop (a thousand at most: a stream that reads on and sends nothing fails), or, when
    `blocks`, waits until something is appended: a test sees what a stream sends next at once.
    `sent` records every command with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.streams: dict[str, list[Entry]] = {}
        self.sent: list[tuple[Any, ...]] = []
        self.blocks = False
        self.idle = 0
        self.appended = asyncio.Event()

    def xadd(self, key: str, entry_id: str, **fields: str) -> None:
        self.streams.setdefault(key, []).append(
            (entry_id.encode(), {k.encode(): v.encode() for k, v in fields.items()})
        )
        self.appended.set()

    async def zrevrange(self, key: str, start: int, end: int, withscores: bool = False) -> list[Any]:
        self.calls.append("zrevrange")
        self.sent.append(("zrevrange", key, start, end, withscores))
        rows = list(reversed(self._ordered(key)))[start : None if end == -1 else end + 1]
        return rows if withscores else [member for member, _ in rows]

    async def xrange(self, key: str, count: int) -> list[Entry]:
        self.sent.append(("xrange", key, count))
        return self.streams.get(key, [])[:count]

    async def xrevrange(self, key: str, count: int) -> list[Entry]:
        self.sent.append(("xrevrange", key, count))
        return list(reversed(self.streams.get(key, [])))[:count]

    async def xread(self, streams: dict[str, str], count: int, block: int) -> list[tuple[bytes, list[Entry]]]:
        self.sent.append(("xread", dict(streams), count, block))
        [(key, last)] = streams.items()
        _id(last)
        while True:
            after = [e for e in self.streams.get(key, []) if _id(e[0].decode()) > _id(last)]
            if after:
                return [(key.encode(), after[:count])]
            if not self.blocks:
                self.idle += 1
                assert self.idle <= 1000, "a stream reads on and on and sends nothing"
                await asyncio.sleep(0)
                return []
            self.appended.clear()
            await self.appended.wait()


class Unread(StreamRedis):
    """A Redis no stream of which may be read: a stream that starts fails at once."""

    async def xrange(self, key: str, count: int) -> list[Entry]:
        raise AssertionError(f"XRANGE {key}")

    async def xread(self, streams: dict[str, str], count: int, block: int) -> list[tuple[bytes, list[Entry]]]:
        raise AssertionError(f"XREAD {streams}")


class ClusterRedis(StreamRedis, RedisCluster):  # type: ignore[misc]
    """The same, taken for a Redis Cluster client (`is_cluster`), so its projection may be split."""


def _id(text: str) -> tuple[int, int]:
    if not re.fullmatch(r"[0-9]+-[0-9]+", text):
        raise ResponseError("Invalid stream ID specified as stream command argument")
    ms, seq = text.split("-")
    return int(ms), int(seq)


@dataclass
class FakeGateway:
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    fails: BaseException | None = None

    def _called(self, *call: Any) -> None:
        self.calls.append(call)
        if self.fails is not None:
            raise self.fails

    async def submit_user_turn(self, conversation_id: str, text: str, **kwargs: Any) -> Any:
        self._called("turn", conversation_id, text, kwargs)
        return SimpleNamespace(turn_id="turn-9", event_id="ev-turn")

    async def request_dispatch(self, conversation_id: str, **kwargs: Any) -> Any:
        self._called("dispatch", conversation_id, kwargs)
        return SimpleNamespace(operation_id=kwargs["operation_id"] or "op-new", event_id="ev-dispatch")

    async def cancel(self, conversation_id: str, operation_id: str | None = None, reason: str = "") -> None:
        self._called("cancel", conversation_id, operation_id, reason)


def make_app(redis: Any, gateway: FakeGateway | None = None, **config: Any) -> Starlette:
    return create_app(redis, cast(GatewayClient, gateway or FakeGateway()), ServeConfig(**config))


def client(app: Starlette) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def requests_counted(route: str, status: str) -> float:
    return sample("turnledger_serve_requests_total", route=route, status=status)


KEYS = ProjectionKeys("tl:")
OTHER = ProjectionKeys("other:")


# ----------------------------------------------------------------------------------- page and files


async def test_the_page_is_the_packaged_index_with_headers_that_forbid_inline_code() -> None:
    async with client(make_app(StreamRedis())) as http:
        page = await http.get("/")
    html = resources.files("turnledger.serve").joinpath("static/index.html").read_text("utf-8")
    assert (page.status_code, page.text) == (200, html)
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == (
        "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'"
    )
    assert (page.headers["x-content-type-options"], page.headers["cache-control"]) == ("nosniff", "no-cache")


async def test_the_page_and_files_are_read_as_utf_8_whatever_the_locale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a Latin-1 locale (a file read without an encoding would take it) they are the same."""
    text_encoding = io.text_encoding
    monkeypatch.setattr(io, "text_encoding", lambda encoding, *args: text_encoding(encoding or "latin-1"))
    async with client(make_app(StreamRedis())) as http:
        for path, name in [("/", "index.html"), ("/static/app.js", "app.js")]:
            held = resources.files("turnledger.serve").joinpath(f"static/{name}").read_bytes().decode()
            assert not held.isascii()
            assert (await http.get(path)).text == held


@pytest.mark.parametrize("name", sorted(STATIC_FILES))
async def test_each_static_file_is_served_with_its_type_and_the_page_headers(name: str) -> None:
    async with client(make_app(StreamRedis())) as http:
        answer = await http.get(f"/static/{name}")
    body = resources.files("turnledger.serve").joinpath(f"static/{name}").read_text("utf-8")
    assert (answer.status_code, answer.text) == (200, body)
    assert answer.headers["content-type"] == f"{STATIC_FILES[name]}; charset=utf-8"
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_the_static_files_are_the_script_and_the_style() -> None:
    assert STATIC_FILES == {"app.js": "text/javascript", "style.css": "text/css"}


async def test_any_other_static_name_is_a_404_even_a_file_of_the_package() -> None:
    async with client(make_app(StreamRedis())) as http:
        for name in ("index.html", "nothing.js"):
            answer = await http.get(f"/static/{name}")
            assert (answer.status_code, answer.json()) == (404, {"error": "not found"})
            assert answer.headers["content-type"] == "application/json"


# ------------------------------------------------------------------------------------------ listing


def listed(redis: StreamRedis, keys: ProjectionKeys, conv: str, at_ms: float, **info: str) -> None:
    redis.zadd(keys.group_of(conv).conversations, conv, at_ms)
    for name, value in info.items():
        redis.hset(keys.conversation(conv), name, value)


async def test_the_listing_is_newest_first_with_revision_and_turns() -> None:
    redis = StreamRedis()
    listed(redis, OTHER, "c-old", 1000.0, revision="3", turns="2", updated="x")
    listed(redis, OTHER, "c-new", 2000.0, revision="11", turns="5")
    listed(redis, OTHER, "c-bare", 1500.0)
    async with client(make_app(redis, key_prefix="other:")) as http:
        answer = await http.get("/api/conversations")
    assert answer.status_code == 200
    assert answer.json() == {
        "conversations": [
            {"conversationId": "c-new", "updatedAtMs": 2000, "revision": 11, "turns": 5},
            {"conversationId": "c-bare", "updatedAtMs": 1500, "revision": None, "turns": 0},
            {"conversationId": "c-old", "updatedAtMs": 1000, "revision": 3, "turns": 2},
        ]
    }
    assert redis.sent == [("zrevrange", "other:conversations", 0, 199, True)]
    assert redis.calls == ["get", "zrevrange", "hgetall", "hgetall", "hgetall"]


@pytest.mark.parametrize(("given", "last"), [("1", 0), ("2", 1), ("1000", 999), ("5000", 999)])
async def test_the_listing_reads_limit_rows_and_at_most_1000(given: str, last: int) -> None:
    redis = StreamRedis()
    for n in range(3):
        listed(redis, KEYS, f"c-{n}", 100.0 + n)
    async with client(make_app(redis)) as http:
        answer = await http.get(f"/api/conversations?limit={given}")
    assert redis.sent == [("zrevrange", "tl:conversations", 0, last, True)]
    assert [c["conversationId"] for c in answer.json()["conversations"]] == ["c-2", "c-1", "c-0"][: last + 1]


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("0", "'0'"),
        ("-5", "'-5'"),
        ("abc", "'abc'"),
        ("1.5", "'1.5'"),
        ("", "''"),
        ("٣", "'٣'"),
        ("x" * 40, "'" + "x" * 40 + "'"),
        ("x" * 50, "'" + "x" * 40 + "…'"),
    ],
)
async def test_a_listing_limit_below_1_or_not_a_whole_number_is_a_400_and_reads_nothing(
    given: str, shown: str
) -> None:
    """`ZREVRANGE key 0 -1` is the whole set: a limit of 0 listed every conversation, past the bound."""
    redis = StreamRedis()
    for n in range(3):
        listed(redis, KEYS, f"c-{n}", 100.0 + n)
    async with client(make_app(redis)) as http:
        answer = await http.get("/api/conversations", params={"limit": given})
    assert answer.status_code == 400
    assert answer.json() == {"error": f"bad request: 'limit' must be a whole number from 1, not {shown}"}
    assert redis.sent == []


def two_groups(keys: ProjectionKeys, names: list[str]) -> dict[int, list[str]]:
    by_group: dict[int, list[str]] = {}
    for name in names:
        by_group.setdefault(keys.groups.index(keys.group_of(name)), []).append(name)
    return by_group


SPLIT = ProjectionKeys("tl:", one_slot=True, shards=3)
NAMES = [f"c-{n}" for n in range(12)]


def split_redis() -> ClusterRedis:
    redis = ClusterRedis()
    redis.strings[SPLIT.layout] = b"3"
    return redis


async def test_a_split_listing_is_every_groups_newest_merged_newest_first_then_by_id() -> None:
    redis = split_redis()
    groups = two_groups(SPLIT, NAMES)
    assert sorted(groups) == [0, 1, 2], "the names must fall in every group"
    scores = {name: 1000.0 + (n % 4) for n, name in enumerate(NAMES)}  # ties across the groups
    for name in NAMES:
        listed(redis, SPLIT, name, scores[name], turns="1")
    expected = sorted(NAMES, key=lambda name: (scores[name], name), reverse=True)[:4]
    async with client(make_app(redis)) as http:
        answer = await http.get("/api/conversations?limit=4")
    assert [c["conversationId"] for c in answer.json()["conversations"]] == expected
    assert [c["updatedAtMs"] for c in answer.json()["conversations"]] == [1003, 1003, 1003, 1002]
    assert [call[1:] for call in redis.sent] == [(g.conversations, 0, 3, True) for g in SPLIT.groups]


# -------------------------------------------------------------------------------- one conversation


async def test_a_conversation_is_its_snapshot_and_the_stream_position_read_before_it() -> None:
    redis = split_redis()
    conv = next(name for name in NAMES if SPLIT.groups.index(SPLIT.group_of(name)) == 2)
    keys = SPLIT
    redis.hset(keys.conversation(conv), "revision", "7")
    redis.hset(keys.history(conv), "b1", block("b1", 0, "hello").model_dump_json())
    redis.zadd(keys.history_order(conv), "b1", 0)
    redis.sadd(keys.operations(conv), "op-1")
    redis.hset(keys.operation(conv, "op-1"), "state", "STREAMING")
    redis.hset(keys.previews(conv, "op-1"), "2:1", preview_json(2, 1, 9, text="héllo"))
    record = quarantined(4)
    redis.rpush(keys.quarantine(conv), record.model_dump_json())
    refused = rejected(conv, 55)
    redis.zadd(keys.group_of(conv).rejections, refused.model_dump_json(), 55)
    for other in NAMES[:4]:  # another conversation's, in its group or in this one, are not listed
        if other != conv:
            redis.zadd(keys.group_of(other).rejections, rejected(other, 60).model_dump_json(), 60)
    redis.xadd(keys.events(conv), "5-0", type="committed", data="{}")
    redis.xadd(keys.events(conv), "6-1", type="status", data="{}")
    async with client(make_app(redis)) as http:
        answer = await http.get(f"/api/conversations/{conv}")
    assert answer.status_code == 200
    assert answer.json() == {
        "conversationId": conv,
        "revision": 7,
        "lastEventId": "6-1",
        "history": [block("b1", 0, "hello").to_json_dict()],
        "operations": [{"operationId": "op-1", "state": "STREAMING"}],
        "previews": [
            {
                "operationId": "op-1", "attemptGeneration": 2, "blockIndex": 1, "text": "héllo",
                "textOffset": 0, "length": 5, "throughSequence": 9, "revocable": True,
            }
        ],
        "quarantine": [record.to_json_dict()],
        "rejections": [refused.to_json_dict()],
    }  # fmt: skip
    stream_reads = [call for call in redis.sent if call[0].startswith("x")]
    assert stream_reads == [("xrevrange", keys.events(conv), 1)]


async def test_an_unknown_conversation_is_empty_at_stream_position_0_0() -> None:
    async with client(make_app(StreamRedis(), key_prefix="other:")) as http:
        answer = await http.get("/api/conversations/nobody")
    assert answer.json() == {
        "conversationId": "nobody", "revision": None, "lastEventId": "0-0", "history": [],
        "operations": [], "previews": [], "quarantine": [], "rejections": [],
    }  # fmt: skip


async def test_a_conversation_is_read_under_the_configured_prefix() -> None:
    redis = StreamRedis()
    redis.hset(OTHER.conversation("c1"), "revision", "2")
    redis.hset(KEYS.conversation("c1"), "revision", "99")
    async with client(make_app(redis, key_prefix="other:")) as http:
        assert (await http.get("/api/conversations/c1")).json()["revision"] == 2


# ------------------------------------------------------------------------------------------- layout


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(serve_app, "time", clock)
    return clock


async def test_an_unsplit_layout_is_asked_again_after_five_seconds(clock: Clock) -> None:
    redis = ClusterRedis()
    layout = Layout(redis, "tl:")
    assert layout.recheck_s == 5.0
    assert await layout.keys() == ProjectionKeys("tl:", one_slot=True)
    redis.strings[SPLIT.layout] = b"3"
    clock.now += 4.999
    assert not (await layout.keys()).split
    assert redis.calls == ["get"]
    clock.now += 0.001
    assert await layout.keys() == SPLIT
    assert redis.calls == ["get", "get"]


async def test_a_split_layout_is_kept(clock: Clock) -> None:
    redis = split_redis()
    layout = Layout(redis, "tl:", recheck_s=1.0)
    assert await layout.keys() == SPLIT
    del redis.strings[SPLIT.layout]
    clock.now += 1000.0
    assert await layout.keys() == SPLIT
    assert redis.calls == ["get"]


async def test_a_layout_is_asked_once_within_its_recheck_time(clock: Clock) -> None:
    redis = StreamRedis()
    layout = Layout(redis, "other:", recheck_s=2.0)  # type: ignore[arg-type]
    first = await layout.keys()
    clock.now += 1.0
    assert await layout.keys() is first and first == OTHER
    clock.now += 1.0
    assert await layout.keys() == OTHER
    assert redis.calls == ["get", "get"]


# ------------------------------------------------------------------------------------- event stream


async def frames_of(stream: AsyncIterator[bytes], count: int) -> list[bytes]:
    """The next `count` chunks; a stream that stops sending fails the test (its reads never block
    unless `blocks` is set: 5 s is only a bound for a broken stream)."""
    async with asyncio.timeout(5):
        return [await anext(stream) for _ in range(count)]


async def open_stream(redis: StreamRedis, key: str, after: str, config: ServeConfig) -> AsyncIterator[bytes]:
    """The stream the events endpoint answers with, `_trimmed_past` asked first as it does."""
    typed = cast(RedisClient, redis)
    trimmed = await serve_app._trimmed_past(typed, key, after)
    return serve_app._sse(typed, key, after, trimmed, config, RedisFailures(typed))


def test_a_frame_is_id_event_and_one_data_line() -> None:
    assert sse_frame("5-1", "committed", '{"a":1}') == b'id: 5-1\nevent: committed\ndata: {"a":1}\n\n'


async def test_a_stream_from_the_start_sends_every_entry_in_batches_then_waits() -> None:
    redis = StreamRedis()
    redis.blocks = True
    key = KEYS.events("c1")
    redis.xadd(key, "1-0", type="committed", data='{"n":1}')
    redis.xadd(key, "1-1", type="status", data='{"n":2}')
    redis.xadd(key, "2-0", data='{"n":3}')
    redis.xadd(key, "3-0", type="preview")
    config = ServeConfig(batch=2, block_ms=70)
    stream = await open_stream(redis, key, "0-0", config)
    assert await frames_of(stream, 5) == [
        b"retry: 1000\n\n",
        b'id: 1-0\nevent: committed\ndata: {"n":1}\n\n',
        b'id: 1-1\nevent: status\ndata: {"n":2}\n\n',
        b'id: 2-0\nevent: unknown\ndata: {"n":3}\n\n',
        b"id: 3-0\nevent: preview\ndata: {}\n\n",
    ]
    assert redis.sent == [("xrange", key, 1), ("xread", {key: "0-0"}, 2, 70), ("xread", {key: "1-1"}, 2, 70)]
    waiting = asyncio.ensure_future(anext(stream))
    await until(lambda: len(redis.sent) == 4)
    assert redis.sent[3] == ("xread", {key: "3-0"}, 2, 70)
    redis.xadd(key, "4-0", type="retracted", data="[]")
    assert await waiting == b"id: 4-0\nevent: retracted\ndata: []\n\n"
    await stream.aclose()  # type: ignore[attr-defined]


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


async def test_a_block_that_passes_sends_a_keepalive_comment_and_reads_on() -> None:
    redis = StreamRedis()
    key = KEYS.events("c1")
    stream = await open_stream(redis, key, "0-0", ServeConfig())
    assert await frames_of(stream, 3) == [b"retry: 1000\n\n", b": keepalive\n\n", b": keepalive\n\n"]
    redis.xadd(key, "9-0", type="status", data="{}")
    assert await frames_of(stream, 2) == [b"id: 9-0\nevent: status\ndata: {}\n\n", b": keepalive\n\n"]
    assert redis.sent == [("xrange", key, 1)] + [("xread", {key: "0-0"}, 200, 4_000)] * 3 + [
        ("xread", {key: "9-0"}, 200, 4_000)
    ]
    await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("block_ms", "read_timeout", "blocked"),
    [(4_000, None, 4_000), (4_000, 5.0, 4_000), (4_000, 2.0, 1_600), (1_000, 5.0, 1_000), (4_000, 0.001, 1)],
)
def test_the_block_is_cut_to_four_fifths_of_the_clients_read_timeout_and_never_to_zero(
    block_ms: int, read_timeout: float | None, blocked: int
) -> None:
    assert serve_app.block_within(block_ms, read_timeout) == blocked


@pytest.mark.parametrize(
    ("url", "timeout"),
    [("redis://127.0.0.1:1/0", 5.0), ("redis://127.0.0.1:1/0?socket_timeout=2", 2.0)],
)
async def test_the_read_timeout_is_the_one_the_clients_connections_are_made_with(
    url: str, timeout: float
) -> None:
    """redis-py 8's default when the URL sets none; a URL's own `?socket_timeout=`."""
    client = redis_client(url)
    try:
        assert serve_app.read_timeout_s(client) == timeout
    finally:
        await client.aclose()


async def test_a_cluster_clients_read_timeout_is_its_nodes_connections_one() -> None:
    for given, timeout in (({}, 5.0), ({"socket_timeout": 1}, 1.0), ({"socket_timeout": None}, None)):
        cluster = RedisCluster(host="127.0.0.1", port=1, **given)
        assert serve_app.read_timeout_s(cluster) == timeout, given


async def test_a_stream_blocks_in_redis_for_less_than_serves_client_waits_for_an_answer() -> None:
    """redis-py 8 stops reading after `socket_timeout`, 5 s by default (before it, never): the 15 s block
    timed out as a Redis that does not answer, and every idle stream ended with `unavailable`."""
    client = redis_client("redis://127.0.0.1:1/0")
    try:
        read_timeout_s = client.connection_pool.make_connection().socket_timeout
        assert read_timeout_s is not None and ServeConfig().block_ms < read_timeout_s * 1000
    finally:
        await client.aclose()


async def test_the_events_sent_are_counted_by_type_and_the_open_streams_while_open() -> None:
    redis = StreamRedis()
    key = KEYS.events("c1")
    redis.xadd(key, "1-0", type="counted-a", data="{}")
    redis.xadd(key, "2-0", type="counted-a", data="{}")
    redis.xadd(key, "3-0", type="counted-b", data="{}")
    open_before = sample("turnledger_serve_event_streams")
    a_before = sample("turnledger_serve_events_sent_total", type="counted-a")
    b_before = sample("turnledger_serve_events_sent_total", type="counted-b")
    stream = await open_stream(redis, key, "0-0", ServeConfig())
    await frames_of(stream, 1)
    assert sample("turnledger_serve_event_streams") == open_before
    await frames_of(stream, 3)
    assert sample("turnledger_serve_event_streams") == open_before + 1
    assert sample("turnledger_serve_events_sent_total", type="counted-a") == a_before + 2
    assert sample("turnledger_serve_events_sent_total", type="counted-b") == b_before + 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert sample("turnledger_serve_event_streams") == open_before


@pytest.mark.parametrize(
    ("after", "first"),
    [("4-9", "5-0"), ("5-0", "5-1"), ("9-7", "10-0")],
)
async def test_a_resume_before_the_first_entry_kept_gets_a_reset_first(after: str, first: str) -> None:
    redis = StreamRedis()
    key = KEYS.events("c1")
    redis.xadd(key, first, type="committed", data="{}")
    resets_before = sample("turnledger_serve_events_sent_total", type="reset")
    stream = await open_stream(redis, key, after, ServeConfig())
    assert await frames_of(stream, 3) == [
        b"retry: 1000\n\n",
        f'id: {after}\nevent: reset\ndata: {{"firstId":"{first}"}}\n\n'.encode(),
        f"id: {first}\nevent: committed\ndata: {{}}\n\n".encode(),
    ]
    assert redis.sent == [("xrange", key, 1), ("xread", {key: after}, 200, 4_000)]
    assert sample("turnledger_serve_events_sent_total", type="reset") == resets_before + 1
    await stream.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize(("after", "first"), [("5-0", "5-0"), ("5-1", "5-0"), ("10-0", "9-7")])
async def test_a_resume_at_or_past_the_first_entry_kept_goes_on_without_a_reset(
    after: str, first: str
) -> None:
    redis = StreamRedis()
    key = KEYS.events("c1")
    redis.xadd(key, first, type="committed", data="{}")
    redis.xadd(key, "11-0", type="status", data="{}")
    stream = await open_stream(redis, key, after, ServeConfig())
    assert await frames_of(stream, 2) == [b"retry: 1000\n\n", b"id: 11-0\nevent: status\ndata: {}\n\n"]
    assert redis.sent[0] == ("xrange", key, 1)
    await stream.aclose()  # type: ignore[attr-defined]


async def test_a_resume_on_an_empty_stream_gets_no_reset_and_a_start_asks_once_for_no_reset() -> None:
    redis = StreamRedis()
    key = KEYS.events("c1")
    stream = await open_stream(redis, key, "3-0", ServeConfig())
    assert await frames_of(stream, 2) == [b"retry: 1000\n\n", b": keepalive\n\n"]
    assert redis.sent == [("xrange", key, 1), ("xread", {key: "3-0"}, 200, 4_000)]
    await stream.aclose()  # type: ignore[attr-defined]
    redis.xadd(key, "5-0", type="status")
    assert await serve_app._trimmed_past(redis, key, "0-0") is None  # type: ignore[arg-type]
    assert redis.sent[2:] == [("xrange", key, 1)]  # asked (Redis down: a 503 first), no reset from the start


# ------------------------------------------------------------------- the event stream over HTTP (ASGI)


@dataclass
class Exchange:
    start: dict[str, Any]
    chunks: list[bytes]


async def stream_request(
    app: Starlette, path: str, query: str = "", headers: dict[str, str] | None = None, chunks: int = 1
) -> Exchange:
    """A GET to `app` that disconnects, as a closed page would, once `chunks` body chunks came."""
    messages: list[dict[str, Any]] = []
    enough = asyncio.Event()
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await enough.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)
        bodies = sum(m["type"] == "http.response.body" for m in messages)
        if message["type"] == "http.response.body" and bodies >= chunks:
            enough.set()

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": query.encode(), "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }  # fmt: skip
    async with asyncio.timeout(5):
        await app(scope, receive, send)  # type: ignore[arg-type]
    body = [m["body"] for m in messages if m["type"] == "http.response.body" and m["body"]]
    return Exchange(messages[0], body[:chunks])


async def test_the_events_endpoint_streams_from_the_last_event_id_header_over_after() -> None:
    redis = StreamRedis()
    key = OTHER.events("c1")
    for entry_id in ("1-0", "2-0", "3-0"):
        redis.xadd(key, entry_id, type="committed", data="{}")
    app = make_app(redis, key_prefix="other:", batch=10, block_ms=5)
    path = "/api/conversations/c1/events"
    got = await stream_request(app, path, "after=1-0", {"Last-Event-ID": "2-0"}, chunks=2)
    assert got.start["status"] == 200
    assert dict(got.start["headers"]) == {
        b"cache-control": b"no-cache",
        b"x-accel-buffering": b"no",
        b"content-type": b"text/event-stream; charset=utf-8",
    }
    assert got.chunks == [b"retry: 1000\n\n", b"id: 3-0\nevent: committed\ndata: {}\n\n"]
    assert next(call for call in redis.sent if call[0] == "xread") == ("xread", {key: "2-0"}, 10, 5)
    redis.sent.clear()
    got = await stream_request(app, path, "after=1-0", chunks=3)
    assert got.chunks[1:] == [
        b"id: 2-0\nevent: committed\ndata: {}\n\n",
        b"id: 3-0\nevent: committed\ndata: {}\n\n",
    ]
    assert redis.sent[:2] == [("xrange", key, 1), ("xread", {key: "1-0"}, 10, 5)]
    redis.sent.clear()
    got = await stream_request(app, path, chunks=4)
    assert [chunk.split(b"\n")[0] for chunk in got.chunks[1:]] == [b"id: 1-0", b"id: 2-0", b"id: 3-0"]
    assert redis.sent[:2] == [("xrange", key, 1), ("xread", {key: "0-0"}, 10, 5)]


async def test_the_events_endpoint_reads_the_stream_of_the_conversations_slot_group() -> None:
    redis = split_redis()
    conv = next(name for name in NAMES if SPLIT.groups.index(SPLIT.group_of(name)) == 1)
    redis.xadd(SPLIT.events(conv), "1-0", type="status", data="{}")
    got = await stream_request(make_app(redis), f"/api/conversations/{conv}/events", chunks=2)
    assert got.chunks == [b"retry: 1000\n\n", b"id: 1-0\nevent: status\ndata: {}\n\n"]


async def test_a_disconnect_closes_the_stream_and_its_count() -> None:
    redis = StreamRedis()
    open_before = sample("turnledger_serve_event_streams")
    got = await stream_request(make_app(redis), "/api/conversations/c1/events", chunks=1)
    assert got.chunks == [b"retry: 1000\n\n"]
    assert sample("turnledger_serve_event_streams") == open_before


@pytest.mark.parametrize(
    ("query", "headers", "shown"),
    [
        ("", {"Last-Event-ID": "<x>"}, "'<x>'"),
        ("after=12", {}, "'12'"),
        ("after=1-2x", {}, "'1-2x'"),
        ("after=x1-2", {}, "'x1-2'"),
        ("after=-1-2", {}, "'-1-2'"),
        ("after=1-2%0A", {}, "'1-2\\n'"),
        ("after=%D9%A1-%D9%A2", {}, "'\u0661-\u0662'"),  # Arabic-Indic digits: \d takes them
        ("after=18446744073709551616-0", {}, "'18446744073709551616-0'"),
        ("after=0-18446744073709551616", {}, "'0-18446744073709551616'"),
    ],
)
async def test_a_position_that_is_no_stream_id_is_a_400(
    query: str, headers: dict[str, str], shown: str
) -> None:
    redis = Unread()
    async with client(make_app(redis)) as http:
        answer = await http.get(f"/api/conversations/c1/events?{query}", headers=headers)
    assert (answer.status_code, answer.json()) == (400, {"error": f"not a stream id: {shown}"})
    assert redis.sent == []


async def test_the_largest_stream_id_redis_takes_is_a_position() -> None:
    redis = StreamRedis()
    largest = f"{2**64 - 1}-{2**64 - 1}"
    got = await stream_request(make_app(redis), "/api/conversations/c1/events", f"after={largest}", chunks=2)
    assert got.chunks == [b"retry: 1000\n\n", b": keepalive\n\n"]
    assert redis.sent[-1] == ("xread", {KEYS.events("c1"): largest}, 200, 4_000)


# ------------------------------------------------------------------------------------------- writes


async def post(app: Starlette, path: str, **kwargs: Any) -> httpx.Response:
    async with client(app) as http:
        return await http.post(path, **kwargs)


async def test_a_turn_is_submitted_with_its_text_as_given_and_its_expected_revision() -> None:
    gateway = FakeGateway()
    app = make_app(StreamRedis(), gateway)
    answer = await post(app, "/api/conversations/c1/turns", json={"text": " hi ", "expectedRevision": 4})
    assert (answer.status_code, answer.json()) == (202, {"turnId": "turn-9", "eventId": "ev-turn"})
    for body in (
        {"text": "x", "expectedRevision": 0},
        {"text": "y", "expectedRevision": 2**63 - 1},
        {"text": "z", "expectedRevision": None},
        {"text": "w"},
    ):
        assert (await post(app, "/api/conversations/c2/turns", json=body)).status_code == 202
    assert gateway.calls == [
        ("turn", "c1", " hi ", {"expected_revision": 4}),
        ("turn", "c2", "x", {"expected_revision": 0}),
        ("turn", "c2", "y", {"expected_revision": 2**63 - 1}),
        ("turn", "c2", "z", {"expected_revision": None}),
        ("turn", "c2", "w", {"expected_revision": None}),
    ]


TURN_FIELDS = "its fields: text, expectedRevision"
DISPATCH_FIELDS = "its fields: adapter, provider, modelRevision, maxOutputTokens, operationId, policy"
CANCEL_FIELDS = "its fields: operationId, reason"
NOT_BLANK = "must be a string with a character that is not blank"


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        # the turn's compare-and-set on the revision is never dropped: a revision not an integer of 0
        # to the Avro long's largest, or under another name, refuses the turn
        ("turns", {"text": "x", "expectedRevision": "3"}, "'expectedRevision' must be an integer, not \"3\""),
        ("turns", {"text": "x", "expectedRevision": 3.0}, "'expectedRevision' must be an integer, not 3.0"),
        ("turns", {"text": "x", "expectedRevision": True}, "'expectedRevision' must be an integer, not true"),
        (
            "turns",
            {"text": "x", "expectedRevision": "9" * 38},
            f"'expectedRevision' must be an integer, not \"{'9' * 38}\"",  # 40 characters: shown whole
        ),
        ("turns", {"text": "x", "expectedRevision": -1}, "'expectedRevision' must be at least 0, not -1"),
        (
            "turns",
            {"text": "x", "expectedRevision": 2**63},
            "'expectedRevision' must be at most 9223372036854775807, not 9223372036854775808",
        ),
        (
            "turns",
            {"text": "x", "expected_revision": 3},
            f"'expected_revision' is not a field of this body ({TURN_FIELDS})",
        ),
        ("turns", {}, "'text' is required"),
        ("turns", {"text": ""}, f"'text' {NOT_BLANK}, not \"\""),
        ("turns", {"text": " \n"}, f"'text' {NOT_BLANK}, not \" \\n\""),
        ("turns", {"text": 5}, "'text' must be a string, not 5"),
        ("turns", {"text": None}, "'text' must be a string, not null"),
        ("dispatch", {"maxOutputTokens": 1.9}, "'maxOutputTokens' must be an integer, not 1.9"),
        ("dispatch", {"maxOutputTokens": True}, "'maxOutputTokens' must be an integer, not true"),
        ("dispatch", {"maxOutputTokens": "300"}, "'maxOutputTokens' must be an integer, not \"300\""),
        ("dispatch", {"maxOutputTokens": [1]}, "'maxOutputTokens' must be an integer, not [1]"),
        ("dispatch", {"maxOutputTokens": {"n": 1}}, "'maxOutputTokens' must be an integer, not {\"n\":1}"),
        ("dispatch", {"maxOutputTokens": 0}, "'maxOutputTokens' must be at least 1, not 0"),
        ("dispatch", {"maxOutputTokens": -5}, "'maxOutputTokens' must be at least 1, not -5"),
        (
            "dispatch",
            {"maxOutputTokens": 2**63},
            "'maxOutputTokens' must be at most 9223372036854775807, not 9223372036854775808",
        ),
        ("dispatch", {"adapter": {"a": 1}}, "'adapter' must be a string, not {\"a\":1}"),
        ("dispatch", {"adapter": ""}, "'adapter' must be a non-empty string, not \"\""),
        ("dispatch", {"provider": 5}, "'provider' must be a string, not 5"),
        ("dispatch", {"modelRevision": ["m"]}, "'modelRevision' must be a string, not [\"m\"]"),
        ("dispatch", {"operationId": 42}, "'operationId' must be a string, not 42"),
        ("dispatch", {"operationId": ""}, "'operationId' must be a non-empty string, not \"\""),
        ("dispatch", {"policy": [1]}, "'policy' must be a JSON object, not [1]"),
        ("dispatch", {"policy": "temperature=0"}, "'policy' must be a JSON object, not \"temperature=0\""),
        ("dispatch", {"policy": 0.5}, "'policy' must be a JSON object, not 0.5"),
        ("dispatch", {"policy": True}, "'policy' must be a JSON object, not true"),
        (
            "dispatch",
            {"policy": {}, "Policy": {}},
            f"'Policy' is not a field of this body ({DISPATCH_FIELDS})",
        ),
        (
            "dispatch",
            {"max_output_tokens": 5},
            f"'max_output_tokens' is not a field of this body ({DISPATCH_FIELDS})",
        ),
        ("cancel", {"operationId": 7}, "'operationId' must be a string, not 7"),
        ("cancel", {"operationId": ""}, "'operationId' must be a non-empty string, not \"\""),
        ("cancel", {"reason": {"why": "x"}}, '\'reason\' must be a string, not {"why":"x"}'),
        ("cancel", {"reason": ""}, "'reason' must be a non-empty string, not \"\""),
        ("cancel", {"operation": "op-1"}, f"'operation' is not a field of this body ({CANCEL_FIELDS})"),
    ],
)
async def test_a_body_field_of_another_type_or_range_or_name_is_a_400_naming_it(
    path: str, body: dict[str, Any], error: str
) -> None:
    gateway = FakeGateway()
    answer = await post(make_app(StreamRedis(), gateway), f"/api/conversations/c1/{path}", json=body)
    assert (answer.status_code, answer.json()) == (400, {"error": f"bad request: {error}"})
    assert gateway.calls == []


async def test_every_refused_field_of_a_body_is_named_in_one_line_with_its_value_cut_short() -> None:
    gateway = FakeGateway()
    body = {"text": 5, "expectedRevision": "9" * 100, "expected_revision": 3}
    answer = await post(make_app(StreamRedis(), gateway), "/api/conversations/c1/turns", json=body)
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "error": "bad request: 'text' must be a string, not 5; "
            f"'expectedRevision' must be an integer, not \"{'9' * 38}…; "
            f"'expected_revision' is not a field of this body ({TURN_FIELDS})"
        },
    )
    assert gateway.calls == []


async def test_an_empty_body_is_no_text() -> None:
    answer = await post(make_app(StreamRedis()), "/api/conversations/c1/turns", content=b"")
    assert (answer.status_code, answer.json()) == (400, {"error": "bad request: 'text' is required"})


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"{not json", "bad request: unexpected character, expected a string key: line 1 column 2 (char 1)"),
        (b'["text"]', "bad request: the body must be a JSON object"),
        (b'"text"', "bad request: the body must be a JSON object"),
    ],
)
async def test_a_body_that_is_no_json_object_is_a_400(content: bytes, error: str) -> None:
    gateway = FakeGateway()
    for path in ("turns", "dispatch", "cancel"):
        answer = await post(
            make_app(StreamRedis(), gateway), f"/api/conversations/c1/{path}", content=content
        )
        assert (answer.status_code, answer.json()) == (400, {"error": error})
    assert gateway.calls == []


class Flags(Body):
    """A body of fields no endpoint's body has (a boolean, a list): `read_body` words the refusal of any
    body, not only of the three it is given today."""

    dry_run: StrictBool = False
    tags: list[Name] = []


def test_a_refusal_the_table_does_not_word_is_in_pydantics_words_at_the_fields_whole_place() -> None:
    with pytest.raises(RequestBodyError) as caught:
        read_body(Flags, b'{"dryRun": 1, "tags": ["a", ""]}')
    assert str(caught.value) == (
        "'dryRun' Input should be a valid boolean, not 1; 'tags.1' must be a non-empty string, not \"\""
    )


async def test_a_dispatch_takes_the_configured_defaults_for_what_the_body_leaves_out_or_nulls() -> None:
    gateway = FakeGateway()
    defaults = DispatchDefaults(
        adapter="gemini@2", provider="google", model_revision="google/gemini-2.5-pro@1", max_output_tokens=77
    )
    app = make_app(StreamRedis(), gateway, dispatch=defaults)
    answer = await post(app, "/api/conversations/c1/dispatch")
    assert (answer.status_code, answer.json()) == (202, {"operationId": "op-new", "eventId": "ev-dispatch"})
    assert (await post(app, "/api/conversations/c1/dispatch", json={})).status_code == 202
    nulls = dict.fromkeys(
        ["adapter", "provider", "modelRevision", "maxOutputTokens", "operationId", "policy"]
    )
    assert (await post(app, "/api/conversations/c1/dispatch", json=nulls)).status_code == 202
    chosen = {
        "adapter": "gemini@2", "provider": "google", "model_revision": "google/gemini-2.5-pro@1",
        "max_output_tokens": 77, "operation_id": None, "policy": None,
    }  # fmt: skip
    assert gateway.calls == [("dispatch", "c1", chosen)] * 3


async def test_a_dispatch_sends_what_the_body_gives_as_given() -> None:
    gateway = FakeGateway()
    app = make_app(StreamRedis(), gateway)
    given = {
        "adapter": "openai-chat@1", "provider": "openai", "modelRevision": "openai/gpt-4o@1",
        "maxOutputTokens": 300, "operationId": "op-42", "policy": {"temperature": 0.2, "stop": ["x"]},
    }  # fmt: skip
    answer = await post(app, "/api/conversations/c2/dispatch", json=given)
    assert (answer.status_code, answer.json()) == (202, {"operationId": "op-42", "eventId": "ev-dispatch"})
    await post(app, "/api/conversations/c2/dispatch", json={"maxOutputTokens": 1})
    await post(app, "/api/conversations/c2/dispatch", json={"maxOutputTokens": 2**63 - 1})
    defaults = {
        "adapter": "anthropic-messages@3", "provider": "anthropic",
        "model_revision": "anthropic/claude-sonnet-4@2025-05", "operation_id": None, "policy": None,
    }  # fmt: skip
    assert gateway.calls == [
        (
            "dispatch",
            "c2",
            {
                "adapter": "openai-chat@1", "provider": "openai", "model_revision": "openai/gpt-4o@1",
                "max_output_tokens": 300, "operation_id": "op-42",
                "policy": {"temperature": 0.2, "stop": ["x"]},
            },
        ),
        ("dispatch", "c2", {**defaults, "max_output_tokens": 1}),
        ("dispatch", "c2", {**defaults, "max_output_tokens": 2**63 - 1}),
    ]  # fmt: skip


def test_the_dispatch_defaults() -> None:
    assert ServeConfig().dispatch == DispatchDefaults(
        "anthropic-messages@3", "anthropic", "anthropic/claude-sonnet-4@2025-05", 512
    )


async def test_a_cancel_names_its_operation_or_none_and_a_reason() -> None:
    gateway = FakeGateway()
    app = make_app(StreamRedis(), gateway)
    answer = await post(app, "/api/conversations/c1/cancel", json={"operationId": "op-1", "reason": "stop"})
    assert (answer.status_code, answer.json()) == (202, {"cancelled": "op-1"})
    answer = await post(app, "/api/conversations/c2/cancel")
    assert (answer.status_code, answer.json()) == (202, {"cancelled": None})
    answer = await post(app, "/api/conversations/c3/cancel", json={"operationId": None, "reason": None})
    assert (answer.status_code, answer.json()) == (202, {"cancelled": None})
    await post(app, "/api/conversations/c4/cancel", json={"operationId": "op-7"})
    assert gateway.calls == [
        ("cancel", "c1", "op-1", "stop"),
        ("cancel", "c2", None, "cancelled from serve"),
        ("cancel", "c3", None, "cancelled from serve"),
        ("cancel", "c4", "op-7", "cancelled from serve"),
    ]


class Submitted:
    event_id = "ev-5"


async def test_an_event_the_client_refuses_is_a_422_with_its_reason() -> None:
    gateway = FakeGateway(fails=RefusedEventError(Submitted(), ReasonCode.BLOCK_TOO_LARGE, "too big"))  # type: ignore[arg-type]
    answer = await post(make_app(StreamRedis(), gateway), "/api/conversations/c1/turns", json={"text": "x"})
    assert (answer.status_code, answer.json()) == (
        422,
        {"error": "Submitted ev-5 not sent: BLOCK_TOO_LARGE: too big"},
    )


class RecordingProducer:
    """Stands in for the gateway client's AIOKafkaProducer: keeps what is sent, acknowledges at once."""

    def __init__(self, **options: Any) -> None:
        self.sent: list[bytes] = []

    async def send(self, topic: str, *, value: bytes, key: bytes) -> Any:
        self.sent.append(value)
        return asyncio.sleep(0)


BLANK = "must be a string that is not empty or blank, not"


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("%20/turns", {"text": "hi"}, f"user_turn: nothing sent: conversation_id {BLANK} ' '"),
        ("c1/dispatch", {"operationId": " "}, f"request_dispatch: nothing sent: operation_id {BLANK} ' '"),
        ("c1/cancel", {"operationId": "  "}, f"cancel: nothing sent: operation_id {BLANK} '  '"),
    ],
)
async def test_a_blank_id_or_name_the_gateway_client_refuses_is_a_400_and_nothing_is_sent(
    monkeypatch: pytest.MonkeyPatch, path: str, body: dict[str, str], error: str
) -> None:
    """The bodies refuse an empty string; a blank one (or a blank conversation id in the path) is the
    gateway client's `EventArgumentError`, a ValueError: 400 too. Before, the ids were sent as given."""
    monkeypatch.setattr(client_module, "AIOKafkaProducer", RecordingProducer)
    gateway = GatewayClient("127.0.0.1:1")
    answer = await post(
        create_app(StreamRedis(), gateway, ServeConfig()), f"/api/conversations/{path}", json=body
    )
    assert (answer.status_code, answer.json()) == (400, {"error": f"bad request: {error}"})
    assert cast(RecordingProducer, gateway._producer).sent == []


PROVIDERS = "use one of anthropic, bedrock, google, openai"
OPENAI_MODELS = (
    "the registry's openai models: openai/gpt-3.5-turbo, openai/gpt-4, openai/gpt-4-turbo, openai/gpt-4.1, "
    "openai/gpt-4.1-mini, openai/gpt-4o, openai/gpt-4o-mini, openai/o3, openai/o4-mini (as "
    "provider/model@revision)"
)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"adapter": "openai-chat@9"}, "adapter 'openai-chat@9': not a registered adapter; use one of "),
        (
            {"provider": "openai"},
            "provider 'openai': not the provider of adapter 'anthropic-messages@3'; use anthropic",
        ),
        ({"provider": "\t"}, f"provider '\\t': no adapter's provider; {PROVIDERS}"),
        (
            {"adapter": "openai-chat@2", "provider": "openai"},
            "modelRevision 'anthropic/claude-sonnet-4@2025-05': a model of provider 'anthropic', but adapter "
            f"'openai-chat@2' sends to 'openai'; {OPENAI_MODELS}",
        ),
        (
            {"adapter": "openai-chat@2", "provider": "openai", "modelRevision": "openai/gpt-5@1"},
            f"modelRevision 'openai/gpt-5@1': not in the model registry; {OPENAI_MODELS}",
        ),
        (
            {"adapter": "openai-chat@2", "provider": "openai", "modelRevision": "gpt-4o"},
            f"modelRevision 'gpt-4o': not provider/model@revision; {OPENAI_MODELS}",
        ),
    ],
    ids=["adapter", "provider", "blank provider", "default model", "model", "model's form"],
)
async def test_a_dispatch_the_processor_would_reject_is_a_422_naming_the_field_and_nothing_is_sent(
    body: dict[str, str], error: str
) -> None:
    """Before, each was accepted (202) and the processor rejected it later (UNKNOWN_ADAPTER,
    UNKNOWN_MODEL), or, for a provider not the adapter's, prepared it for the adapter's provider."""
    gateway = FakeGateway()
    answer = await post(make_app(StreamRedis(), gateway), "/api/conversations/c1/dispatch", json=body)
    assert answer.status_code == 422
    assert answer.json()["error"].startswith(error), answer.json()
    assert gateway.calls == []


async def test_a_dispatch_body_is_checked_against_the_registry_serve_was_given() -> None:
    """TURNLEDGER_MODEL_REGISTRY's models, as serve loads them at start, not only the built-in ones."""
    gateway = FakeGateway()
    custom = {"models": {"openai/house-model": {"context_window": 8000}}}
    models = ModelRegistry.from_data(custom, base=builtin_registry())
    app = make_app(StreamRedis(), gateway, models=models)
    given = {"adapter": "openai-chat@2", "provider": "openai", "modelRevision": "openai/house-model@1"}
    answer = await post(app, "/api/conversations/c1/dispatch", json=given)
    assert answer.status_code == 202, answer.json()
    assert [call[2]["model_revision"] for call in gateway.calls] == ["openai/house-model@1"]
    answer = await post(make_app(StreamRedis(), FakeGateway()), "/api/conversations/c1/dispatch", json=given)
    assert answer.status_code == 422


def serving_gateway(monkeypatch: pytest.MonkeyPatch) -> tuple[Starlette, RecordingProducer]:
    """The app over a real `GatewayClient` whose producer keeps what is sent."""
    monkeypatch.setattr(client_module, "AIOKafkaProducer", RecordingProducer)
    gateway = GatewayClient("127.0.0.1:1")
    redis: Any = StreamRedis()
    return create_app(redis, gateway, ServeConfig()), cast(RecordingProducer, gateway._producer)


def nested(levels: int) -> dict[str, Any]:
    """An object `levels` objects deep, itself the first."""
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


THINKING = {"type": "enabled", "budget_tokens": 1024}
GEMINI = {"adapter": "gemini@3", "provider": "google", "modelRevision": "google/gemini-2.5-pro@1"}
RESPONSES = {"adapter": "openai-responses@4", "provider": "openai", "modelRevision": "openai/gpt-4o@1"}
BEDROCK = {
    "adapter": "bedrock-converse@2", "provider": "bedrock",
    "modelRevision": "bedrock/anthropic.claude-sonnet-4@2025-05",
}  # fmt: skip


@pytest.mark.parametrize(
    ("body", "policy"),
    [
        (
            {"maxOutputTokens": 2048, "policy": {"temperature": 0.2, "thinking": THINKING}},
            {"stream": True, "temperature": 0.2, "thinking": THINKING},
        ),
        ({"policy": None}, {"stream": True}),
        ({}, {"stream": True}),
        ({"policy": {}}, {"stream": True}),
        (
            {**RESPONSES, "policy": {"reasoning": {"effort": "low"}}},
            {"stream": True, "background": True, "reasoning": {"effort": "low"}},
        ),
        # keeping the response ruled out: no background mode (the client's stream policy for this policy)
        ({**RESPONSES, "policy": {"store": False}}, {"stream": True, "store": False}),
        (
            {**GEMINI, "policy": {"thinking_config": {"thinkingBudget": 128}}},
            {"thinking_config": {"thinkingBudget": 128}},
        ),
        (
            {
                **BEDROCK,
                "maxOutputTokens": 4096,
                "policy": {"temperature": 1, "top_p": 0.95, "stop": ["END"]},
            },
            {"temperature": 1, "top_p": 0.95, "stop": ["END"]},
        ),
        (
            {"policy": {"n": 18446744073709551615, "big": 1e308}},
            {"stream": True, "n": 18446744073709551615, "big": 1e308},
        ),
    ],
    ids=[
        "anthropic",
        "null",
        "left out",
        "empty",
        "responses",
        "store false",
        "gemini",
        "bedrock",
        "numbers",
    ],
)
async def test_a_dispatch_policy_reaches_the_dispatch_requested_over_the_stream_policy(
    monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], policy: dict[str, Any]
) -> None:
    app, producer = serving_gateway(monkeypatch)
    answer = await post(app, "/api/conversations/c1/dispatch", json=body)
    assert answer.status_code == 202, answer.json()
    [sent] = producer.sent
    event = decode(sent)
    assert isinstance(event, DispatchRequested)
    assert answer.json() == {"operationId": event.operation_id, "eventId": event.event_id}
    assert (event.conversation_id, event.policy) == ("c1", policy)


REFUSED = "bad request: request_dispatch: nothing sent: policy"
NOT_A_VALUE = "unexpected character, expected a JSON value"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {"policy": {"thinking": THINKING}},
            f"{REFUSED} thinking.budget_tokens must be below maxOutputTokens (512), not 1024 (adapter "
            "anthropic-messages@3)",
        ),
        (
            {"maxOutputTokens": 4096, "policy": {"thinking": {"type": "enabled", "budget_tokens": 1000}}},
            f"{REFUSED} thinking.budget_tokens must be at least 1024 with thinking enabled, not 1000 "
            "(adapter anthropic-messages@3)",
        ),
        (
            {**GEMINI, "policy": {"thinking_config": {"thinkingBudget": 128, "thinking_level": "low"}}},
            f"{REFUSED} thinking_config must set thinkingBudget or thinkingLevel, not both: "
            "thinkingBudget 128 and thinking_level 'low' (adapter gemini@3)",
        ),
        (
            {
                **BEDROCK,
                "maxOutputTokens": 4096,
                "policy": {"temperature": 0.5, "additional_model_request_fields": {"thinking": THINKING}},
            },
            f"{REFUSED} temperature must be 1 or left out beside additional_model_request_fields.thinking "
            "turned on, not 0.5 (adapter bedrock-converse@2)",
        ),
        (
            {"policy": {"stream": False, "max_tokens": 5}},
            f"{REFUSED}['stream'] must be True or left out: the worker streams every answer (stream=False "
            "builds a request without the stream policy), not False",
        ),
    ],
    ids=[
        "anthropic budget past the output",
        "anthropic budget floor",
        "gemini budget and level",
        "bedrock",
        "stream off",
    ],
)
async def test_a_dispatch_policy_the_client_refuses_is_a_400_with_its_words_and_nothing_is_sent(
    monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], error: str
) -> None:
    app, producer = serving_gateway(monkeypatch)
    answer = await post(app, "/api/conversations/c1/dispatch", json=body)
    assert (answer.status_code, answer.json()) == (400, {"error": error})
    assert producer.sent == []


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b'{"policy": {"temperature": NaN}}', f"{NOT_A_VALUE}: line 1 column 28 (char 27)"),
        (b'{"policy": {"temperature": Infinity}}', f"{NOT_A_VALUE}: line 1 column 28 (char 27)"),
        (
            b'{"policy": {"top_p": 1e400}}',
            "number is infinity when parsed as double: line 1 column 22 (char 21)",
        ),
    ],
)
async def test_a_policy_number_json_has_not_is_a_400_and_nothing_is_sent(
    monkeypatch: pytest.MonkeyPatch, content: bytes, error: str
) -> None:
    app, producer = serving_gateway(monkeypatch)
    answer = await post(app, "/api/conversations/c1/dispatch", content=content)
    assert (answer.status_code, answer.json()) == (400, {"error": f"bad request: {error}"})
    assert producer.sent == []


@pytest.mark.parametrize("levels", [33, 254, 255, 1000, 1023])
async def test_a_policy_nested_past_32_levels_is_a_400_saying_how_deep_and_nothing_is_sent(
    monkeypatch: pytest.MonkeyPatch, levels: int
) -> None:
    """Before the bound, 255 levels or more (past canonical JSON's) was the encoder's refusal and 1,000
    the client's check past Python's stack: both a 500. 1,023 objects in the body: orjson's deepest."""
    app, producer = serving_gateway(monkeypatch)
    # written by hand: json.dumps runs out of Python's stack, orjson.dumps stops at 254 levels
    policy = b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)
    answer = await post(app, "/api/conversations/c1/dispatch", content=b'{"policy":' + policy + b"}")
    error = f"'policy' must nest objects and arrays at most 32 levels deep, not {levels}"
    assert (answer.status_code, answer.json()) == (400, {"error": f"bad request: {error}"})
    assert producer.sent == []


async def test_a_policy_of_32_levels_is_sent_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    app, producer = serving_gateway(monkeypatch)
    answer = await post(app, "/api/conversations/c1/dispatch", json={"policy": nested(32)})
    assert answer.status_code == 202, answer.json()
    [sent] = producer.sent
    assert cast(DispatchRequested, decode(sent)).policy == {"stream": True, **nested(32)}


async def test_kafka_unreachable_is_a_503_with_its_words() -> None:
    error = KafkaUnavailableError("kafka.example.net:9092", action="appending to the ingress topic")
    gateway = FakeGateway(fails=error)
    for path, body in [("turns", {"text": "x"}), ("dispatch", {}), ("cancel", {})]:
        answer = await post(make_app(StreamRedis(), gateway), f"/api/conversations/c1/{path}", json=body)
        assert (answer.status_code, answer.json()) == (503, {"error": str(error)})


async def test_only_turns_dispatches_and_cancels_may_be_posted() -> None:
    async with client(make_app(StreamRedis())) as http:
        for method, path in [
            ("POST", "/api/conversations/c1"),
            ("DELETE", "/api/conversations/c1"),
            ("POST", "/api/conversations"),
            ("GET", "/api/conversations/c1/turns"),
            ("POST", "/api/conversations/c1/events"),
        ]:
            assert (await http.request(method, path)).status_code == 405, (method, path)


# ------------------------------------------------------------------------------------ Redis failing


class FailingRedis(aioredis.Redis):
    """A real client (its URL is what a refusal names) whose every read fails with `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__(host="cache.example.net", username="serve", password="pw")
        self.error = error

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


async def test_a_redis_refusal_is_a_503_saying_what_to_check() -> None:
    error = AuthenticationError("invalid username-password pair or user is disabled.")
    async with client(make_app(FailingRedis(error))) as http:
        answer = await http.get("/api/conversations")
    assert answer.status_code == 503
    assert answer.json() == {
        "error": "Redis at 'redis://serve:***@cache.example.net:6379/0' refused the connection (plaintext, "
        "user 'serve' with a password): AuthenticationError: invalid username-password pair or user is "
        f"disabled. {CHECK_LOGIN}"
    }


async def test_a_redis_outage_is_a_503_and_any_other_redis_error_a_500() -> None:
    outage = RedisConnectionError("Error 111 connecting to cache.example.net:6379. Connection refused.")
    async with client(make_app(FailingRedis(outage))) as http:
        answer = await http.get("/api/conversations/c1")
        assert (answer.status_code, answer.json()) == (503, {"error": str(outage)})
    async with client(make_app(FailingRedis(ResponseError("ERR wrong")))) as http:
        assert (await http.get("/api/conversations/c1")).status_code == 500


# ------------------------------------------------------------------------------------------- token


async def test_with_a_token_every_path_asks_for_it_by_header_or_query() -> None:
    app = make_app(StreamRedis(), token="s3cret")
    async with client(app) as http:
        for path in ("/", "/static/app.js", "/api/conversations", "/api/conversations/c1", "/nowhere"):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                answer = await http.get(path, headers=headers)
                assert (answer.status_code, answer.json()) == (401, {"error": "unauthorized"}), path
                assert answer.headers["www-authenticate"] == "Bearer"
        assert (await http.get("/api/conversations?token=wrong")).status_code == 401
        assert (await http.get("/api/conversations?token=s3cret")).status_code == 200
        for header in ("Bearer s3cret", "bearer s3cret", "BEARER  s3cret "):
            answer = await http.get("/api/conversations", headers={"Authorization": header})
            assert answer.status_code == 200, header
        # the header, when it names a bearer, is the one read
        answer = await http.get("/api/conversations?token=s3cret", headers={"Authorization": "Bearer no"})
        assert answer.status_code == 401
        answer = await http.get("/api/conversations?token=s3cret", headers={"Authorization": "Basic no"})
        assert answer.status_code == 200


@pytest.mark.parametrize("token", ["s3cret", "XXXX", " "])
async def test_a_request_without_a_credential_is_refused_whatever_the_token(token: str) -> None:
    async with client(make_app(StreamRedis(), token=token)) as http:
        assert (await http.get("/api/conversations")).status_code == 401
        assert (await http.get("/api/conversations", headers={"Authorization": "Basic x"})).status_code == 401


async def test_a_request_with_the_token_is_handed_on_whole() -> None:
    gateway = FakeGateway()
    redis = StreamRedis()
    redis.xadd(KEYS.events("c1"), "1-0", type="status", data="{}")
    app = make_app(redis, gateway, token="s3cret")
    bearer = {"Authorization": "Bearer s3cret"}
    answer = await post(app, "/api/conversations/c1/turns", json={"text": "hi"}, headers=bearer)
    assert answer.status_code == 202 and gateway.calls == [("turn", "c1", "hi", {"expected_revision": None})]
    got = await stream_request(app, "/api/conversations/c1/events", "token=s3cret", chunks=2)
    assert got.chunks == [b"retry: 1000\n\n", b"id: 1-0\nevent: status\ndata: {}\n\n"]


async def test_without_a_token_or_with_an_empty_one_everything_is_open() -> None:
    for token in (None, ""):
        async with client(make_app(StreamRedis(), token=token)) as http:
            assert (await http.get("/api/conversations")).status_code == 200
            assert (
                await http.get("/api/conversations", headers={"Authorization": "Bearer x"})
            ).status_code == 200


async def lifespan(app: Callable[..., Awaitable[None]]) -> list[str]:
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    return sent


async def test_the_lifespan_passes_the_token_check_and_is_not_counted() -> None:
    before = requests_counted("unmatched", "500")
    app = make_app(StreamRedis(), token="s3cret")
    assert await lifespan(app) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert requests_counted("unmatched", "500") == before
    inner: list[str] = []

    async def app_within(scope: Any, receive: Any, send: Any) -> None:
        inner.append(scope["type"])
        await send({"type": "lifespan.startup.complete"})

    guard = BearerToken(app_within, "s3cret")
    assert await lifespan(guard) == ["lifespan.startup.complete"] and inner == ["lifespan"]


# ----------------------------------------------------------------------------------- request counter


async def test_requests_are_counted_by_route_template_and_status() -> None:
    routes = [
        ("/api/conversations", "200"),
        ("/api/conversations/{conversation:str}", "200"),
        ("/api/conversations/{conversation:str}/turns", "400"),
        ("/api/conversations/{conversation:str}/turns", "405"),
        ("unmatched", "404"),
    ]
    before = {route: requests_counted(*route) for route in routes}
    async with client(make_app(StreamRedis())) as http:
        await http.get("/api/conversations")
        await http.get("/api/conversations/c-1")
        await http.get("/api/conversations/c-2")
        await http.post("/api/conversations/c-1/turns", json={})
        await http.get("/api/conversations/c-1/turns")
        await http.get("/no/such/page")
    assert {route: requests_counted(*route) - before[route] for route in routes} == {
        ("/api/conversations", "200"): 1,
        ("/api/conversations/{conversation:str}", "200"): 2,
        ("/api/conversations/{conversation:str}/turns", "400"): 1,
        ("/api/conversations/{conversation:str}/turns", "405"): 1,
        ("unmatched", "404"): 1,
    }


async def test_a_request_refused_before_routing_is_counted_under_the_route_it_would_take() -> None:
    routes = [
        ("/api/conversations/{conversation:str}", "401"),
        ("/api/conversations/{conversation:str}/cancel", "401"),
        ("unmatched", "401"),
        ("/", "401"),
    ]
    before = {route: requests_counted(*route) for route in routes}
    async with client(make_app(StreamRedis(), token="s3cret")) as http:
        await http.get("/api/conversations/c-1")
        await http.get("/api/conversations/c-1/cancel")  # a GET of a POST route: still that route
        await http.get("/nowhere")
    assert {route: requests_counted(*route) - before[route] for route in routes} == {
        ("/api/conversations/{conversation:str}", "401"): 1,
        ("/api/conversations/{conversation:str}/cancel", "401"): 1,
        ("unmatched", "401"): 1,
        ("/", "401"): 0,
    }


async def test_a_request_that_fails_before_answering_is_counted_as_a_500() -> None:
    route = ("/api/conversations/{conversation:str}/cancel", "500")
    before = requests_counted(*route)
    gateway = FakeGateway(fails=RuntimeError("the gateway broke"))
    answer = await post(make_app(StreamRedis(), gateway), "/api/conversations/c1/cancel")
    assert answer.status_code == 500
    assert requests_counted(*route) == before + 1


class StreamFailing(aioredis.Redis):
    """A real client (its URL is what an error names) over one unsplit projection whose stream key
    holds `entries`: XREAD answers those past its id, then fails with `error`; XRANGE fails with it
    when `resumes_fail`."""

    def __init__(self, error: Exception, entries: list[Entry], resumes_fail: bool = False) -> None:
        super().__init__(host="cache.example.net", username="serve", password="pw")
        self.error, self.entries, self.resumes_fail = error, entries, resumes_fail

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return None

    async def xrange(self, *args: Any, **kwargs: Any) -> Any:
        if self.resumes_fail:
            raise self.error
        return self.entries[:1]

    async def xread(self, streams: Any, *args: Any, **kwargs: Any) -> Any:
        [(key, last)] = streams.items()
        after = [e for e in self.entries if _id(e[0].decode()) > _id(last)]
        if not after:
            raise self.error
        return [(key.encode(), after)]


def failures_logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "turnledger.serve.redis_failures"
    ]


OUTAGE = RedisConnectionError("Connection closed by server.")
OUTAGE_SAID = (
    "Redis is not reachable at 'redis://serve:***@cache.example.net:6379/0' (ConnectionError: Connection "
    "closed by server.). Start the local stack with `turnledger dev up`, or set REDIS_URL (or --redis-url) "
    "to a reachable Redis, e.g. redis://127.0.0.1:6379/0."
)
STREAM_ENDS = "serve: event streams end, their clients resume once Redis answers: "
ENTRIES: list[Entry] = [(b"1-0", {b"type": b"committed", b"data": b"{}"})]


def strict_client(app: Starlette) -> httpx.AsyncClient:
    """`client`, but an exception out of the app fails the test: a stream cut by an error."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


async def test_redis_failing_under_an_open_stream_ends_it_with_an_unavailable_event_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    open_before = sample("turnledger_serve_event_streams")
    app = make_app(StreamFailing(OUTAGE, ENTRIES))
    async with strict_client(app) as http:
        answers = [await http.get("/api/conversations/c1/events") for _ in range(2)]
    for answer in answers:
        assert answer.status_code == 200
        assert answer.content == (
            b"retry: 1000\n\n"
            b"id: 1-0\nevent: committed\ndata: {}\n\n"
            b'retry: 3000\nevent: unavailable\ndata: {"error":"Connection closed by server."}\n\n'
        )
    assert failures_logged(caplog) == [(logging.WARNING, STREAM_ENDS + OUTAGE_SAID)]
    assert sample("turnledger_serve_event_streams") == open_before


async def test_a_redis_refusal_under_an_open_stream_ends_it_saying_what_to_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    error = AuthenticationError("invalid username-password pair or user is disabled.")
    said = (
        "Redis at 'redis://serve:***@cache.example.net:6379/0' refused the connection (plaintext, user "
        f"'serve' with a password): AuthenticationError: invalid username-password pair or user is "
        f"disabled. {CHECK_LOGIN}"
    )
    async with strict_client(make_app(StreamFailing(error, []))) as http:
        answer = await http.get("/api/conversations/c1/events")
    last = answer.content.split(b"\n\n")[-2]
    assert last == b"retry: 3000\nevent: unavailable\ndata: " + orjson.dumps({"error": said})
    assert failures_logged(caplog) == [(logging.ERROR, STREAM_ENDS + said)]


async def test_any_other_redis_error_under_an_open_stream_is_not_judged_there() -> None:
    error = ResponseError("WRONGTYPE")
    with pytest.raises(RuntimeError, match="response already started") as raised:
        async with strict_client(make_app(StreamFailing(error, []))) as http:
            await http.get("/api/conversations/c1/events")
    assert raised.value.__cause__ is error


@pytest.mark.parametrize("resume", [{"Last-Event-ID": "1-0"}, {}], ids=["resume", "from-the-start"])
async def test_a_stream_asked_while_redis_is_down_is_a_503_before_it_starts(resume: dict[str, str]) -> None:
    """From the start as well: a 200 that ended at once was reopened by EventSource every 3 s."""
    redis = StreamFailing(OUTAGE, ENTRIES, resumes_fail=True)
    async with strict_client(make_app(redis)) as http:
        answer = await http.get("/api/conversations/c1/events", headers=resume)
    assert (answer.status_code, answer.json()) == (503, {"error": "Connection closed by server."})
