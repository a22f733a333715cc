"""Two-step shutdown of the long-running commands: the first SIGTERM/SIGINT sets `stop`, a second one
cancels the command's main task, which `run_until_signalled` reports as `StoppedAtOnce`. Real signals,
sent to this process while its loop has the handlers installed."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from turnledger.errors import TurnledgerError
from turnledger.shutdown import EXIT_STOPPED_AT_ONCE, StoppedAtOnce, run_until_signalled, stop_on_signals


async def _signalled(*sigs: signal.Signals) -> str:
    """Install the handlers, deliver `sigs` one by one (each after the loop handled the one before), then
    finish once `stop` is set: what a command whose shutdown takes no time does."""
    stop = asyncio.Event()
    stop_on_signals(stop, "turnledger test")
    for sig in sigs:
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(stop.wait(), timeout=30)
        await asyncio.sleep(0)
    return "finished" if stop.is_set() else "not stopped"


def test_a_first_signal_asks_the_command_to_finish(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "turnledger.shutdown")
    assert run_until_signalled(_signalled(signal.SIGTERM)) == "finished"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "received SIGTERM: turnledger test is stopping (a second signal stops it at once)")
    ]


def test_a_second_signal_stops_the_command_at_once(caplog: pytest.LogCaptureFixture) -> None:
    async def slow_to_stop() -> str:
        stop = asyncio.Event()
        stop_on_signals(stop, "turnledger test")
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(stop.wait(), timeout=30)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(30)  # a shutdown that would take long: the second signal ends it
        return "waited"

    caplog.set_level(logging.INFO, "turnledger.shutdown")
    with pytest.raises(StoppedAtOnce) as raised:
        run_until_signalled(slow_to_stop())
    assert str(raised.value) == "stopped at once by a second signal"
    assert isinstance(raised.value, TurnledgerError) and isinstance(
        raised.value.__cause__, asyncio.CancelledError
    )
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "received SIGINT: turnledger test is stopping (a second signal stops it at once)"),
        (logging.WARNING, "received SIGTERM again: turnledger test stops at once"),
    ]
    assert EXIT_STOPPED_AT_ONCE == 130


def test_without_signals_a_command_runs_to_its_end_and_the_handlers_go_with_its_loop() -> None:
    async def quick() -> int:
        stop_on_signals(asyncio.Event(), "turnledger test")
        return 7

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    assert run_until_signalled(quick()) == 7
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_cancellation_that_no_signal_made_is_not_reported_as_one() -> None:
    async def cancelled_otherwise() -> None:
        stop_on_signals(asyncio.Event(), "turnledger test")
        task = asyncio.current_task()
        assert task is not None
        task.cancel("something else")
        await asyncio.sleep(30)

    with pytest.raises(asyncio.CancelledError) as raised:
        run_until_signalled(cancelled_otherwise())
    assert raised.value.args == ("something else",)
