"""A slot hold takes its slots in order, gives back exactly what it holds, and never inflates a
semaphore when its task is cancelled while it waits to take one back."""

from __future__ import annotations

import asyncio

import pytest

from turnledger.gateway.slot_hold import SlotHold


async def test_take_in_order_give_back_all_and_take_again() -> None:
    route, worker = asyncio.Semaphore(2), asyncio.Semaphore(1)
    hold = SlotHold([route, worker])
    await hold.take()
    assert (hold.held, route._value, worker._value) == (2, 1, 0)
    await hold.take()  # nothing more to take
    assert (hold.held, route._value, worker._value) == (2, 1, 0)
    hold.give_back()
    assert (hold.held, route._value, worker._value) == (0, 2, 1)
    hold.give_back()
    assert (route._value, worker._value) == (2, 1)


async def test_cancelled_while_waiting_for_a_slot_gives_back_only_what_it_holds() -> None:
    route, worker = asyncio.Semaphore(1), asyncio.Semaphore(1)
    await worker.acquire()  # another operation has the worker's only slot
    hold = SlotHold([route, worker])
    task = asyncio.create_task(hold.take())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert hold.held == 1 and route._value == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    hold.give_back()
    worker.release()
    assert (route._value, worker._value) == (1, 1)


async def test_a_slot_given_back_serves_another_task_meanwhile() -> None:
    slot = asyncio.Semaphore(1)
    first, second = SlotHold([slot]), SlotHold([slot])
    await first.take()
    waiting = asyncio.create_task(second.take())
    await asyncio.sleep(0)
    assert not waiting.done()
    first.give_back()
    await waiting
    retaking = asyncio.create_task(first.take())
    await asyncio.sleep(0)
    assert not retaking.done() and second.held == 1
    second.give_back()
    await retaking
    assert first.held == 1 and slot._value == 0
