"""The client API of `turnledger serve` on the real Redis and Kafka: history, the live stream's order,
Last-Event-ID resume without loss or repeat, the token check and that text is data, never markup."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from prometheus_client import REGISTRY

from tests.integration.projections.workload import conversation
from tests.integration.serve.sse import read_frames
from turnledger.codec import decode
from turnledger.model.events import TurnSubmitted
from turnledger.projections.direct import project_records
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.reader import ProjectionReader

pytestmark = pytest.mark.integration


async def stream_entries(served: Any, conv: str) -> list[tuple[str, str]]:
    entries = await served.redis.xrange(ProjectionKeys(served.key_prefix).events(conv))
    return [(i.decode(), f[b"type"].decode()) for i, f in entries]


async def blocked_reader(redis: Any) -> None:
    """Until some client of this Redis is blocked in XREAD (the SSE endpoint waiting for news)."""
    async with asyncio.timeout(20):
        while not any(
            c.get("cmd") == "xread" and "b" in c.get("flags", "") for c in await redis.client_list()
        ):
            await asyncio.sleep(0.02)


async def test_history_and_conversations_come_from_the_projection(serve_factory: Callable[..., Any]) -> None:
    async with serve_factory() as served:
        await project_records(served.redis, ProjectionKeys(served.key_prefix), conversation("c-1"))
        async with httpx.AsyncClient(base_url=served.url) as http:
            listing = (await http.get("/api/conversations")).json()["conversations"]
            assert [c["conversationId"] for c in listing] == ["c-1"]
            body = (await http.get("/api/conversations/c-1")).json()
            reader = ProjectionReader(served.redis, served.key_prefix)
            assert body["history"] == [b.to_json_dict() for b in await reader.history("c-1")]
            assert body["revision"] == await reader.revision("c-1")
            assert body["lastEventId"] == (await stream_entries(served, "c-1"))[-1][0]
            assert {op["operationId"] for op in body["operations"]} == {
                op.operation_id for op in await reader.operations("c-1")
            }
            empty = (await http.get("/api/conversations/nobody")).json()
            assert empty["history"] == [] and empty["lastEventId"] == "0-0"


async def test_sse_delivers_in_stream_order_live_and_resumes_without_loss_or_repeat(
    serve_factory: Callable[..., Any],
) -> None:
    async with serve_factory() as served:
        keys = ProjectionKeys(served.key_prefix)
        records = conversation("c-2")
        half = len(records) // 2
        await project_records(served.redis, keys, records[:half])
        before = await stream_entries(served, "c-2")
        async with httpx.AsyncClient(base_url=served.url) as http:
            url = "/api/conversations/c-2/events"
            # live: blocked in XREAD after the last event so far, then the projector applies the rest
            reading = asyncio.create_task(read_frames(http, f"{url}?after={before[-1][0]}", 1))
            await blocked_reader(served.redis)
            await project_records(served.redis, keys, records[half:])
            everything = await stream_entries(served, "c-2")
            live = await reading
            assert [(f.id, f.event) for f in live] == everything[len(before) : len(before) + 1]

            full = await read_frames(http, url, len(everything))
            assert [(f.id, f.event) for f in full] == everything
            kinds = {f.event for f in full}
            assert {"committed", "status"} <= kinds

            # a disconnect after k events, then a resume with Last-Event-ID: exactly the rest
            k = len(everything) // 3
            first = await read_frames(http, url, k)
            rest = await read_frames(http, url, len(everything) - k, headers={"Last-Event-ID": first[-1].id})
            assert [f.id for f in first + rest] == [i for i, _ in everything]
            # `?after=` is the same position for a client that cannot set the header
            again = await read_frames(http, f"{url}?after={first[-1].id}", 1)
            assert again[0].id == rest[0].id
            assert (await http.get(url, headers={"Last-Event-ID": "<x>"})).status_code == 400


async def test_a_resume_past_what_the_cap_trimmed_gets_a_reset(serve_factory: Callable[..., Any]) -> None:
    async with serve_factory() as served:
        keys = ProjectionKeys(served.key_prefix)
        await project_records(served.redis, keys, conversation("c-trim"))
        everything = await stream_entries(served, "c-trim")
        assert len(everything) >= 4
        url = "/api/conversations/c-trim/events"
        async with httpx.AsyncClient(base_url=served.url) as http:
            # nothing trimmed: a resume goes on with the next event, no reset
            [nxt] = await read_frames(http, url, 1, headers={"Last-Event-ID": everything[0][0]})
            assert (nxt.id, nxt.event) == everything[1]
            await served.redis.xtrim(keys.events("c-trim"), maxlen=2, approximate=False)
            kept = everything[-2:]
            frames = await read_frames(http, url, 3, headers={"Last-Event-ID": everything[0][0]})
            assert (frames[0].id, frames[0].event, frames[0].data) == (
                everything[0][0],
                "reset",
                {"firstId": kept[0][0]},
            )
            assert [(f.id, f.event) for f in frames[1:]] == kept
            # from the start (a fresh page), or from a kept id: no reset
            fresh = await read_frames(http, url, 2)
            assert [(f.id, f.event) for f in fresh] == kept


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_every_endpoint_requires_the_token_when_one_is_set(serve_factory: Callable[..., Any]) -> None:
    refused_before = _sample("turnledger_serve_requests_total", route="/api/conversations", status="401")
    listed_before = _sample("turnledger_serve_requests_total", route="/api/conversations", status="200")
    async with serve_factory(token="s3cret") as served:
        await project_records(served.redis, ProjectionKeys(served.key_prefix), conversation("c-3"))
        async with httpx.AsyncClient(base_url=served.url) as http:
            paths = [
                ("GET", "/"),
                ("GET", "/static/app.js"),
                ("GET", "/api/conversations"),
                ("GET", "/api/conversations/c-3"),
                ("GET", "/api/conversations/c-3/events"),
                ("POST", "/api/conversations/c-3/turns"),
                ("POST", "/api/conversations/c-3/dispatch"),
                ("POST", "/api/conversations/c-3/cancel"),
            ]
            for method, path in paths:
                for headers in ({}, {"Authorization": "Bearer wrong"}):
                    response = await http.request(method, path, headers=headers)
                    assert response.status_code == 401, (method, path, headers)
            ok = {"Authorization": "Bearer s3cret"}
            assert (await http.get("/api/conversations", headers=ok)).status_code == 200
            assert (await http.get("/?token=s3cret")).status_code == 200
            frames = await read_frames(http, "/api/conversations/c-3/events?token=s3cret", 1)
            assert frames and frames[0].event
    # the requests counter, by route template and status: the two refusals and the one answer above
    assert _sample("turnledger_serve_requests_total", route="/api/conversations", status="401") == (
        refused_before + 2
    )
    assert _sample("turnledger_serve_requests_total", route="/api/conversations", status="200") == (
        listed_before + 1
    )


async def test_only_turns_dispatches_and_cancels_are_writable_and_text_is_data(
    serve_factory: Callable[..., Any], kafka_bootstrap: str
) -> None:
    xss = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    async with serve_factory() as served:
        async with httpx.AsyncClient(base_url=served.url) as http:
            turn = await http.post("/api/conversations/c-4/turns", json={"text": xss})
            assert turn.status_code == 202
            dispatch = await http.post("/api/conversations/c-4/dispatch", json={})
            assert dispatch.status_code == 202 and dispatch.json()["operationId"].startswith("op-")
            cancel = await http.post(
                "/api/conversations/c-4/cancel", json={"operationId": dispatch.json()["operationId"]}
            )
            assert cancel.status_code == 202
            assert (await http.post("/api/conversations/c-4/turns", json={"text": " "})).status_code == 400
            assert (await http.post("/api/conversations/c-4/turns", content=b"{not json")).status_code == 400
            c4 = "/api/conversations/c-4"
            for method, path in [("PUT", c4), ("DELETE", c4), ("POST", c4), ("POST", "/api/conversations")]:
                assert (await http.request(method, path)).status_code == 405, (method, path)
            page = await http.get("/")
            assert (
                "Content-Security-Policy" in page.headers
                and "script-src 'self'" in page.headers["Content-Security-Policy"]
            )
            js = (await http.get("/static/app.js")).text
            assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js
        # the turn reached the ingress topic verbatim (as data: the page renders it with textContent)
        consumer = AIOKafkaConsumer(
            served.topics.ingress, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            seen: list[Any] = []
            async with asyncio.timeout(20):
                while len(seen) < 3:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        seen.extend(decode(r.value) for r in batch if r.value is not None)
        finally:
            await consumer.stop()
        submitted = [e for e in seen if isinstance(e, TurnSubmitted)]
        assert submitted[0].blocks[0].text == xss
        assert orjson.loads(turn.content)["turnId"] == submitted[0].turn_id
