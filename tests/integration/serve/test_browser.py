"""The page in a real browser (Debian's chromium through Playwright, no browser download): a conversation
driven through the whole pipeline — processor, projector, worker, fake provider with a slow stream — shows
the model's answer as a revocable preview while it streams, then as committed; text is never markup.
With a Redis of the test's own stopped under serve, the page pauses its live updates and resumes, and
a page opened meanwhile says why it cannot load and retries. Pages whose API answers the test gives
(`RoutedServe`, no server) check what a load retries, what it says once, and the retry's waits, and
what the page does when EventSource gives up on a stream: stop for good, wait and reopen, or reopen."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.conftest import skip_unless_installed
from tests.integration.serve.conftest import serving
from tests.integration.serve.test_stream_outage import PREFIX, serve_on
from tests.integration.test_processor_eos import wait_for
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.demo.run import _start_processor, _start_projector, _stop_process
from turnledger.devstack.restartable import RestartableRedis
from turnledger.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_worker
from turnledger.gateway.worker import WorkerConfig
from turnledger.model.graph import Block
from turnledger.processors.topics import ensure_topics
from turnledger.projections.keys import ProjectionKeys
from turnledger.serve.app import ServeConfig
from turnledger.topology import Topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = shutil.which("chromium")


@pytest.fixture
def chromium() -> str:
    """Debian's chromium (Playwright cannot download a browser on these machines)."""
    if CHROMIUM is None:
        skip_unless_installed("Debian's chromium", "apt-get install -y --no-install-recommends chromium")
    assert CHROMIUM is not None
    return CHROMIUM


SLOW = "[slow stream]"
XSS = '<b id="bold">not bold</b><img src=x onerror="document.title=\'pwned\'">'


@pytest.fixture
def fault_plan(request: pytest.FixtureRequest) -> FaultPlan:
    """The fake provider's faults: a slow stream for every message that asks for one (parametrize
    indirectly for others). 800 ms an event: the streaming test sees a preview, screenshots, reloads
    and sees the preview grow again before the commit; a text answer's 10-13 events at 300 ms (3-4 s)
    left a loaded 2-core machine, Chromium included, little room for all of that."""
    return getattr(request, "param", None) or FaultPlan(by_marker={SLOW: (Fault(FaultKind.SLOW, 800),)})


@pytest.fixture
async def pipeline(
    fault_plan: FaultPlan,
    kafka_bootstrap: str,
    redis_url: str,
    redis_client: aioredis.Redis,
    redis_prefix: str,
    topic_name: Callable[[str], str],
    tmp_path: Path,
) -> AsyncIterator[str]:
    """processor + projector (their own processes), one worker and the fake provider (here), then serve;
    yields the page URL."""
    prefix = topic_name("") + "."
    topics = Topics(prefix=prefix)
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    processor = _start_processor(kafka_bootstrap, prefix)
    projector = _start_projector(kafka_bootstrap, redis_url, prefix, redis_prefix, tmp_path / "projector.log")
    stop = asyncio.Event()
    plan = fault_plan
    redis = aioredis.from_url(redis_url)
    try:
        async with FakeProvider(seed=3, fault_plan=plan) as fp:
            started = asyncio.Event()
            worker = asyncio.create_task(
                run_worker(
                    kafka_bootstrap,
                    endpoints_for(fp.base_url, fp.keys.as_env(), keeps_idempotency_keys=True),
                    stop=stop,
                    prefix=prefix,
                    config=WorkerConfig(worker_id="browser-test-worker", lease_s=3.0),
                    journal_dir=tmp_path / "journal",
                    started=started,
                )
            )
            async with asyncio.timeout(60):
                await started.wait()
            try:
                config = ServeConfig(key_prefix=redis_prefix, block_ms=1000)
                async with serving(redis, kafka_bootstrap, topics, config) as url:
                    yield url
            finally:
                stop.set()
                await asyncio.gather(worker, return_exceptions=True)
    finally:
        await redis.aclose()
        _stop_process(processor)
        _stop_process(projector)


@pytest.mark.timeout(240)
async def test_a_streaming_answer_is_shown_revocable_then_committed(
    chromium: str, pipeline: str, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            errors: list[Any] = []
            page.on("pageerror", lambda error: errors.append(error))
            await page.goto(pipeline + "/#/c/conv-browser")
            await expect(page.locator("#live")).to_have_text("live", timeout=20_000)

            await page.fill("#composer-text", f"{SLOW} {XSS}")
            await page.click("#send-dispatch")

            user = page.locator('#messages li[data-state="committed"].role-user')
            await expect(user).to_have_count(1, timeout=60_000)
            await expect(user.locator(".text")).to_have_text(f"{SLOW} {XSS}")
            assert await page.locator("#messages #bold, #messages img").count() == 0
            assert await page.title() != "pwned"

            preview = page.locator('#messages li[data-state="preview"]')
            await expect(preview.first).to_be_visible(timeout=60_000)
            label = await preview.first.get_attribute("aria-label")
            assert label is not None and "provisional" in label and "may be retracted" in label
            await expect(preview.first.locator(".badge")).to_have_text("preview — may be retracted")
            await expect(preview.first.locator(".text")).not_to_have_text("")
            await page.screenshot(path=str(tmp_path / "preview.png"), full_page=True)

            # a reload mid-stream: the page comes back with the preview so far, still revocable, and
            # follows the stream on from there (its text grows) until the commit
            before_reload = await preview.first.locator(".text").text_content() or ""
            await page.reload()
            await expect(page.locator("#live")).to_have_text("live", timeout=20_000)
            resumed = page.locator('#messages li[data-state="preview"]')
            await expect(resumed.first).to_be_visible(timeout=20_000)
            await expect(resumed.first.locator(".badge")).to_have_text("preview — may be retracted")

            async def text_now() -> str | None:
                """The resumed preview's text, or None once it is gone (committed)."""
                if not await resumed.count():
                    return None
                return await resumed.first.locator(".text").text_content() or ""

            deadline = asyncio.get_running_loop().time() + 60
            grown = await text_now()
            seen = [before_reload]  # every text the preview showed: each must be a prefix of the answer
            while grown is not None and len(grown) <= len(before_reload):
                assert asyncio.get_running_loop().time() < deadline, (before_reload, grown)
                await asyncio.sleep(0.1)
                grown = await text_now()
            seen.append(grown or "")
            await page.screenshot(path=str(tmp_path / "reloaded.png"), full_page=True)

            answer = page.locator('#messages li[data-state="committed"].role-assistant')
            await expect(answer.first).to_be_visible(timeout=90_000)
            await expect(page.locator('#messages li[data-state="preview"]')).to_have_count(0)
            label = await answer.first.get_attribute("aria-label")
            assert label is not None and "Committed" in label and "final" in label
            # the previews are appended text at offsets: what the page built, before and after the
            # reload, is the committed answer's beginning, with no hole and nothing twice
            final = await answer.first.locator(".text").text_content() or ""
            assert len(final) > len(before_reload) > 0
            assert [final.startswith(text) for text in seen] == [True, True], (seen, final)
            op = page.locator("#operations article.operation")
            await expect(op.first).to_have_attribute("data-op-state", "COMMITTED", timeout=30_000)
            timeline = await op.first.locator(".timeline li").all_text_contents()
            assert any("STREAMING" in step for step in timeline) and "COMMITTED" in timeline[-1]
            await page.screenshot(path=str(tmp_path / "committed.png"), full_page=True)

            # a reload shows the same truth from the projection (and the timeline from the stream)
            await page.reload()
            await expect(
                page.locator('#messages li[data-state="committed"].role-assistant').first
            ).to_be_visible(timeout=20_000)
            await expect(page.locator('#messages li[data-state="preview"]')).to_have_count(0)
            assert not errors, errors
        finally:
            await browser.close()
    assert (tmp_path / "preview.png").stat().st_size > 0
    print(f"screenshots in {tmp_path}", file=sys.stderr)


CUT_FIRST = FaultPlan(
    by_request={0: (Fault(FaultKind.SLOW, 150), Fault(FaultKind.DISCONNECT, 900))},
    by_marker={SLOW: (Fault(FaultKind.SLOW, 100),)},
)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault_plan", [CUT_FIRST], indirect=True, ids=["cut-first-stream"])
async def test_a_cut_stream_shows_its_preview_retracted_and_the_new_attempt_replaces_it(
    chromium: str, pipeline: str, tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            await page.goto(pipeline + "/#/c/conv-cut")
            await expect(page.locator("#live")).to_have_text("live", timeout=20_000)
            await page.fill("#composer-text", f"{SLOW} tell me something long")
            await page.click("#send-dispatch")

            retracted = page.locator('#messages li[data-state="retracted"]')
            await expect(retracted.first).to_be_visible(timeout=90_000)
            label = await retracted.first.get_attribute("aria-label")
            assert label is not None and "Retracted" in label and "withdrawn" in label
            assert await retracted.first.locator("del").count() == 1
            await page.screenshot(path=str(tmp_path / "retracted.png"), full_page=True)

            answer = page.locator('#messages li[data-state="committed"].role-assistant')
            await expect(answer.first).to_be_visible(timeout=90_000)
            await expect(page.locator('#messages li[data-state="preview"]')).to_have_count(0)
            op = page.locator("#operations article.operation").first
            await expect(op).to_have_attribute("data-op-state", "COMMITTED", timeout=30_000)
            timeline = await op.locator(".timeline li").all_text_contents()
            assert any("STREAM_DISCONNECTED" in step for step in timeline), timeline
            assert "COMMITTED" in timeline[-1], timeline
            # the withdrawn text stays visible as withdrawn, before the answer that replaced it
            assert await retracted.count() >= 1
            await page.screenshot(path=str(tmp_path / "replaced.png"), full_page=True)
        finally:
            await browser.close()


def committed_turn(revision: int, text: str) -> dict[str, str]:
    """A `committed` stream entry of one user block, as the projector appends it."""
    block = {
        "id": f"block-{revision}", "role": "user", "kind": "text", "turnId": f"turn-{revision}",
        "revision": revision, "ordering": revision, "trustLabel": "user", "status": "committed", "text": text,
    }  # fmt: skip
    data = {"revision": revision, "turnId": f"turn-{revision}", "blocks": [block], "occurredAtMs": 1}
    return {"type": "committed", "data": json.dumps(data)}


@pytest.mark.timeout(240)
async def test_the_page_says_live_updates_paused_while_redis_is_down_then_shows_what_comes_after(
    chromium: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    with RestartableRedis(tmp_path / "redis", port=RESTART_PORTS.take) as redis_server:
        redis_server.start()
        log = tmp_path / "serve.log"
        async with serve_on(redis_server, kafka_bootstrap, topic_name("") + ".", log) as serve:
            key = ProjectionKeys(PREFIX).events("conv-paused")
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                try:
                    page = await browser.new_page()
                    await page.goto(serve.url + "#/c/conv-paused")
                    live = page.locator("#live")
                    await expect(live).to_have_text("live", timeout=30_000)
                    await serve.redis.xadd(key, committed_turn(1, "before the outage"))
                    committed = page.locator('#messages li[data-state="committed"] .text')
                    await expect(committed).to_have_text(["before the outage"], timeout=30_000)
                    assert await serve.redis.save()  # what the restarted Redis loads (no persistence)

                    await asyncio.to_thread(redis_server.stop)
                    # EventSource's own reconnect got the 503 and gave up: the page asks why (the
                    # 503's words) and reopens it itself
                    said = refused_connection(redis_server.port)
                    paused = f"live updates paused: the server answered 503: {said}; "
                    await expect(live).to_have_text(
                        re.compile(re.escape(paused) + r"retrying in \d+ s…"), timeout=60_000
                    )
                    await page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)

                    await asyncio.to_thread(redis_server.start)
                    await serve.reconnect(redis_server.url)
                    await serve.redis.xadd(key, committed_turn(2, "after the outage"))
                    await expect(committed).to_have_text(
                        ["before the outage", "after the outage"], timeout=90_000
                    )
                    await expect(live).to_have_text("live")
                    await page.screenshot(path=str(tmp_path / "resumed.png"), full_page=True)
                finally:
                    await browser.close()
        assert "Traceback" not in serve.child.log.read_text()


@pytest.mark.timeout(240)
async def test_asking_serve_why_a_stream_closed_keeps_no_second_stream_open(
    chromium: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    with RestartableRedis(tmp_path / "redis", port=RESTART_PORTS.take) as redis_server:
        redis_server.start()
        async with serve_on(
            redis_server, kafka_bootstrap, topic_name("") + ".", tmp_path / "serve.log"
        ) as serve:

            async def one_stream_open() -> bool:
                """Each open stream of serve's blocks in one XREAD of its own."""
                clients = await serve.redis.client_list()
                return [c["cmd"] for c in clients].count("xread") == 1

            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                try:
                    page = await browser.new_page()
                    await page.goto(serve.url + "#/c/conv-asked")
                    await expect(page.locator("#live")).to_have_text("live", timeout=30_000)
                    await wait_for(one_stream_open, 30, "the page's stream to be open")
                    # as when EventSource gives up: the page asks the events URL, serve answers with
                    # its stream (200), and the page aborts it once it has the status, then reopens
                    await page.evaluate(
                        "() => { const s = current.source; s.close(); return current.streamClosed(s); }"
                    )
                    key = ProjectionKeys(PREFIX).events("conv-asked")
                    await serve.redis.xadd(key, committed_turn(1, "after asking"))
                    committed = page.locator('#messages li[data-state="committed"] .text')
                    await expect(committed).to_have_text(["after asking"], timeout=30_000)
                    await wait_for(one_stream_open, 30, "the asking stream to be closed")
                finally:
                    await browser.close()


def refused_connection(port: int) -> str:
    """What redis-py says, and serve's 503 repeats, when nothing listens on Redis's port."""
    return f"Error 111 connecting to 127.0.0.1:{port}. Connect call failed ('127.0.0.1', {port})."


@pytest.mark.timeout(240)
async def test_pages_opened_while_redis_is_down_say_why_and_retry_until_it_is_back(
    chromium: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    from playwright.async_api import async_playwright, expect

    with RestartableRedis(tmp_path / "redis", port=RESTART_PORTS.take) as redis_server:
        redis_server.start()
        log = tmp_path / "serve.log"
        async with serve_on(redis_server, kafka_bootstrap, topic_name("") + ".", log) as serve:
            keys = ProjectionKeys(PREFIX)
            conv = "conv-down"
            # the projection's snapshot only: the page shows it from the snapshot, not from the stream
            snapshot = Block(
                id="block-1", role="user", kind="text", turn_id="turn-1", revision=1, ordering=1,
                trust_label="user", text="in the snapshot",
            )  # fmt: skip
            await serve.redis.hset(keys.history(conv), "block-1", snapshot.model_dump_json())
            await serve.redis.zadd(keys.history_order(conv), {"block-1": 1})
            await serve.redis.hset(keys.conversation(conv), mapping={"revision": "1", "turns": "1"})
            await serve.redis.zadd(keys.conversations, {conv: 1_000})
            assert await serve.redis.save()  # what the restarted Redis loads (no persistence)
            await asyncio.to_thread(redis_server.stop)

            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                try:
                    page = await browser.new_page()
                    listing = await browser.new_page()
                    errors: list[Any] = []
                    for opened in (page, listing):
                        opened.on("pageerror", lambda error: errors.append(error))
                    await page.goto(serve.url + "#/c/" + conv)
                    await listing.goto(serve.url)
                    said = refused_connection(redis_server.port)
                    waiting = re.compile(
                        re.escape(f"could not load: the server answered 503: {said}")
                        + r"; retrying in \d+ s…"
                    )
                    live = page.locator("#live")
                    await expect(live).to_have_text(waiting, timeout=60_000)
                    await expect(listing.locator("#status")).to_have_text(waiting, timeout=60_000)
                    await page.screenshot(path=str(tmp_path / "waiting.png"), full_page=True)

                    await asyncio.to_thread(redis_server.start)
                    await serve.reconnect(redis_server.url)
                    committed = page.locator('#messages li[data-state="committed"] .text')
                    await expect(committed).to_have_text(["in the snapshot"], timeout=90_000)
                    await expect(live).to_have_text("live", timeout=60_000)
                    await serve.redis.xadd(keys.events(conv), committed_turn(2, "after the outage"))
                    await expect(committed).to_have_text(
                        ["in the snapshot", "after the outage"], timeout=60_000
                    )
                    await expect(listing.locator("#conversations li")).to_have_attribute(
                        "data-conversation", conv, timeout=90_000
                    )
                    await expect(listing.locator("#status")).to_have_text("")
                    assert not errors, errors
                finally:
                    await browser.close()
        assert "Traceback" not in serve.child.log.read_text()


ORIGIN = "http://turnledger.test/"


class RoutedServe:
    """The page's own files at ORIGIN with the API's answers given by the test, one a request, in
    order (`answer`, `stream`): a test decides what each load meets, and when, without a server."""

    def __init__(self) -> None:
        self.answers: asyncio.Queue[tuple[int, str, str] | None] = asyncio.Queue()
        self.asked: list[str] = []

    def answer(self, status: int, body: dict[str, Any]) -> None:
        self.answers.put_nowait((status, "application/json", json.dumps(body)))

    def stream(self, *frames: str) -> None:
        """The next request gets an event stream of these frames, which then ends."""
        self.answers.put_nowait((200, "text/event-stream", "".join(frames)))

    def no_answer(self) -> None:
        """The next request fails as when the server is down (fetch rejects)."""
        self.answers.put_nowait(None)

    async def handle(self, route: Any) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        if path.startswith("api/"):
            self.asked.append(path)
            given = await self.answers.get()
            if given is None:
                await route.abort()
            else:
                await route.fulfill(status=given[0], content_type=given[1], body=given[2])
            return
        name = "index.html" if path.split("#")[0] == "" else path.removeprefix("static/")
        served = resources.files("turnledger.serve").joinpath(f"static/{name}").read_text("utf-8")
        await route.fulfill(
            content_type="text/javascript" if name.endswith(".js") else "text/html", body=served
        )


@pytest.fixture
async def routed_page(chromium: str) -> AsyncIterator[tuple[Any, RoutedServe]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            routed = RoutedServe()
            await page.route(ORIGIN + "**", routed.handle)
            yield page, routed
        finally:
            await browser.close()


@pytest.mark.timeout(120)
async def test_a_load_that_gets_no_answer_or_a_503_is_retried_saying_why_until_it_loads(
    routed_page: tuple[Any, RoutedServe],
) -> None:
    from playwright.async_api import expect

    page, routed = routed_page
    await page.goto(ORIGIN)
    status = page.locator("#status")
    routed.no_answer()
    # the first wait is 0.5 to 1 s, the second 1 to 2 s
    await expect(status).to_have_text(
        "could not load: the server did not answer; retrying in 1 s…", timeout=30_000
    )
    routed.answer(503, {"error": "Redis is not reachable"})
    await expect(status).to_have_text(
        re.compile(r"could not load: the server answered 503: Redis is not reachable; retrying in [12] s…"),
        timeout=30_000,
    )
    routed.answer(
        200, {"conversations": [{"conversationId": "c1", "revision": 2, "turns": 1, "updatedAtMs": 0}]}
    )
    await expect(page.locator("#conversations li")).to_have_attribute(
        "data-conversation", "c1", timeout=30_000
    )
    await expect(status).to_have_text("")
    assert routed.asked == ["api/conversations"] * 3


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("opened", "status", "path", "refused"),
    [
        ("#/c/c1", "#live", "api/conversations/c1", (401, "unauthorized")),
        ("#/c/c1", "#live", "api/conversations/c1", (403, "forbidden")),
        ("", "#status", "api/conversations", (404, "not found")),
    ],
)
async def test_a_load_refused_for_good_is_said_once_and_not_retried(
    routed_page: tuple[Any, RoutedServe], opened: str, status: str, path: str, refused: tuple[int, str]
) -> None:
    from playwright.async_api import expect

    page, routed = routed_page
    code, error = refused
    routed.answer(code, {"error": error})
    await page.goto(ORIGIN + opened)
    await expect(page.locator(status)).to_have_text(
        f"could not load: the server answered {code}: {error}", timeout=30_000
    )
    assert await page.evaluate("current.retry.timer") is None  # no retry waits to run
    assert routed.asked == [path]


@pytest.mark.timeout(120)
async def test_each_retry_waits_a_random_part_of_a_doubling_ceiling_of_at_most_30_s(
    routed_page: tuple[Any, RoutedServe],
) -> None:
    page, routed = routed_page
    routed.answer(200, {"conversations": []})
    await page.goto(ORIGIN)
    attempts = [0, 1, 2, 3, 4, 5, 6, 20]
    ceilings = [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
    delays = await page.evaluate(
        "(attempts) => [0, 0.25, 1].map((r) => attempts.map((a) => backoffDelay(a, () => r)))", attempts
    )
    assert delays == [[c / 2 for c in ceilings], [c * 5 / 8 for c in ceilings], ceilings]
    # a page's retries draw from Math.random
    drawn = await page.evaluate(
        """() => {
          const retry = new Retry();
          retry.stop();  // nothing runs: only the waits are asked for
          return [0, 0.5, 1].map((r) => { Math.random = () => r; return retry.schedule(() => {}); });
        }"""
    )
    assert drawn == [500, 1_500, 4_000]


EMPTY_SNAPSHOT: dict[str, list[Any]] = {
    "history": [], "previews": [], "operations": [], "quarantine": [], "rejections": [],
}  # fmt: skip
EVENTS = "api/conversations/c1/events?after="
RECORD_SAID = """() => {
  window.said = [];
  const say = ConversationView.prototype.say;
  ConversationView.prototype.say = function (text) { said.push(text); say.call(this, text); };
}"""
"""Keeps every status the conversation page says, in order, in `said` (`#live` shows the last only)."""


def event_frame(entry_id: str, revision: int, text: str) -> str:
    return f"id: {entry_id}\nevent: committed\ndata: {committed_turn(revision, text)['data']}\n\n"


async def first_stream_ended(page: Any, routed: RoutedServe) -> None:
    """A conversation page loaded whose first stream showed an event then ended: EventSource asks again
    10 ms later (the stream's `retry:`), and that request waits for the test's answer."""
    from playwright.async_api import expect

    await page.goto(ORIGIN + "#/c/c1")
    await page.evaluate(RECORD_SAID)  # nothing is said before the snapshot's answer
    routed.answer(200, EMPTY_SNAPSHOT)
    routed.stream("retry: 10\n\n", event_frame("1-0", 1, "before"))
    committed = page.locator('#messages li[data-state="committed"] .text')
    await expect(committed).to_have_text(["before"], timeout=30_000)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (401, {"error": "unauthorized"}, "the server answered 401: unauthorized"),
        (404, {"error": "no such conversation"}, "the server answered 404: no such conversation"),
        (200, {}, "the server answered 200 with no event stream"),
    ],
    ids=["401", "404", "200-not-a-stream"],
)
async def test_a_stream_refused_for_good_after_one_ended_is_said_once_and_not_asked_again(
    routed_page: tuple[Any, RoutedServe], status: int, body: dict[str, Any], said: str
) -> None:
    from playwright.async_api import expect

    page, routed = routed_page
    await first_stream_ended(page, routed)
    routed.answer(status, body)  # EventSource's own reconnect: it gives up, saying nothing of why
    routed.answer(status, body)  # the page's fetch of the same URL: the status and the server's words
    stopped = f"live updates stopped: {said}"
    await expect(page.locator("#live")).to_have_text(stopped, timeout=30_000)
    assert await page.evaluate("said") == ["connecting…", "live", "reconnecting…", stopped]
    # nothing left that could ask again: no retry wait, the EventSource closed
    assert await page.evaluate("[current.retry.timer, current.source.readyState]") == [None, 2]
    assert routed.asked == ["api/conversations/c1", EVENTS + "0-0", EVENTS + "0-0", EVENTS + "1-0"]


@pytest.mark.timeout(120)
async def test_a_stream_refused_with_a_503_is_reopened_after_a_wait_and_at_once_when_it_answers_again(
    routed_page: tuple[Any, RoutedServe],
) -> None:
    from playwright.async_api import expect

    page, routed = routed_page
    await first_stream_ended(page, routed)
    down = {"error": "Redis is not reachable"}
    routed.answer(503, down)  # EventSource's own reconnect: it gives up
    routed.answer(503, down)  # the page asks why
    paused = "live updates paused: the server answered 503: Redis is not reachable; retrying in 1 s…"
    live = page.locator("#live")
    await expect(live).to_have_text(paused, timeout=30_000)
    routed.answer(503, down)  # the stream the page reopened after the wait (0.5 to 1 s): refused again
    routed.stream(": Redis answers again\n\n")  # the page asks why: a stream, so it reopens at once
    routed.stream("retry: 3600000\n\n", event_frame("2-0", 2, "after"))
    committed = page.locator('#messages li[data-state="committed"] .text')
    await expect(committed).to_have_text(["before", "after"], timeout=30_000)
    await expect(live).to_have_text("reconnecting…", timeout=30_000)  # that one ended too: EventSource's own
    said = await page.evaluate("said")
    assert said == ["connecting…", "live", "reconnecting…", paused, "live", "reconnecting…"]
    assert await page.evaluate("current.retry.timer") is None
    assert routed.asked == ["api/conversations/c1"] + [EVENTS + "0-0"] * 2 + [EVENTS + "1-0"] * 4
