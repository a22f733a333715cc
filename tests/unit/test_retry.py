"""`ride_out`: outages are waited out with backoff and logged; anything else, or a long outage, is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from turnledger.errors import KafkaUnavailableError, ServiceUnavailable
from turnledger.retry import NO_WAIT, Backoff, StopRequested, ride_out

FAST = Backoff(initial_s=0.001, max_s=0.004)


def _classify(exc: BaseException) -> ServiceUnavailable | None:
    return KafkaUnavailableError("k:1", exc) if isinstance(exc, ConnectionError) else None


def _flaky(failures: int, error: type[Exception] = ConnectionError) -> tuple[list[int], object]:
    calls = [0]

    async def attempt() -> str:
        calls[0] += 1
        if calls[0] <= failures:
            raise error("down")
        return "up"

    return calls, attempt


async def test_outages_are_retried_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    calls, attempt = _flaky(3)
    with caplog.at_level(logging.INFO, logger="turnledger.retry"):
        assert await ride_out(attempt, waiting_for="Kafka at k:1", classify=_classify, backoff=FAST) == "up"  # type: ignore[arg-type]
    assert calls[0] == 4
    waits = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(waits) == 3 and all(m.startswith("waiting for Kafka at k:1 (attempt ") for m in waits)
    assert "not reachable at 'k:1'" in waits[0]
    assert any("back after 3 failed attempts" in r.getMessage() for r in caplog.records)


async def test_other_errors_are_not_retried() -> None:
    calls, attempt = _flaky(1, ValueError)
    with pytest.raises(ValueError):
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=FAST)  # type: ignore[arg-type]
    assert calls[0] == 1


async def test_no_wait_raises_the_first_outage_as_the_typed_error() -> None:
    calls, attempt = _flaky(5)
    with pytest.raises(KafkaUnavailableError, match="not reachable at 'k:1'"):
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=NO_WAIT)  # type: ignore[arg-type]
    assert calls[0] == 1


async def test_an_outage_longer_than_max_outage_gives_up() -> None:
    _, attempt = _flaky(10_000)
    bounded = Backoff(initial_s=0.001, max_s=0.002, max_outage_s=0.05)
    with pytest.raises(KafkaUnavailableError):
        await asyncio.wait_for(ride_out(attempt, waiting_for="x", classify=_classify, backoff=bounded), 5)  # type: ignore[arg-type]


async def test_stop_interrupts_the_wait() -> None:
    _, attempt = _flaky(10_000)
    stop = asyncio.Event()
    slow = Backoff(initial_s=30, max_s=30)
    task = asyncio.create_task(
        ride_out(attempt, waiting_for="x", classify=_classify, backoff=slow, stop=stop)
    )  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    stop.set()
    with pytest.raises(StopRequested):
        await asyncio.wait_for(task, 5)


def test_delays_grow_to_the_cap_with_bounded_jitter() -> None:
    delays = Backoff(initial_s=0.1, max_s=0.4, jitter=0.2).delays()
    got = [next(delays) for _ in range(6)]
    for value, base in zip(got, [0.1, 0.2, 0.4, 0.4, 0.4, 0.4], strict=True):
        assert base <= value <= base * 1.2
    with pytest.raises(ValueError):
        Backoff(initial_s=1, max_s=0.5)
