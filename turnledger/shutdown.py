"""How a long-running command stops on SIGTERM or SIGINT (Ctrl-C): the first signal asks it to finish
what it has in hand and return (`stop` is set); a second one stops it at once, cancelling the command's
main task, for an operator who will not wait. The processor (`processors/app.py`, `multiproc.py`) keeps
the same two steps with its own first step (committing the open batches)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from turnledger.errors import TurnledgerError

log = logging.getLogger(__name__)
T = TypeVar("T")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_STOPPED_AT_ONCE = 130
"""The exit status of a command stopped by a second signal (128 + SIGINT, as shells report Ctrl-C)."""


SECOND_SIGNAL = "stopped at once by a second signal"
"""The message of the cancellation a second signal makes: told apart from any other cancellation."""


class StoppedAtOnce(TurnledgerError):
    """A second signal cancelled the command's main task (raised by `run_until_signalled`)."""


def stop_on_signals(stop: asyncio.Event, what: str) -> None:
    """Install the two-step handlers on the running loop for the task that calls this; `what` names the
    command in the log lines. The handlers stay until the loop closes."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if len(received) == 1:
            log.info("received %s: %s is stopping (a second signal stops it at once)", sig.name, what)
            stop.set()
            return
        log.warning("received %s again: %s stops at once", sig.name, what)
        if main is not None:
            main.cancel(SECOND_SIGNAL)

    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)


def run_until_signalled(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, with the cancellation a second signal causes raised as `StoppedAtOnce` (any
    other cancellation propagates as it is)."""
    try:
        return asyncio.run(main)
    except asyncio.CancelledError as exc:
        if exc.args != (SECOND_SIGNAL,):
            raise
        raise StoppedAtOnce(SECOND_SIGNAL) from exc
