"""Stopping a read at once on any of its signals, never inside an append (gateway/cancel_watch.py)."""

from __future__ import annotations

import asyncio

import pytest

from turnledger.gateway.cancel_watch import StopOnCancel


async def _read_until_stopped(stop: StopOnCancel, waiting: asyncio.Event) -> str:
    """A reader waiting on the network (here: an event nobody sets) until the watcher interrupts it."""
    try:
        await waiting.wait()
    except asyncio.CancelledError:
        if not stop.absorb():
            raise
        return "stopped"
    finally:
        stop.close()
    return "read"


@pytest.mark.parametrize("which", [0, 1])
async def test_any_signal_interrupts_a_reader_waiting_on_the_network(which: int) -> None:
    signals = (asyncio.Event(), asyncio.Event())
    ready: asyncio.Future[StopOnCancel] = asyncio.get_running_loop().create_future()

    async def reader() -> str:
        stop = StopOnCancel(*signals)
        ready.set_result(stop)
        return await _read_until_stopped(stop, asyncio.Event())

    task = asyncio.create_task(reader())
    stop = await ready
    await asyncio.sleep(0)
    assert not stop.fired
    signals[which].set()
    assert await asyncio.wait_for(task, 5) == "stopped"
    assert stop.fired and task.cancelling() == 0  # the cancellation was the watcher's, and is undone


async def test_a_reader_inside_an_append_finishes_it_and_stops_after() -> None:
    signal = asyncio.Event()
    appended: list[str] = []

    async def reader() -> list[str]:
        stop = StopOnCancel(signal)
        try:
            for chunk in ("a", "b", "c"):
                with stop.feeding():
                    if chunk == "b":
                        signal.set()
                        await asyncio.sleep(0.01)  # the watcher runs here: it must not cut the append
                    appended.append(chunk)
                if stop.fired:
                    break
        finally:
            stop.close()
        return appended

    assert await asyncio.wait_for(reader(), 5) == ["a", "b"]


async def test_a_cancel_from_outside_is_not_absorbed() -> None:
    started = asyncio.Event()

    async def reader() -> str:
        stop = StopOnCancel(asyncio.Event())
        started.set()
        return await _read_until_stopped(stop, asyncio.Event())

    task = asyncio.create_task(reader())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_closing_stops_the_watcher_and_a_later_signal_does_nothing() -> None:
    signal = asyncio.Event()
    stop = StopOnCancel(signal)
    await asyncio.sleep(0)
    stop.close()
    await asyncio.sleep(0)
    signal.set()
    await asyncio.sleep(0.01)
    assert not stop.fired and asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_once_its_interruption_is_absorbed_a_later_cancel_from_outside_is_not() -> None:
    """After the watcher's interruption ended the read, the reader goes on (it appends the stream's end);
    a cancel from outside then (its partition moved, the worker closes) must stop it."""
    signal = asyncio.Event()
    absorbed = asyncio.Event()

    async def reader() -> None:
        stop = StopOnCancel(signal)
        try:
            for _ in range(2):
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    if not stop.absorb():
                        raise
                    absorbed.set()
        finally:
            stop.close()

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)
    signal.set()
    await asyncio.wait_for(absorbed.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
