"""Riding out outages: retry with exponential backoff while a dependency is unavailable.

Every long-running service (processor, projector, tool executor) wraps its calls to Kafka and
Redis in `ride_out`: a `ServiceUnavailable` (what `classify` makes of the raw client error) is
logged with what is awaited and retried after a growing delay; anything else propagates at
once, because waiting cannot fix a bad configuration or a fenced producer (a classifier may
name such an error too, as a typed one that is not `retriable`: a refused login). `max_outage_s` bounds
how long one outage may last before the service gives up (None: ride out any outage, the
default for services; one-shot commands pass a bound).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from turnledger.errors import TurnledgerError

T = TypeVar("T")
log = logging.getLogger(__name__)

Classify = Callable[[BaseException], TurnledgerError | None]
"""The typed error a raw client error stands for: an outage (`retriable`) to wait out, or one that
waiting cannot help (raised at once in its place); None: not the classifier's to name, raised as is."""


class StopRequested(TurnledgerError):
    """The service was asked to stop while it was waiting for a dependency to come back."""


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 0.2
    max_s: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2
    """Each delay is stretched by up to this fraction at random, so restarted services do not
    knock on a recovering broker in lockstep."""
    max_outage_s: float | None = None
    """Give up (re-raise the outage) once it has lasted this long; None: never."""

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_s < self.initial_s or self.multiplier < 1:
            raise ValueError(f"invalid backoff {self}")

    def delays(self) -> Iterator[float]:
        delay = self.initial_s
        while True:
            yield delay * (1 + random.uniform(0, self.jitter))
            delay = min(delay * self.multiplier, self.max_s)


FOREVER = Backoff()
"""What services use: ride out any outage."""
NO_WAIT = Backoff(max_outage_s=0)
"""What one-shot commands use: the first outage is the answer."""


async def _sleep_or_stop(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return
    raise StopRequested("stop requested while waiting for a dependency")


async def ride_out(
    attempt: Callable[[], Awaitable[T]],
    *,
    waiting_for: str,
    classify: Classify,
    backoff: Backoff = FOREVER,
    stop: asyncio.Event | None = None,
    logger: logging.Logger = log,
) -> T:
    """`await attempt()` until it succeeds, waiting out every error `classify` calls an outage.

    Logs a warning naming `waiting_for` and the outage on each failed attempt, and one info
    line once it succeeds after failures. Raises the outage once `backoff.max_outage_s` has
    passed, `StopRequested` when `stop` is set during a wait, any other error at once.
    """
    began: float | None = None
    delays = backoff.delays()
    attempts = 0
    while True:
        if stop is not None and stop.is_set():
            raise StopRequested(f"stop requested before {waiting_for}")
        try:
            result = await attempt()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outage = classify(exc)
            if outage is None or (outage is exc and not outage.retriable):
                raise
            if not outage.retriable:
                raise outage from exc
            attempts += 1
            now = time.monotonic()
            began = now if began is None else began
            waited = now - began
            if backoff.max_outage_s is not None and waited >= backoff.max_outage_s:
                if attempts > 1:
                    logger.error(
                        "gave up waiting for %s after %.1fs and %d attempts", waiting_for, waited, attempts
                    )
                if outage is exc:
                    raise
                raise outage from exc
            delay = next(delays)
            logger.warning(
                "waiting for %s (attempt %d, %.1fs so far, next in %.1fs): %s",
                waiting_for,
                attempts,
                waited,
                delay,
                outage,
            )
            await _sleep_or_stop(delay, stop)
            continue
        if attempts:
            logger.info("%s: back after %d failed attempts", waiting_for, attempts)
        return result
