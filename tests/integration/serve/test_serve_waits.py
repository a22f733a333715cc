"""`turnledger serve` started before its Redis: it binds its port, logs that it waits for Redis, and
serves once a redis-server comes up on that port (the dev stack's Kafka is up). It exited 2 at once
(`tests/unit/serve/test_serve_waits.py` has the refusals after `--max-outage` and the stop while waiting)."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.integration.test_processor_eos import Child, wait_for
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.devstack.restartable import RestartableRedis

pytestmark = pytest.mark.integration

SERVING = re.compile(r"^serving (http://127\.0\.0\.1:\d+/)$", re.MULTILINE)


async def test_serve_started_before_redis_waits_for_it_then_answers(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    with RestartableRedis(tmp_path / "redis", port=RESTART_PORTS.take) as redis_server:
        serve = Child(
            [
                "serve",
                "--port",
                "0",
                "--redis-url",
                redis_server.url,
                "--bootstrap",
                kafka_bootstrap,
                "--topic-prefix",
                topic_name("") + ".",
                "--key-prefix",
                "serve-waits:",
            ],
            tmp_path / "serve.log",
            module="turnledger.cli",
        )
        try:
            waiting = f"WARNING turnledger.retry: waiting for Redis at {redis_server.url} to serve the API"

            async def waits() -> bool:
                assert serve.proc.poll() is None, serve.output()
                return waiting in serve.output()

            await wait_for(waits, 60, "serve to log that it waits for Redis")
            assert SERVING.search(serve.output()) is None
            redis_server.start()

            async def serving() -> bool:
                assert serve.proc.poll() is None, serve.output()
                return SERVING.search(serve.output()) is not None

            await wait_for(serving, 60, "serve to serve once Redis is up")
            served = SERVING.search(serve.output())
            assert served is not None
            async with httpx.AsyncClient(base_url=served.group(1)) as http:
                page = await http.get("/")
                listing = await http.get("/api/conversations")
            assert page.status_code == 200
            assert "text/html" in page.headers["content-type"]
            assert (listing.status_code, listing.json()) == (200, {"conversations": []})
            assert f"INFO turnledger.retry: Redis at {redis_server.url} to serve the API: back after " in (
                serve.output()
            )
            # uvicorn's: a graceful shutdown, then the SIGINT raised again for asyncio.run's handler, which
            # makes it a KeyboardInterrupt (130) only if the main task has not ended by then: 0 otherwise
            # (a CI run got 0, the helper's runs 130); either way serve has ended, promptly and cleanly
            serve.signal(signal.SIGINT)
            assert await serve.wait(30) in (0, 130), serve.output()
            assert "Traceback" not in serve.output()
        finally:
            serve.kill()
