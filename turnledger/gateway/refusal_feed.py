"""A worker's view of `turnledger.rejections`: the fold's refusals of events of its conversations.

An event the fold refuses (a ReplayStarted after another worker took the attempt, an
AttemptTerminated from a worker whose lease is gone, a StreamEnded of an old generation) is
answered by a Rejected on the rejections topic, never by a decision on the manifests topic. A
worker that read only the manifests would wait for such an answer until its timeout, and then
give the operation up. So every worker also follows the rejections:

- every partition, without a consumer group: which partition a rejection lands on follows its
  conversation, and a worker's share of the manifests is dealt by its own group;
- from where each partition ended when the worker started (`positioned` is set once they are
  all known, before the worker appends anything), since only the answers to events it appends
  from then on matter to it;
- only records keyed by a conversation the board follows are decoded and handed to the board,
  which keeps the rejections of operations it follows (`DecisionBoard.refusal`).

Every worker reads the whole topic; rejections are the exception in a healthy ledger, and the
records it does not follow cost a key comparison each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

from aiokafka import AIOKafkaConsumer

from turnledger.codec import CodecError
from turnledger.gateway.board import DecisionBoard
from turnledger.kafka.clients import (
    close_client,
    kafka_outage,
    read_committed_consumer,
    start_topic_reader,
    step_until_stopped,
)
from turnledger.kafka.reading import wait_for_partitions
from turnledger.kafka.tail import decode_record
from turnledger.model.events import Rejected
from turnledger.retry import Backoff, StopRequested, ride_out

log = logging.getLogger(__name__)

Deliver = Callable[[list[Rejected]], Awaitable[None]]


class RefusalFeed:
    def __init__(
        self,
        board: DecisionBoard,
        deliver: Deliver,
        bootstrap: str,
        topic: str,
        *,
        stop: asyncio.Event,
        outage: Backoff,
        client_id: str,
        fetch_ms: int = 200,
    ) -> None:
        self.board, self.deliver = board, deliver
        self.bootstrap, self.topic = bootstrap, topic
        self.stop, self.outage = stop, outage
        self.client_id, self.fetch_ms = client_id, fetch_ms
        self.positioned = asyncio.Event()
        """Set once every partition's starting offset is fixed: rejections from then on are seen."""
        self.delivered = 0

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator[bool]:
        """Follow the topic (a task) for the duration of the block, entered once every partition is
        positioned: True, or False when the feed stopped first (`stop` set, or an error, logged)."""
        task = asyncio.create_task(self.run(), name=f"{self.client_id}-feed")
        task.add_done_callback(_log_failure)
        ready = asyncio.create_task(self.positioned.wait())
        try:
            await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
            yield self.positioned.is_set() and not task.done()
        finally:
            ready.cancel()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def run(self) -> None:
        consumer: AIOKafkaConsumer | None = None
        try:
            consumer = await start_topic_reader(
                lambda: read_committed_consumer(
                    self.bootstrap, client_id=self.client_id, fetch_max_wait_ms=self.fetch_ms
                ),
                bootstrap=self.bootstrap,
                topic=self.topic,
                backoff=self.outage,
                stop=self.stop,
            )
            await ride_out(
                partial(self._position, consumer),
                waiting_for=f"Kafka at {self.bootstrap} to position on the ends of {self.topic!r}",
                classify=kafka_outage(self.bootstrap, f"position on the ends of {self.topic!r}"),
                backoff=self.outage,
                stop=self.stop,
            )
            step = partial(self._step, consumer)
            await step_until_stopped(
                step, bootstrap=self.bootstrap, topic=self.topic, backoff=self.outage, stop=self.stop
            )
        except StopRequested:
            pass
        finally:
            if consumer is not None:
                await close_client(consumer)

    async def _position(self, consumer: AIOKafkaConsumer) -> None:
        partitions = list(await wait_for_partitions(consumer, self.bootstrap, self.topic))
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)  # resolves the end now, not at the first fetch
        self.positioned.set()

    async def _step(self, consumer: AIOKafkaConsumer) -> None:
        fetched = await consumer.getmany(timeout_ms=self.fetch_ms, max_records=2000)
        refusals: list[Rejected] = []
        for messages in fetched.values():
            for message in messages:
                if message.key is None or message.value is None:
                    continue
                if not self.board.follows(message.key.decode("utf-8", errors="replace")):
                    continue
                try:
                    record = decode_record(message.value)
                except CodecError as exc:
                    log.warning("%s: undecodable record at offset %s: %s", self.topic, message.offset, exc)
                    continue
                if isinstance(record, Rejected):
                    refusals.append(record)
        if refusals:
            self.delivered += len(refusals)
            await self.deliver(refusals)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "%s stopped: %r; waits for refused events run to their timeouts",
            task.get_name(),
            task.exception(),
        )
