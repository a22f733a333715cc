"""`run_tool_executor`'s wiring over fakes of its Kafka parts: a batch's tools run once, and only the
append of their results rides out an outage (the tools are never run again for it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from tests.unit.gateway.test_tool_executor import call
from turnledger.gateway import runner
from turnledger.model.base import Frozen
from turnledger.model.events import IngressEvent, TurnSubmitted
from turnledger.retry import Backoff
from turnledger.topology import Topics

QUICK = Backoff(initial_s=0.001, max_s=0.001, jitter=0)


class Client:
    """The executor's ingress producer: its first `failures` appends fail as a lost connection."""

    def __init__(self, failures: int) -> None:
        self.topic = Topics("p.").ingress
        self.failures, self.attempts, self.stopped = failures, 0, 0
        self.appended: list[IngressEvent] = []

    async def append(self, event: IngressEvent) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise KafkaConnectionError("broker away")
        self.appended.append(event)

    async def stop(self) -> None:
        self.stopped += 1


async def test_an_outage_while_appending_results_retries_the_append_not_the_tools(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(failures=2)
    read: list[dict[str, Any]] = []

    async def start_client(make: Callable[[], object], **kwargs: Any) -> Client:
        return client

    async def tail_topic(
        bootstrap: str,
        topic: str,
        on_batch: Callable[[list[Frozen]], Awaitable[None]],
        *,
        on_caught_up: Callable[[], Awaitable[None]],
        **kwargs: Any,
    ) -> None:
        read.append({"topic": topic, "group_id": kwargs["group_id"], "backoff": kwargs["backoff"]})
        await on_caught_up()
        await on_batch([call("a1", "lookup", "{}"), call("a2", "lookup", "{}")])

    runs: list[dict[str, Any]] = []

    def lookup(args: dict[str, Any]) -> str:
        runs.append(args)
        return "found"

    monkeypatch.setattr(runner, "start_client", start_client)
    monkeypatch.setattr(runner, "tail_topic", tail_topic)
    started, boxes = asyncio.Event(), []  # type: ignore[var-annotated]
    caplog.set_level(logging.WARNING, "turnledger.retry")
    await asyncio.wait_for(
        runner.run_tool_executor(
            "k:9092",
            stop=asyncio.Event(),
            prefix="p.",
            tools={"lookup": lookup},
            executor_box=boxes,
            outage=QUICK,
            started=started,
        ),
        timeout=30,
    )
    assert runs == [{}, {}] and (client.attempts, client.stopped) == (3, 1) and started.is_set()
    [turn] = client.appended
    assert isinstance(turn, TurnSubmitted) and turn.turn_id == "tr-a1+a2"
    assert read == [
        {"topic": "p.turnledger.tool-calls", "group_id": "p.turnledger-tool-executor", "backoff": QUICK}
    ]
    assert [boxes[0].calls_run, boxes[0].errors] == [2, 0]
    waits = [r.getMessage() for r in caplog.records]
    assert len(waits) == 2
    assert all(
        w.startswith("waiting for Kafka at k:9092 to append to 'p.turnledger.ingress' (attempt ")
        for w in waits
    )
