"""`turnledger serve` with a conversation's event stream open when its Redis (a private redis-server)
stops: the stream ends cleanly (its last chunk sent, an `unavailable` event, one log line, no
traceback; it was cut mid-body by an ASGI traceback), a resume meanwhile is a 503, and once Redis is
back on its port a client resuming after the last event it saw gets exactly the events after it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
import redis.asyncio as aioredis

from tests.integration.serve.sse import Frame, frames_of, read_frames
from tests.integration.test_processor_eos import Child, wait_for
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.devstack.restartable import RestartableRedis
from turnledger.projections.keys import ProjectionKeys

pytestmark = pytest.mark.integration

SERVING = re.compile(r"^serving (http://127\.0\.0\.1:\d+/)$", re.MULTILINE)
PREFIX = "stream-outage:"
EVENTS = "/api/conversations/conv-1/events"
KEY = ProjectionKeys(PREFIX).events("conv-1")


async def append(redis: aioredis.Redis, key: str, numbers: range) -> list[Frame]:
    frames = []
    for n in numbers:
        data = {"n": n}
        entry_id = await redis.xadd(key, {"type": "status", "data": orjson.dumps(data)})
        frames.append(Frame(entry_id.decode(), "status", data))
    return frames


@dataclass
class Serving:
    child: Child
    url: str
    redis: aioredis.Redis
    """A client of the same Redis, for the test's writes (`reconnect` after a restart)."""

    async def reconnect(self, url: str) -> None:
        await self.redis.aclose()
        self.redis = aioredis.from_url(url)


@asynccontextmanager
async def serve_on(
    redis_server: RestartableRedis, bootstrap: str, topic_prefix: str, log: Path, url_query: str = ""
) -> AsyncIterator[Serving]:
    """`turnledger serve` (its CLI, a child process logging to `log`) on `redis_server` (its URL with
    `url_query`), running."""
    args = ["--port", "0", "--redis-url", redis_server.url + url_query, "--bootstrap", bootstrap]
    args += ["--topic-prefix", topic_prefix, "--key-prefix", PREFIX]
    child = Child(["serve", *args], log, module="turnledger.cli")
    serving = Serving(child, "", aioredis.from_url(redis_server.url))
    try:

        async def listening() -> bool:
            assert child.proc.poll() is None, child.output()
            return SERVING.search(child.output()) is not None

        await wait_for(listening, 90, "serve to serve")
        served = SERVING.search(child.output())
        assert served is not None
        serving.url = served.group(1)
        yield serving
    finally:
        await serving.redis.aclose()
        child.kill()


@pytest.mark.timeout(240)
async def test_redis_stopping_ends_an_open_stream_cleanly_and_a_resume_after_its_restart_gets_the_rest(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    with RestartableRedis(tmp_path / "redis", port=RESTART_PORTS.take) as redis_server:
        redis_server.start()
        log = tmp_path / "serve.log"
        async with serve_on(redis_server, kafka_bootstrap, topic_name("") + ".", log) as serve:
            before = await append(serve.redis, KEY, range(3))
            # this Redis runs without persistence: a snapshot taken now is what it loads on its restart,
            # as a persisted Redis would come back with its stream
            assert await serve.redis.save()

            async with httpx.AsyncClient(base_url=serve.url, timeout=60) as http:
                async with http.stream("GET", EVENTS) as response:
                    assert response.status_code == 200
                    frames = frames_of(response)
                    seen = [await anext(frames) for _ in before]
                    await asyncio.to_thread(redis_server.stop)
                    # the body's end, its last chunk sent (cut, httpx raised RemoteProtocolError)
                    ended = [frame async for frame in frames]
                assert seen == before
                assert ended == [Frame("", "unavailable", {"error": "Connection closed by server."})]

                down = await http.get(EVENTS, headers={"Last-Event-ID": before[-1].id})
                port = redis_server.port
                refused = (
                    f"Error 111 connecting to 127.0.0.1:{port}. Connect call failed ('127.0.0.1', {port})."
                )
                assert (down.status_code, down.json()) == (503, {"error": refused})

                await asyncio.to_thread(redis_server.start)
                await serve.reconnect(redis_server.url)
                assert await serve.redis.xlen(KEY) == len(before)
                later = await append(serve.redis, KEY, range(3, 5))
                # as EventSource resumes (Last-Event-ID) and as the page reopens a stream (?after=)
                resumed = await read_frames(http, EVENTS, 2, headers={"Last-Event-ID": before[-1].id})
                reopened = await read_frames(http, f"{EVENTS}?after={before[-1].id}", 2)
                assert resumed == reopened == later

            output = serve.child.output()
        assert "Traceback" not in output and "Exception in ASGI application" not in output, output
        logged = [line.split(" ", 2)[2] for line in output.splitlines() if "redis_failures" in line]
        assert logged == [
            "WARNING turnledger.serve.redis_failures: serve: event streams end, their clients resume "
            f"once Redis answers: Redis is not reachable at '{redis_server.url}' (ConnectionError: "
            "Connection closed by server.). Start the local stack with `turnledger dev up`, or set "
            "REDIS_URL (or --redis-url) to a reachable Redis, e.g. redis://127.0.0.1:6379/0."
        ]


@pytest.mark.timeout(240)
async def test_an_idle_stream_blocks_in_redis_for_less_than_the_urls_read_timeout_and_stays_open(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A Redis URL's `?socket_timeout=1`: serve's 4 s XREAD BLOCK outlasted it, redis-py took Redis for
    gone, and every idle stream ended with `unavailable` after 1 s. The block is cut to 0.8 s."""
    with RestartableRedis(tmp_path / "redis", port=RESTART_PORTS.take) as redis_server:
        redis_server.start()
        log = tmp_path / "serve.log"
        async with (
            serve_on(redis_server, kafka_bootstrap, topic_name("") + ".", log, "?socket_timeout=1") as serve,
            httpx.AsyncClient(base_url=serve.url, timeout=60) as http,
            http.stream("GET", EVENTS) as response,
        ):
            assert response.status_code == 200
            said = ""
            async for chunk in response.aiter_text():
                said += chunk
                if said.count(": keepalive") >= 3 or "unavailable" in said:
                    break
        assert said == "retry: 1000\n\n" + ": keepalive\n\n" * 3, said
        assert "redis_failures" not in serve.child.output()
