"""`ride_out`: outages are waited out with backoff and logged; anything else, or a long outage, is not.

The clock and the sleeps are the module's own (`retry.time`, `retry.asyncio`), replaced here so that
every delay, every "so far" and every log line is exact."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator

import pytest

from tests.unit.recorded_asyncio import RecordedAsyncio, record_asyncio
from turnledger import retry
from turnledger.errors import KafkaAccessError, KafkaUnavailableError, ServiceUnavailable, TurnledgerError
from turnledger.retry import FOREVER, NO_WAIT, Backoff, StopRequested, ride_out

STEADY = Backoff(initial_s=0.5, max_s=2, multiplier=2, jitter=0)


def _classify(exc: BaseException) -> TurnledgerError | None:
    """A connection error is an outage; a PermissionError a refusal no wait can cure; the rest not ours."""
    if isinstance(exc, ConnectionError):
        return KafkaUnavailableError("k:1", exc, action="read")
    if isinstance(exc, PermissionError):
        return KafkaAccessError("k:1", "SASL_SSL", exc, "check the password")
    if isinstance(exc, TurnledgerError):
        return exc
    return None


def _flaky(*failures: BaseException) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls = [0]

    async def attempt() -> str:
        calls[0] += 1
        if calls[0] <= len(failures):
            raise failures[calls[0] - 1]
        return "up"

    return calls, attempt


class Clock:
    """`retry.time`: `monotonic()` reads the next of `readings` (the last one for ever after)."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def monotonic(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> RecordedAsyncio:
    return record_asyncio(monkeypatch, retry)


def clock(monkeypatch: pytest.MonkeyPatch, *readings: float) -> None:
    monkeypatch.setattr(retry, "time", Clock(*readings))


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "turnledger.retry"]


# ------------------------------------------------------------------------------------ ride_out


async def test_outages_are_waited_out_as_the_backoff_says_and_each_wait_is_logged(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    clock(monkeypatch, 10.0, 10.5, 11.5, 13.5)
    down = [ConnectionError("down"), ConnectionError("still"), ConnectionError("again")]
    calls, attempt = _flaky(*down)
    caplog.set_level(logging.INFO, "turnledger.retry")
    assert await ride_out(attempt, waiting_for="Kafka at k:1", classify=_classify, backoff=STEADY) == "up"
    assert calls[0] == 4 and sleeps.waits == [("sleep", 0.5), ("sleep", 1.0), ("sleep", 2.0)]
    said = [str(KafkaUnavailableError("k:1", exc, action="read")) for exc in down]
    assert _lines(caplog) == [
        (logging.WARNING, f"waiting for Kafka at k:1 (attempt 1, 0.0s so far, next in 0.5s): {said[0]}"),
        (logging.WARNING, f"waiting for Kafka at k:1 (attempt 2, 0.5s so far, next in 1.0s): {said[1]}"),
        (logging.WARNING, f"waiting for Kafka at k:1 (attempt 3, 1.5s so far, next in 2.0s): {said[2]}"),
        (logging.INFO, "Kafka at k:1: back after 3 failed attempts"),
    ]


async def test_a_first_attempt_that_works_logs_nothing_and_waits_for_nothing(
    sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    calls, attempt = _flaky()
    caplog.set_level(logging.DEBUG, "turnledger.retry")
    assert await ride_out(attempt, waiting_for="x", classify=_classify) == "up"
    assert (calls[0], sleeps.waits, _lines(caplog)) == (1, [], [])


async def test_an_error_that_is_not_the_classifier_s_is_raised_as_it_is(sleeps: RecordedAsyncio) -> None:
    wrong = ValueError("bad")
    calls, attempt = _flaky(wrong)
    with pytest.raises(ValueError) as raised:
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=STEADY)
    assert (raised.value, calls[0], sleeps.waits) == (wrong, 1, [])


async def test_a_refusal_the_classifier_names_is_raised_in_the_raw_error_s_place(
    sleeps: RecordedAsyncio,
) -> None:
    refused = PermissionError("SASL authentication failed")
    calls, attempt = _flaky(refused)
    with pytest.raises(KafkaAccessError) as raised:
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=STEADY)
    assert (raised.value.__cause__, calls[0], sleeps.waits) == (refused, 1, [])


async def test_a_typed_error_that_is_no_outage_is_raised_itself(sleeps: RecordedAsyncio) -> None:
    """The classifier hands back a turnledger error as it is: not retriable, it is raised unchained."""
    typed = TurnledgerError("not a thing to wait for")
    _, attempt = _flaky(typed)
    with pytest.raises(TurnledgerError) as raised:
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=STEADY)
    assert (raised.value, raised.value.__cause__, sleeps.waits) == (typed, None, [])


async def test_the_first_outage_is_the_answer_with_no_wait_and_no_give_up_line(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    clock(monkeypatch, 5.0)
    down = ConnectionError("down")
    calls, attempt = _flaky(down, down)
    caplog.set_level(logging.DEBUG, "turnledger.retry")
    with pytest.raises(KafkaUnavailableError) as raised:
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=NO_WAIT)
    assert (raised.value.cause, raised.value.__cause__, calls[0]) == (down, down, 1)
    assert (sleeps.waits, _lines(caplog)) == ([], [])


async def test_an_outage_that_lasts_max_outage_gives_up_with_one_error_line(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    """Given up once it has lasted `max_outage_s` (not a moment before: 2.9 s of 3 waits again)."""
    clock(monkeypatch, 100.0, 101.0, 102.9, 103.0)
    calls, attempt = _flaky(*[ConnectionError("down")] * 9)
    bounded = Backoff(initial_s=1, max_s=1, jitter=0, max_outage_s=3)
    caplog.set_level(logging.ERROR, "turnledger.retry")
    with pytest.raises(KafkaUnavailableError):
        await ride_out(attempt, waiting_for="Kafka at k:1", classify=_classify, backoff=bounded)
    assert calls[0] == 4 and sleeps.waits == [("sleep", 1.0)] * 3
    assert _lines(caplog) == [(logging.ERROR, "gave up waiting for Kafka at k:1 after 3.0s and 4 attempts")]


async def test_an_outage_raised_typed_by_the_attempt_itself_is_given_up_as_it_is(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio
) -> None:
    """A `ServiceUnavailable` the attempt raised (the classifier returns it as it is) is re-raised
    itself, not chained to itself."""
    clock(monkeypatch, 0.0, 2.0)
    outage = KafkaUnavailableError("k:1", action="read")
    calls, attempt = _flaky(outage, outage)
    bounded = Backoff(initial_s=1, max_s=1, jitter=0, max_outage_s=1)
    with pytest.raises(KafkaUnavailableError) as raised:
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=bounded)
    assert (raised.value, raised.value.__cause__, calls[0], sleeps.waits) == (
        outage,
        None,
        2,
        [("sleep", 1.0)],
    )


async def test_a_stop_set_before_an_attempt_raises_stop_requested_without_trying(
    sleeps: RecordedAsyncio,
) -> None:
    stop = asyncio.Event()
    stop.set()
    calls, attempt = _flaky()
    with pytest.raises(StopRequested) as raised:
        await ride_out(attempt, waiting_for="Redis at r:1", classify=_classify, stop=stop)
    assert (str(raised.value), calls[0]) == ("stop requested before Redis at r:1", 0)


async def test_with_a_stop_event_each_wait_is_a_wait_on_it(sleeps: RecordedAsyncio) -> None:
    calls, attempt = _flaky(ConnectionError("down"), ConnectionError("down"))
    assert (
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=STEADY, stop=asyncio.Event())
        == "up"
    )
    assert (calls[0], sleeps.waits) == (3, [("wait", 0.5), ("wait", 1.0)])


async def test_a_stop_set_during_a_wait_ends_it_at_once() -> None:
    calls, attempt = _flaky(*[ConnectionError("down")] * 9)
    stop = asyncio.Event()
    slow = Backoff(initial_s=30, max_s=30)
    task = asyncio.create_task(
        ride_out(attempt, waiting_for="x", classify=_classify, backoff=slow, stop=stop)
    )
    while calls[0] == 0:
        await asyncio.sleep(0)
    stop.set()
    with pytest.raises(StopRequested) as raised:
        await asyncio.wait_for(task, 30)
    assert (str(raised.value), calls[0]) == ("stop requested while waiting for a dependency", 1)


async def test_a_cancelled_attempt_is_never_classified() -> None:
    seen: list[BaseException] = []

    def classify(exc: BaseException) -> ServiceUnavailable | None:
        seen.append(exc)
        return KafkaUnavailableError("k:1", exc)

    async def attempt() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await ride_out(attempt, waiting_for="x", classify=classify)
    assert seen == []


async def test_the_logger_given_gets_the_lines(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    clock(monkeypatch, 0.0)
    _, attempt = _flaky(ConnectionError("down"))
    caplog.set_level(logging.INFO, "elsewhere")
    await ride_out(
        attempt, waiting_for="x", classify=_classify, backoff=STEADY, logger=logging.getLogger("elsewhere")
    )
    assert [(r.name, r.levelno) for r in caplog.records] == [
        ("elsewhere", logging.WARNING),
        ("elsewhere", logging.INFO),
    ]


async def test_without_a_stop_event_a_wait_is_a_plain_sleep_and_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    await retry._sleep_or_stop(0.25, None)
    assert slept == [0.25]


# ------------------------------------------------------------------------------------ Backoff


def test_delays_double_to_the_cap() -> None:
    delays = Backoff(initial_s=0.1, max_s=0.4, jitter=0).delays()
    assert [round(next(delays), 9) for _ in range(5)] == [0.1, 0.2, 0.4, 0.4, 0.4]
    tripled = Backoff(initial_s=1, max_s=10, multiplier=3, jitter=0).delays()
    assert [next(tripled) for _ in range(4)] == [1, 3, 9, 10]


def test_each_delay_is_stretched_by_a_random_fraction_up_to_the_jitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[float, float]] = []
    fractions: Iterator[float] = iter([0.25, 0.0, 0.5])

    def uniform(low: float, high: float) -> float:
        asked.append((low, high))
        return next(fractions)

    monkeypatch.setattr(retry.random, "uniform", uniform)
    delays = Backoff(initial_s=2, max_s=8, jitter=0.5).delays()
    assert [next(delays) for _ in range(3)] == [2.5, 4.0, 12.0]
    assert asked == [(0, 0.5)] * 3


@pytest.mark.parametrize(
    "settings",
    [
        {"initial_s": 0},
        {"initial_s": -1},
        {"initial_s": 1, "max_s": 0.5},
        {"multiplier": 0.99},
    ],
)
def test_a_backoff_that_cannot_wait_is_refused_by_name(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError) as raised:
        Backoff(**settings)
    assert str(raised.value).startswith("invalid backoff Backoff(initial_s=")


def test_the_edges_of_a_valid_backoff_and_the_shared_ones() -> None:
    assert Backoff(initial_s=1, max_s=1, multiplier=1).max_s == 1
    assert (FOREVER.initial_s, FOREVER.max_s, FOREVER.multiplier, FOREVER.jitter, FOREVER.max_outage_s) == (
        0.2,
        5.0,
        2.0,
        0.2,
        None,
    )
    assert (NO_WAIT.max_outage_s, NO_WAIT.initial_s) == (0, 0.2)


async def test_a_give_up_after_a_second_attempt_is_logged(
    monkeypatch: pytest.MonkeyPatch, sleeps: RecordedAsyncio, caplog: pytest.LogCaptureFixture
) -> None:
    clock(monkeypatch, 0.0, 1.0)
    calls, attempt = _flaky(ConnectionError("down"), ConnectionError("down"))
    bounded = Backoff(initial_s=1, max_s=1, jitter=0, max_outage_s=1)
    caplog.set_level(logging.ERROR, "turnledger.retry")
    with pytest.raises(KafkaUnavailableError):
        await ride_out(attempt, waiting_for="x", classify=_classify, backoff=bounded)
    assert calls[0] == 2 and _lines(caplog) == [
        (logging.ERROR, "gave up waiting for x after 1.0s and 2 attempts")
    ]
