"""`kafka/tail.py` without a broker: which records reach `on_batch` (decoded, in order, the undecodable
ones logged and skipped), how the reader sets itself up with and without a group, when it calls itself
caught up, when it commits, how it rides out outages and stops, and that its consumer is always closed.

The consumer is a fake that records every call in one list, shared with the callbacks, so each test
pins the exact sequence: what was asked of Kafka, in which order, and where `on_batch` and
`on_caught_up` fell in it. The real `start_client` and `close_client` run over it (wrapped, to record
what they were given). The same reader against the real broker runs in the integration tests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError, KafkaConnectionError, KafkaTimeoutError
from pydantic import BaseModel

from turnledger.codec import CodecError, encode
from turnledger.errors import KafkaUnavailableError, MissingTopicError
from turnledger.kafka import clients, tail
from turnledger.kafka.clients import LEAVE_WITHIN_S
from turnledger.kafka.tail import _decoded, _follow, decode_record, tail_topic
from turnledger.model.base import Frozen
from turnledger.model.events import DispatchSent
from turnledger.retry import NO_WAIT, Backoff

BOOTSTRAP = "k1:9092,k2:9092"
TOPIC = "t.outputs"
READ = f"read {TOPIC!r}"
WAITING = f"Kafka at {BOOTSTRAP} to read {TOPIC!r}"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
QUICK = Backoff(initial_s=0.001, max_s=0.001, jitter=0)
SLOW = Backoff(initial_s=2, max_s=2, jitter=0)
"""A wait no test sits out: the stop event ends it at once (a reader that slept it out would fetch again)."""
NOT_AVRO = "missing the C3 01 single-object marker"


def sent(n: int) -> DispatchSent:
    return DispatchSent(
        conversation_id="conv-1",
        event_id=f"ev-{n}",
        occurred_at_ms=1_700_000_000_000 + n,
        operation_id="op-1",
        attempt_generation=n,
    )


R = [sent(n) for n in range(6)]


@dataclass(frozen=True)
class Message:
    """What the reader uses of aiokafka's `ConsumerRecord`."""

    offset: int
    value: bytes | None


def message(offset: int, value: Frozen | bytes | None) -> Message:
    return Message(offset, encode(value) if isinstance(value, Frozen) else value)


Fetch = dict[TopicPartition, list[Message]] | BaseException


class Consumer:
    """What `tail_topic` uses of an AIOKafkaConsumer, each call appended to `calls`.

    `fetches`: what each `getmany` does in turn (return those batches, or raise); once they have run
    out, `getmany` sets `halt` (the reader's stop event) and returns nothing. `position` is one past
    the last offset fetched of the partition (0 before any). `commits`: what each `commit` does in
    turn (raise, or None: succeed; succeed once they have run out)."""

    def __init__(
        self,
        calls: list[tuple[Any, ...]],
        halt: asyncio.Event,
        fetches: Sequence[Fetch],
        ends: dict[TopicPartition, int],
        commits: Sequence[BaseException | None],
    ) -> None:
        self.calls, self.halt = calls, halt
        self.fetches, self.ends, self.commits = list(fetches), ends, list(commits)
        self.positions: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        self.calls.append(("start",))

    async def stop(self) -> None:
        self.calls.append(("stop",))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("assign", partitions))

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.calls.append(("seek_to_beginning", partitions))

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.calls.append(("end_offsets", partitions))
        return dict(self.ends)

    def subscribe(self, topics: list[str]) -> None:
        self.calls.append(("subscribe", topics))

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Message]]:
        self.calls.append(("getmany", partitions, timeout_ms, max_records))
        if not self.fetches:
            self.halt.set()
            return {}
        fetch = self.fetches.pop(0)
        if isinstance(fetch, BaseException):
            raise fetch
        for tp, messages in fetch.items():
            if messages:
                self.positions[tp] = messages[-1].offset + 1
        return fetch

    async def commit(self) -> None:
        self.calls.append(("commit",))
        if self.commits:
            failure = self.commits.pop(0)
            if failure is not None:
                raise failure

    async def position(self, tp: TopicPartition) -> int:
        self.calls.append(("position", tp))
        return self.positions.get(tp, 0)


class Reader:
    """The patched seams of `tail.py` around one scripted consumer, and the callbacks, all recording."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.stop = asyncio.Event()
        self.consumer: Consumer | None = None
        self.built: list[tuple[str, str, dict[str, Any]]] = []
        """Which of `read_committed_consumer` and `group_member_consumer` built the consumer, and what it
        was given."""
        self.started: list[dict[str, Any]] = []
        """What `start_client` was given besides the factory."""
        self.looked_up: list[tuple[Consumer | None, str, str]] = []
        """What `wait_for_partitions` was given."""
        self.lookup: list[TopicPartition] | BaseException = [TP0, TP1]

    def script(
        self,
        *fetches: Fetch,
        ends: dict[TopicPartition, int] | None = None,
        commits: Sequence[BaseException | None] = (),
    ) -> Consumer:
        self.consumer = Consumer(self.calls, self.stop, fetches, ends or {}, commits)
        return self.consumer

    async def on_batch(self, records: list[Frozen]) -> None:
        self.calls.append(("on_batch", records))

    async def on_caught_up(self) -> None:
        self.calls.append(("on_caught_up",))

    async def run(self, **options: Any) -> None:
        await asyncio.wait_for(tail_topic(BOOTSTRAP, TOPIC, self.on_batch, stop=self.stop, **options), 30)


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> Reader:
    fake = Reader()

    def read_committed_consumer(bootstrap: str, **kwargs: Any) -> Consumer | None:
        fake.built.append(("read_committed_consumer", bootstrap, kwargs))
        return fake.consumer

    def group_member_consumer(bootstrap: str, **kwargs: Any) -> Consumer | None:
        fake.built.append(("group_member_consumer", bootstrap, kwargs))
        return fake.consumer

    async def start_client(make: Any, **kwargs: Any) -> Any:
        fake.started.append(kwargs)
        return await clients.start_client(make, **kwargs)

    async def wait_for_partitions(consumer: Consumer, bootstrap: str, topic: str) -> list[TopicPartition]:
        fake.looked_up.append((consumer, bootstrap, topic))
        if isinstance(fake.lookup, BaseException):
            raise fake.lookup
        return list(fake.lookup)

    async def close_client(client: Consumer, within_s: float | None = None) -> None:
        client.calls.append(("close", within_s))
        await clients.close_client(client, within_s)

    monkeypatch.setattr(tail, "read_committed_consumer", read_committed_consumer)
    monkeypatch.setattr(tail, "group_member_consumer", group_member_consumer)
    monkeypatch.setattr(tail, "start_client", start_client)
    monkeypatch.setattr(tail, "wait_for_partitions", wait_for_partitions)
    monkeypatch.setattr(tail, "close_client", close_client)
    return fake


def getmany(timeout_ms: int = 200, max_records: int = 2000) -> tuple[Any, ...]:
    return ("getmany", (), timeout_ms, max_records)


SET_UP = [  # without a group: every partition, from the beginning, its end noted
    ("start",),
    ("assign", [TP0, TP1]),
    ("seek_to_beginning", (TP0, TP1)),
    ("end_offsets", [TP0, TP1]),
]
CLOSED = [("close", None), ("stop",)]
LEFT = [("close", LEAVE_WITHIN_S), ("stop",)]


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]


# ------------------------------------------------------------------------------------ decoding


def test_a_record_decodes_to_its_model() -> None:
    record = decode_record(encode(R[1]))
    assert (type(record), record) == (DispatchSent, R[1])


class Loose(BaseModel):
    """A pydantic model that is no turnledger record (every shipped schema maps to a `Frozen`)."""


def test_a_decoded_value_that_is_not_a_frozen_model_is_a_codec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bytes] = []

    def decode(data: bytes) -> BaseModel:
        asked.append(data)
        return Loose()

    monkeypatch.setattr(tail, "decode", decode)
    with pytest.raises(CodecError) as raised:
        decode_record(b"\xc3\x01anything")
    assert (type(raised.value), str(raised.value), asked) == (
        CodecError,
        "decoded a Loose, which is not a turnledger record",
        [b"\xc3\x01anything"],
    )


def test_batches_decode_in_partition_then_offset_order_skipping_empty_and_undecodable_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A None value (a tombstone) is skipped silently and the partition's later records still come;
    bytes that do not decode are logged with their offset and skipped."""
    caplog.set_level(logging.DEBUG, "turnledger.kafka.tail")
    batches: dict[TopicPartition, list[object]] = {
        TP1: [message(5, R[3]), message(6, None), message(7, R[4])],
        TP0: [message(0, b"junk"), message(1, R[1]), message(2, None), message(3, R[2])],
    }
    assert _decoded(TOPIC, batches) == [R[3], R[4], R[1], R[2]]
    assert logged(caplog) == [
        ("turnledger.kafka.tail", logging.WARNING, f"{TOPIC}: undecodable record at offset 0: {NOT_AVRO}")
    ]


def test_a_batch_of_nothing_decodable_is_empty_and_a_record_of_another_kind_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "turnledger.kafka.tail")
    assert _decoded(TOPIC, {}) == []
    assert _decoded(TOPIC, {TP0: [message(4, None)]}) == []
    assert caplog.records == []
    monkeypatch.setattr(tail, "decode", lambda data: Loose())
    assert _decoded(TOPIC, {TP1: [message(9, b"\xc3\x01x")]}) == []
    assert logged(caplog) == [
        (
            "turnledger.kafka.tail",
            logging.WARNING,
            f"{TOPIC}: undecodable record at offset 9: decoded a Loose, which is not a turnledger record",
        )
    ]


# ------------------------------------------------------------------------------------ without a group


async def test_without_a_group_it_reads_every_partition_and_is_caught_up_once_every_end_is_reached(
    reader: Reader,
) -> None:
    """Caught up only when the last partition reaches its end (exactly at it), called once although
    more batches follow; positions asked of every partition after each fetch until then, never after."""
    reader.script(
        {TP0: [message(0, R[0]), message(1, R[1])]},
        {TP1: [message(0, R[2])]},  # TP1 at its end, TP0 not yet
        {TP0: [message(2, R[3])]},  # TP0 exactly at its end
        {TP0: [message(3, R[4])]},
        ends={TP0: 3, TP1: 1},
    )
    await reader.run(on_caught_up=reader.on_caught_up)
    positions = [("position", TP0), ("position", TP1)]
    assert reader.calls == [
        *SET_UP,
        getmany(),
        ("on_batch", [R[0], R[1]]),
        *positions,
        getmany(),
        ("on_batch", [R[2]]),
        *positions,
        getmany(),
        ("on_batch", [R[3]]),
        *positions,
        ("on_caught_up",),
        getmany(),
        ("on_batch", [R[4]]),
        getmany(),
        *CLOSED,
    ]
    assert reader.built == [
        ("read_committed_consumer", BOOTSTRAP, {"group_id": None, "client_id": "turnledger-reader"})
    ]
    assert reader.started == [
        {"bootstrap": BOOTSTRAP, "action": READ, "backoff": NO_WAIT, "stop": reader.stop}
    ]
    assert reader.looked_up == [(reader.consumer, BOOTSTRAP, TOPIC)]


async def test_a_topic_with_every_partition_empty_is_caught_up_before_the_first_fetch(reader: Reader) -> None:
    reader.script({TP1: [message(0, R[0])]}, {TP0: [message(0, R[1])]}, ends={TP0: 0, TP1: 0})
    await reader.run(on_caught_up=reader.on_caught_up)
    assert reader.calls == [
        *SET_UP,
        ("on_caught_up",),
        getmany(),
        ("on_batch", [R[0]]),
        getmany(),
        ("on_batch", [R[1]]),
        getmany(),
        *CLOSED,
    ]


async def test_one_empty_partition_does_not_make_the_reader_caught_up_by_itself(reader: Reader) -> None:
    reader.script({TP0: [message(0, R[0]), message(1, R[1])]}, ends={TP0: 2, TP1: 0})
    await reader.run(on_caught_up=reader.on_caught_up)
    assert reader.calls == [
        *SET_UP,
        getmany(),
        ("on_batch", [R[0], R[1]]),
        ("position", TP0),
        ("position", TP1),
        ("on_caught_up",),
        getmany(),
        *CLOSED,
    ]


async def test_a_position_past_the_end_is_caught_up_too(reader: Reader) -> None:
    """Records committed after the ends were read come in the same fetch: the position passes the end."""
    reader.script({TP0: [message(0, R[0]), message(1, R[1]), message(2, R[2])]}, ends={TP0: 2})
    await reader.run(on_caught_up=reader.on_caught_up)
    assert reader.calls == [
        *SET_UP,
        getmany(),
        ("on_batch", [R[0], R[1], R[2]]),
        ("position", TP0),
        ("on_caught_up",),
        getmany(),
        *CLOSED,
    ]


async def test_a_fetch_of_nothing_decodable_calls_no_handler_but_still_counts_towards_the_end(
    reader: Reader, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "turnledger.kafka.tail")
    reader.script(
        {},
        {TP0: [message(0, None), message(1, b"junk")]},
        {TP0: [message(2, R[0])]},
        ends={TP0: 2},
    )
    await reader.run(on_caught_up=reader.on_caught_up)
    assert reader.calls == [
        *SET_UP,
        getmany(),
        ("position", TP0),  # an empty fetch: nothing handled, not there yet
        getmany(),
        ("position", TP0),
        ("on_caught_up",),
        getmany(),
        ("on_batch", [R[0]]),
        getmany(),
        *CLOSED,
    ]
    assert logged(caplog) == [
        ("turnledger.kafka.tail", logging.WARNING, f"{TOPIC}: undecodable record at offset 1: {NOT_AVRO}")
    ]


@pytest.mark.parametrize("ends", [{TP0: 0, TP1: 0}, {TP0: 1, TP1: 0}], ids=["empty", "not-empty"])
async def test_without_on_caught_up_no_position_is_asked(
    reader: Reader, ends: dict[TopicPartition, int]
) -> None:
    reader.script({TP0: [message(0, R[0])]}, {}, ends=ends)
    await reader.run(on_caught_up=None)
    assert reader.calls == [*SET_UP, getmany(), ("on_batch", [R[0]]), getmany(), getmany(), *CLOSED]


async def test_the_client_id_poll_and_batch_size_are_the_caller_s(reader: Reader) -> None:
    reader.script({TP0: [message(0, R[0])]}, ends={TP0: 5})
    await reader.run(client_id="worker-7", poll_ms=50, max_records=7, backoff=QUICK)
    assert reader.calls == [
        *SET_UP,
        getmany(50, 7),
        ("on_batch", [R[0]]),
        getmany(50, 7),
        *CLOSED,
    ]
    assert reader.built == [
        ("read_committed_consumer", BOOTSTRAP, {"group_id": None, "client_id": "worker-7"})
    ]
    assert reader.started == [{"bootstrap": BOOTSTRAP, "action": READ, "backoff": QUICK, "stop": reader.stop}]


# ------------------------------------------------------------------------------------ with a group


async def test_with_a_group_it_subscribes_and_commits_after_each_fetch_that_brought_messages(
    reader: Reader,
) -> None:
    """No assignment, no seek, no ends: the group places the reader, whose consumer is a group member's
    (`group_member.py`: a refused session timeout is said as such) with its timing. A fetch of only empty
    values is committed too (its offsets are done with); an empty fetch is not."""
    reader.script(
        {TP0: [message(0, R[0])], TP1: [message(0, R[1])]},
        {},
        {TP1: [message(1, None)]},
        {TP0: [message(1, R[2])]},
    )
    await reader.run(
        group_id="g",
        client_id="c",
        poll_ms=50,
        max_records=7,
        session_timeout_ms=7000,
        heartbeat_interval_ms=900,
    )
    assert reader.calls == [
        ("start",),
        ("subscribe", [TOPIC]),
        getmany(50, 7),
        ("on_batch", [R[0], R[1]]),
        ("commit",),
        getmany(50, 7),
        getmany(50, 7),
        ("commit",),
        getmany(50, 7),
        ("on_batch", [R[2]]),
        ("commit",),
        getmany(50, 7),
        *LEFT,
    ]
    group = {"group_id": "g", "session_timeout_ms": 7000, "heartbeat_interval_ms": 900, "client_id": "c"}
    assert reader.built == [("group_member_consumer", BOOTSTRAP, group)]
    assert reader.looked_up == []


@pytest.mark.parametrize("first", [{}, {TP0: [message(0, R[0])]}], ids=["empty", "records"])
async def test_with_a_group_caught_up_means_the_first_fetch_returned(
    reader: Reader, first: dict[TopicPartition, list[Message]]
) -> None:
    """A group member knows no ends (its partitions come later, and change): it calls itself caught up
    once its first fetch has returned, whatever that held, and asks no positions."""
    reader.script(first, {TP1: [message(0, R[1])]})
    await reader.run(group_id="g", on_caught_up=reader.on_caught_up)
    handled = [("on_batch", [R[0]]), ("commit",)] if first else []
    assert reader.calls == [
        ("start",),
        ("subscribe", [TOPIC]),
        getmany(),
        *handled,
        ("on_caught_up",),
        getmany(),
        ("on_batch", [R[1]]),
        ("commit",),
        getmany(),
        *LEFT,
    ]


async def test_a_commit_that_fails_is_logged_and_the_reader_goes_on(
    reader: Reader, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "turnledger.kafka.tail")
    rebalanced = CommitFailedError("rebalanced")
    reader.script({TP0: [message(0, R[0])]}, {TP0: [message(1, R[1])]}, commits=[rebalanced])
    await reader.run(group_id="g")
    assert reader.calls == [
        ("start",),
        ("subscribe", [TOPIC]),
        getmany(),
        ("on_batch", [R[0]]),
        ("commit",),
        getmany(),
        ("on_batch", [R[1]]),
        ("commit",),
        getmany(),
        *LEFT,
    ]
    assert logged(caplog) == [
        (
            "turnledger.kafka.tail",
            logging.WARNING,
            f"{TOPIC}: committing the group's offsets failed ({rebalanced!r}); records may be redelivered",
        )
    ]


async def test_a_commit_error_that_is_not_kafka_s_ends_the_reader_which_still_leaves_its_group(
    reader: Reader,
) -> None:
    broken = RuntimeError("broken")
    reader.script({TP0: [message(0, R[0])]}, commits=[broken])
    with pytest.raises(RuntimeError) as raised:
        await reader.run(group_id="g")
    assert raised.value is broken
    assert reader.calls == [
        ("start",),
        ("subscribe", [TOPIC]),
        getmany(),
        ("on_batch", [R[0]]),
        ("commit",),
        *LEFT,
    ]


# ------------------------------------------------------------------------------------ outages and stops


async def test_an_outage_during_a_fetch_is_ridden_out_as_the_backoff_says(
    reader: Reader, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "turnledger.retry")
    gone = KafkaConnectionError("gone")
    reader.script(gone, {TP0: [message(0, R[0])]}, ends={TP0: 1})
    await reader.run(on_caught_up=reader.on_caught_up, backoff=QUICK)
    assert reader.calls == [
        *SET_UP,
        getmany(),
        getmany(),
        ("on_batch", [R[0]]),
        ("position", TP0),
        ("on_caught_up",),
        getmany(),
        *CLOSED,
    ]
    outage = KafkaUnavailableError(BOOTSTRAP, gone, action=READ)
    assert logged(caplog) == [
        (
            "turnledger.retry",
            logging.WARNING,
            f"waiting for {WAITING} (attempt 1, 0.0s so far, next in 0.0s): {outage}",
        ),
        ("turnledger.retry", logging.INFO, f"{WAITING}: back after 1 failed attempts"),
    ]


@pytest.mark.parametrize("group", [None, "g"])
async def test_by_default_the_first_outage_is_the_answer_and_the_consumer_is_closed(
    reader: Reader, group: str | None
) -> None:
    gone = KafkaConnectionError("gone")
    reader.script(gone, ends={TP0: 1})
    with pytest.raises(KafkaUnavailableError) as raised:
        await reader.run(group_id=group)
    assert (raised.value.bootstrap, raised.value.action, raised.value.cause) == (BOOTSTRAP, READ, gone)
    assert str(raised.value) == str(KafkaUnavailableError(BOOTSTRAP, gone, action=READ))
    first = SET_UP if group is None else [("start",), ("subscribe", [TOPIC])]
    assert reader.calls == [*first, getmany(), *(CLOSED if group is None else LEFT)]


@pytest.mark.parametrize("group", [None, "g"])
async def test_a_stop_while_waiting_out_an_outage_returns_quietly_and_closes_the_consumer(
    reader: Reader, group: str | None
) -> None:
    consumer = reader.script(ends={TP0: 1})

    async def fetch_then_stop(
        *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Message]]:
        reader.calls.append(("getmany", partitions, timeout_ms, max_records))
        if not reader.stop.is_set():
            reader.stop.set()  # the stop comes while the reader waits out this outage
            raise KafkaConnectionError("gone")
        return {}  # a reader that slept its wait out comes back: one fetch too many

    consumer.getmany = fetch_then_stop  # type: ignore[method-assign]
    await reader.run(group_id=group, on_caught_up=reader.on_caught_up, backoff=SLOW)
    first = SET_UP if group is None else [("start",), ("subscribe", [TOPIC])]
    assert reader.calls == [*first, getmany(), *(CLOSED if group is None else LEFT)]


async def test_a_stop_before_the_consumer_started_returns_without_building_one(reader: Reader) -> None:
    reader.script({TP0: [message(0, R[0])]})
    reader.stop.set()
    await reader.run(group_id="g", on_caught_up=reader.on_caught_up, backoff=SLOW)  # returns quietly
    assert (reader.calls, reader.built) == ([], [])
    assert reader.started == [{"bootstrap": BOOTSTRAP, "action": READ, "backoff": SLOW, "stop": reader.stop}]


async def test_a_stop_from_a_handler_ends_the_loop_after_that_fetch_is_done_with(reader: Reader) -> None:
    reader.script({TP0: [message(0, R[0])]}, {TP0: [message(1, R[1])]}, commits=[None])

    async def on_batch(records: list[Frozen]) -> None:
        reader.calls.append(("on_batch", records))
        reader.stop.set()

    reader.on_batch = on_batch  # type: ignore[method-assign]
    await reader.run(group_id="g")
    assert reader.calls == [
        ("start",),
        ("subscribe", [TOPIC]),
        getmany(),
        ("on_batch", [R[0]]),
        ("commit",),
        *LEFT,
    ]


async def test_the_loop_itself_ends_once_stop_is_set(reader: Reader) -> None:
    """`_follow` returns after the fetch that saw the stop, rather than leaving it to the next fetch's
    ride_out to raise `StopRequested` (which `tail_topic` would swallow all the same)."""
    consumer = reader.script({TP0: [message(0, R[0])]})
    await asyncio.wait_for(
        _follow(
            consumer,
            BOOTSTRAP,
            TOPIC,
            reader.on_batch,
            reader.stop,
            "g",
            None,
            7,
            50,
            NO_WAIT,
        ),
        30,
    )
    assert reader.calls == [
        ("subscribe", [TOPIC]),
        getmany(50, 7),
        ("on_batch", [R[0]]),
        ("commit",),
        getmany(50, 7),
    ]


async def test_a_handler_that_fails_ends_the_reader_and_the_consumer_is_closed(reader: Reader) -> None:
    broken = ValueError("bad record")

    async def on_batch(records: list[Frozen]) -> None:
        reader.calls.append(("on_batch", records))
        raise broken

    reader.on_batch = on_batch  # type: ignore[method-assign]
    reader.script({TP0: [message(0, R[0])]}, ends={TP0: 1})
    with pytest.raises(ValueError) as raised:
        await reader.run(on_caught_up=reader.on_caught_up)
    assert raised.value is broken
    assert reader.calls == [*SET_UP, getmany(), ("on_batch", [R[0]]), *CLOSED]


async def test_a_topic_that_does_not_appear_ends_the_reader_and_the_consumer_is_closed(
    reader: Reader,
) -> None:
    missing = MissingTopicError(TOPIC, BOOTSTRAP)
    reader.lookup = missing
    reader.script({TP0: [message(0, R[0])]}, ends={TP0: 1})
    with pytest.raises(MissingTopicError) as raised:
        await reader.run(on_caught_up=reader.on_caught_up, backoff=QUICK)
    assert raised.value is missing
    assert reader.calls == [("start",), *CLOSED]


async def test_an_outage_while_setting_up_is_ridden_out_from_the_partitions_on(reader: Reader) -> None:
    """The set-up (partitions, assignment, seek, ends) is retried whole under the caller's backoff:
    aiokafka's `end_offsets` raises KafkaTimeoutError when its request times out."""
    consumer = reader.script({TP0: [message(0, R[0])]}, ends={TP0: 1, TP1: 0})
    failures: list[BaseException] = [KafkaTimeoutError()]
    end_offsets = consumer.end_offsets

    async def flaky_end_offsets(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        reader.calls.append(("end_offsets", partitions))
        if failures:
            raise failures.pop(0)
        reader.calls.pop()
        return await end_offsets(partitions)

    consumer.end_offsets = flaky_end_offsets  # type: ignore[method-assign]
    await reader.run(on_caught_up=reader.on_caught_up, backoff=QUICK)
    assert reader.calls == [
        *SET_UP,
        *SET_UP[1:],
        getmany(),
        ("on_batch", [R[0]]),
        ("position", TP0),
        ("position", TP1),
        ("on_caught_up",),
        getmany(),
        *CLOSED,
    ]
    assert len(reader.looked_up) == 2


async def test_an_outage_while_setting_up_without_a_wait_is_kafka_unavailable(reader: Reader) -> None:
    consumer = reader.script(ends={TP0: 1})
    timed_out = KafkaTimeoutError()

    async def end_offsets(partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        raise timed_out

    consumer.end_offsets = end_offsets  # type: ignore[method-assign]
    with pytest.raises(KafkaUnavailableError) as raised:
        await reader.run(on_caught_up=reader.on_caught_up)
    assert (raised.value.action, raised.value.cause, raised.value.bootstrap) == (READ, timed_out, BOOTSTRAP)
    assert reader.calls == [*SET_UP[:3], *CLOSED]


async def test_an_outage_while_asking_the_positions_is_ridden_out(reader: Reader) -> None:
    consumer = reader.script({TP0: [message(0, R[0])]}, ends={TP0: 1, TP1: 0})
    failures: list[BaseException] = [KafkaConnectionError("gone")]
    position = consumer.position

    async def flaky_position(tp: TopicPartition) -> int:
        if failures:
            reader.calls.append(("position failed", tp))
            raise failures.pop(0)
        return await position(tp)

    consumer.position = flaky_position  # type: ignore[method-assign]
    await reader.run(on_caught_up=reader.on_caught_up, backoff=QUICK)
    assert reader.calls == [
        *SET_UP,
        getmany(),
        ("on_batch", [R[0]]),
        ("position failed", TP0),
        ("position", TP0),
        ("position", TP1),
        ("on_caught_up",),
        getmany(),
        *CLOSED,
    ]
