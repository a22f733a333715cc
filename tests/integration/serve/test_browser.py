"""The page in a real browser (Debian's chromium through Playwright, no browser download): a conversation
driven through the whole pipeline — processor, projector, worker, fake provider with a slow stream — shows
the model's answer as a revocable preview while it streams, then as committed; text is never markup."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.conftest import skip_unless_installed
from tests.integration.serve.conftest import serving
from tests.integration.serve.test_stream_outage import PREFIX, serve_on
from tests.integration.worker_ports import RESTART_PORTS
from turnledger.demo.run import _start_processor, _start_projector, _stop_process
from turnledger.devstack.restartable import RestartableRedis
from turnledger.fake_provider import FakeProvider, Fault, FaultKind, FaultPlan
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.runner import run_worker
from turnledger.gateway.worker import WorkerConfig
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
                    paused = "live updates paused: the server cannot reach Redis; "
                    # EventSource's own reconnect got the 503 and gave up: the page reopens it itself
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
