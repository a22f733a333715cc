"""Exactly-once of the partition processor on the real broker: clean run, crash, zombie, poison, SIGTERM.

The fold is a per-key counter: the n-th input `v` of key `k` yields the output `k:n:v` and stores `n`.
Any lost, duplicated or reordered processing therefore shows up as a missing, duplicated or wrong
output, and the expected outputs and states follow from the inputs alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from turnledger.processors.app import ProcessorApp
from turnledger.processors.changelog import POSITION_KEY
from turnledger.processors.config import ProcessorConfig, ProcessorExit
from turnledger.processors.contract import StateStore
from turnledger.processors.partition import PartitionProcessor
from turnledger.processors.topics import ensure_topics
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
POISON = b"POISON"


class CounterFold:
    """The deterministic test fold; values starting with POISON make it raise."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
        outputs = []
        for record in records:
            if record.value is None or record.value.startswith(POISON):
                raise ValueError(f"poison at offset {record.offset}")
            key = (record.key or b"").decode()
            count = int(store.get(key) or b"0") + 1
            store.put(key, str(count).encode())
            outputs.append(
                OutputRecord(self.topics.committed, record.key, f"{key}:{count}:".encode() + record.value)
            )
        return outputs

    def on_poison(self, record: SourceRecord, exc: Exception) -> list[OutputRecord]:
        key = (record.key or b"").decode()
        value = f"REJECTED:{key}:{record.offset}:{type(exc).__name__}".encode()
        return [OutputRecord(self.topics.rejections, record.key, value)]


def counter_fold(topics: Topics, partition: int) -> CounterFold:
    return CounterFold(topics)


PIECES_ENV = "TURNLEDGER_TEST_PIECES_FILE"


class PieceNotingFold(CounterFold):
    """CounterFold taking its batch in pieces as they are fetched, the size of each written to the file
    PIECES_ENV names: a test sees what the open batch holds without sleeping on it."""

    def open_batch(self, store: StateStore) -> _NotedBatch:
        return _NotedBatch(self, store)


class _NotedBatch:
    def __init__(self, counter: CounterFold, store: StateStore) -> None:
        self._counter, self._store, self._records = counter, store, list[SourceRecord]()

    def fold(self, records: Sequence[SourceRecord]) -> None:
        self._records.extend(records)
        with open(os.environ[PIECES_ENV], "a") as pieces:
            pieces.write(f"{len(records)}\n")

    def close(self) -> list[OutputRecord]:
        return self._counter.process_batch(self._records, self._store)


def piece_noting_fold(topics: Topics, partition: int) -> PieceNotingFold:
    return PieceNotingFold(topics)


@dataclass(frozen=True)
class Sent:
    partition: int
    offset: int
    key: str
    value: bytes


def expected_outputs(inputs: Sequence[Sent]) -> Counter[bytes]:
    counts: Counter[str] = Counter()
    out: Counter[bytes] = Counter()
    for rec in sorted(inputs, key=lambda s: (s.partition, s.offset)):
        if rec.value.startswith(POISON):
            continue
        counts[rec.key] += 1
        out[f"{rec.key}:{counts[rec.key]}:".encode() + rec.value] += 1
    return out


def expected_state(inputs: Sequence[Sent], partition: int, before_offset: int | None) -> dict[str, str]:
    counts = Counter(
        s.key
        for s in inputs
        if s.partition == partition and s.offset < (before_offset or 0) and not s.value.startswith(POISON)
    )
    return {key: str(n) for key, n in counts.items()}


async def produce(bootstrap: str, topic: str, records: Sequence[tuple[str, bytes]]) -> list[Sent]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key.encode()) for key, value in records]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return [Sent(m.partition, m.offset, k, v) for m, (k, v) in zip(metas, records, strict=True)]


async def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of every partition visible to read_committed, up to the LSO."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or await _partitions(bootstrap, topic))
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[bytes | None, bytes | None]] = []
        for tp in tps:
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                out.extend((m.key, m.value) for m in batch.get(tp, []) if m.offset < ends[tp])
        return out
    finally:
        await consumer.stop()


async def settled(bootstrap: str, topic: str, within_s: float = 60.0) -> None:
    """Wait until no transaction is open on any partition of `topic` (its LSO is its high watermark).

    A transaction's offsets and its output records become visible by markers the coordinator writes to
    each partition, not at once: a test that saw the input's offsets committed may read an output
    partition whose marker is still on its way and miss the last transaction's records (seen under load:
    a conversation's last outputs missing). Call it once the processors have stopped."""
    committed = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await committed.start()
    await uncommitted.start()
    try:
        parts = sorted(committed.partitions_for_topic(topic) or await _partitions(bootstrap, topic))
        tps = [TopicPartition(topic, p) for p in parts]
        deadline = time.monotonic() + within_s
        while True:
            stable, high = await committed.end_offsets(tps), await uncommitted.end_offsets(tps)
            open_ = sorted(tp.partition for tp in tps if stable[tp] < high[tp])
            if not open_:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: partitions {open_} still hold an open transaction")
            await asyncio.sleep(0.1)
    finally:
        await committed.stop()
        await uncommitted.stop()


async def _partitions(bootstrap: str, topic: str) -> set[int]:
    from turnledger.kafka.clients import describe_partitions

    return set(await describe_partitions(bootstrap, topic))


async def committed_offsets(
    bootstrap: str, group: str, topic: str, partitions: Sequence[int]
) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        return {tp.partition: (await consumer.committed(tp)) or 0 for tp in tps}
    finally:
        await consumer.stop()


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.1)


def end_offsets(inputs: Sequence[Sent]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for s in inputs:
        ends[s.partition] = max(ends.get(s.partition, 0), s.offset + 1)
    return ends


async def wait_all_committed(
    bootstrap: str, group: str, topics: Topics, inputs: Sequence[Sent], timeout_s: float
) -> None:
    ends = end_offsets(inputs)

    async def done() -> bool:
        offsets = await committed_offsets(bootstrap, group, topics.ingress, sorted(ends))
        return all(offsets[p] >= end for p, end in ends.items())

    await wait_for(done, timeout_s, f"group {group} to commit {ends}")


async def assert_exactly_once(bootstrap: str, topics: Topics, inputs: Sequence[Sent]) -> None:
    outputs = Counter(v for _, v in await read_committed(bootstrap, topics.committed))
    expected = expected_outputs(inputs)
    assert sum(expected.values()) == len(expected)
    duplicates = {v: n for v, n in outputs.items() if n > 1}
    assert not duplicates, f"duplicated outputs: {list(duplicates.items())[:5]}"
    assert not expected - outputs, f"missing outputs: {list(expected - outputs)[:5]}"
    assert not outputs - expected, f"unexpected outputs: {list(outputs - expected)[:5]}"


async def changelog_state(bootstrap: str, topics: Topics) -> dict[str, str]:
    state: dict[str, str] = {}
    for key, value in await read_committed(bootstrap, topics.changelog):
        assert key is not None
        if key == POSITION_KEY:
            continue
        if value is None:
            state.pop(key.decode(), None)
        else:
            state[key.decode()] = value.decode()
    return state


def workload(n: int, keys: int, tag: str = "v") -> list[tuple[str, bytes]]:
    return [(f"conv-{i % keys}", f"{tag}{i}".encode()) for i in range(n)]


@pytest.fixture
async def topics(kafka_bootstrap: str, topic_name: Callable[[str], str]) -> Topics:
    return Topics(prefix=topic_name("") + ".")


class Child:
    """A subprocess (by default a processor, see `_processor_child`), logging to a file for post-mortems."""

    def __init__(
        self, args: list[str], log: Path, module: str = "tests.integration._processor_child"
    ) -> None:
        self.log = log
        self._fh = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def own_lines(self, last: int = 40, width: int = 400) -> str:
        """The child's last `last` lines logged by turnledger itself (aiokafka's connection noise left
        out), each cut to `width`, for a post-mortem of a wait that timed out."""
        lines = [line[:width] for line in self.output().splitlines() if " turnledger." in line[:80]]
        return "\n".join(lines[-last:]) or "(no turnledger lines)"

    async def wait(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"child did not exit within {timeout_s}s:\n{self.output()[-3000:]}")
            await asyncio.sleep(0.05)
        self._fh.close()
        return self.proc.returncode

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._fh.close()


def app_args(bootstrap: str, topics: Topics, app_id: str, partitions: str, **extra: object) -> list[str]:
    args = [
        "app",
        "--bootstrap",
        bootstrap,
        "--prefix",
        topics.prefix,
        "--app-id",
        app_id,
        "--partitions",
        partitions,
    ]
    for name, value in extra.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


async def wait_ready(
    directory: Path, partitions: Sequence[int], child: Child, timeout_s: float = 30
) -> dict[int, dict]:
    async def ready() -> bool:
        if child.proc.poll() is not None:
            raise AssertionError(f"child exited early ({child.proc.returncode}):\n{child.output()[-3000:]}")
        return all((directory / f"ready-{p}.json").exists() for p in partitions)

    await wait_for(ready, timeout_s, "the child to restore its state")
    docs = {}
    for p in partitions:
        path = directory / f"ready-{p}.json"
        docs[p] = json.loads(path.read_text())
        path.unlink()
    return docs


# --------------------------------------------------------------------------------------------- tests


async def test_clean_run_every_output_exactly_once(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=3)
    inputs = await produce(kafka_bootstrap, topics.ingress, workload(1500, keys=30))
    app_id = f"{topics.prefix}app"
    config = ProcessorConfig(
        bootstrap=kafka_bootstrap,
        app_id=app_id,
        topics=topics,
        batch_max_records=200,
        state_dir=tmp_path / "state",
    )
    app = ProcessorApp(config, lambda p: counter_fold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_all_committed(kafka_bootstrap, app_id, topics, inputs, timeout_s=30)
    finally:
        app.stop()
    assert await asyncio.wait_for(task, 15) == dict.fromkeys((0, 1, 2), ProcessorExit.STOPPED)

    await assert_exactly_once(kafka_bootstrap, topics, inputs)
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in inputs).items()
    }
    metrics = [proc.metrics for proc in app.processors.values()]
    assert sum(m.records_in for m in metrics) == 1500
    assert sum(m.outputs_out for m in metrics) == 1500
    assert all(m.batches >= 1 and m.aborted_batches == 0 and m.poison_records == 0 for m in metrics)
    assert max(m.batches for m in metrics) <= 1500  # records are batched, not one transaction each


@pytest.mark.slow
async def test_sigkill_mid_transaction_and_restart(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    inputs = await produce(kafka_bootstrap, topics.ingress, workload(3000, keys=25))
    app_id = f"{topics.prefix}app"
    ready_dir = tmp_path / "ready"
    ready_dir.mkdir()
    common = {"state_dir": tmp_path / "state", "dump_ready": ready_dir, "batch_max_records": 100}

    # 1. die inside the 3rd commit: that batch's records are on the broker but never committed
    child = Child(
        app_args(kafka_bootstrap, topics, app_id, "0,1", kill_in_commit=3, **common), tmp_path / "c1.log"
    )
    try:
        assert await child.wait(30) == -signal.SIGKILL, child.output()[-3000:]
    finally:
        child.kill()
    assert "SIGKILL inside commit #3" in child.output()
    for ready in ready_dir.iterdir():
        ready.unlink()

    # 2. restart, SIGKILL from outside while it is busy
    child = Child(app_args(kafka_bootstrap, topics, app_id, "0,1", **common), tmp_path / "c2.log")
    try:
        docs = await wait_ready(ready_dir, [0, 1], child)
        for p, doc in docs.items():
            assert doc["state"] == expected_state(inputs, p, doc["committed_offset"])
        assert any(doc["committed_offset"] for doc in docs.values())

        async def some_progress() -> bool:
            offsets = await committed_offsets(kafka_bootstrap, app_id, topics.ingress, [0, 1])
            return sum(offsets.values()) > sum((d["committed_offset"] or 0) for d in docs.values())

        await wait_for(some_progress, 30, "progress after restart")
        child.signal(signal.SIGKILL)
        assert await child.wait(10) == -signal.SIGKILL
    finally:
        child.kill()

    # 3. restart again and run to the end
    child = Child(app_args(kafka_bootstrap, topics, app_id, "0,1", **common), tmp_path / "c3.log")
    try:
        docs = await wait_ready(ready_dir, [0, 1], child)
        for p, doc in docs.items():
            assert doc["state"] == expected_state(inputs, p, doc["committed_offset"])
        await wait_all_committed(kafka_bootstrap, app_id, topics, inputs, timeout_s=60)
        child.signal(signal.SIGTERM)
        assert await child.wait(20) == 0, child.output()[-3000:]
    finally:
        child.kill()

    await assert_exactly_once(kafka_bootstrap, topics, inputs)
    assert await changelog_state(kafka_bootstrap, topics) == {
        k: str(n) for k, n in Counter(s.key for s in inputs).items()
    }


@pytest.mark.slow
async def test_second_processor_fences_the_first(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    first_wave = await produce(kafka_bootstrap, topics.ingress, workload(400, keys=10, tag="a"))
    app_id = f"{topics.prefix}app"
    dirs = {name: tmp_path / name for name in ("a", "b")}
    for d in dirs.values():
        d.mkdir()
    zombie = Child(
        app_args(kafka_bootstrap, topics, app_id, "0", batch_max_records=20, dump_ready=dirs["a"]),
        tmp_path / "a.log",
    )
    successor: Child | None = None
    try:
        await wait_ready(dirs["a"], [0], zombie)

        async def first_commits() -> bool:
            return (await committed_offsets(kafka_bootstrap, app_id, topics.ingress, [0]))[0] >= 40

        await wait_for(first_commits, 30, "the first processor to commit")
        successor = Child(
            app_args(kafka_bootstrap, topics, app_id, "0", batch_max_records=20, dump_ready=dirs["b"]),
            tmp_path / "b.log",
        )
        doc = (await wait_ready(dirs["b"], [0], successor))[0]
        assert doc["state"] == expected_state(first_wave, 0, doc["committed_offset"])
        # the zombie may be idle: new input makes it try to write, which is when it learns it was fenced
        second_wave = await produce(kafka_bootstrap, topics.ingress, workload(200, keys=10, tag="b"))
        assert await zombie.wait(30) == 3, zombie.output()[-3000:]
        assert "was fenced" in zombie.output()
        inputs = first_wave + second_wave
        await wait_all_committed(kafka_bootstrap, app_id, topics, inputs, timeout_s=30)
        successor.signal(signal.SIGTERM)
        assert await successor.wait(20) == 0, successor.output()[-3000:]
    finally:
        zombie.kill()
        if successor is not None:
            successor.kill()
    await assert_exactly_once(kafka_bootstrap, topics, inputs)


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "one-at-a-time"])
async def test_failed_transaction_rolls_back_state_and_position(
    kafka_bootstrap: str, topics: Topics, pipelined: bool
) -> None:
    """The 3rd commit fails after its records reached the broker: the runtime aborts, drops the batch's
    state writes, seeks back and folds the batch again. A leaked write would double the counts.
    Pipelined, the 4th batch was already folded on top of the 3rd's uncommitted writes when that
    commit failed: its fold is thrown away too and both are folded again."""
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    inputs = await produce(kafka_bootstrap, topics.ingress, workload(300, keys=6))
    app_id = f"{topics.prefix}app"
    config = ProcessorConfig(
        bootstrap=kafka_bootstrap,
        app_id=app_id,
        topics=topics,
        batch_max_records=50,
        retry_backoff_ms=10,
        pipelined_commits=pipelined,
    )
    folded: list[int] = []

    def inject_failure(processor: PartitionProcessor) -> None:
        producer = processor._producer
        assert producer is not None
        commit = producer.commit_transaction
        calls = [0]

        async def flaky_commit() -> None:
            calls[0] += 1
            if calls[0] == 3:
                await producer.flush()
                raise KafkaError("injected commit failure")
            await commit()

        producer.commit_transaction = flaky_commit  # type: ignore[method-assign]

    def counting_fold(p: int):  # type: ignore[no-untyped-def]
        fold = counter_fold(topics, p)
        process = fold.process_batch

        def counted(records, store):  # type: ignore[no-untyped-def]
            folded.append(len(records))
            return process(records, store)

        fold.process_batch = counted  # type: ignore[method-assign]
        return fold

    app = ProcessorApp(config, counting_fold, on_ready=inject_failure)
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_all_committed(kafka_bootstrap, app_id, topics, inputs, timeout_s=30)
    finally:
        app.stop()
    assert await asyncio.wait_for(task, 15) == {0: ProcessorExit.STOPPED}
    metrics = app.processors[0].metrics
    assert (metrics.aborted_batches, metrics.records_in) == (1, 300)
    # folded again: the failed batch, and pipelined also the one folded on top of it
    refolded = sum(folded) - 300
    assert refolded == (sum(folded[2:4]) if pipelined else folded[2]), folded
    await assert_exactly_once(kafka_bootstrap, topics, inputs)
    assert dict(app.processors[0].store.items()) == {  # type: ignore[attr-defined]
        k: str(n).encode() for k, n in Counter(s.key for s in inputs).items()
    }


async def test_poison_record_is_rejected_and_processing_continues(
    kafka_bootstrap: str, topics: Topics
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    records = workload(60, keys=4)
    records[25] = ("conv-1", POISON + b"-25")
    inputs = await produce(kafka_bootstrap, topics.ingress, records)
    app_id = f"{topics.prefix}app"
    config = ProcessorConfig(bootstrap=kafka_bootstrap, app_id=app_id, topics=topics, batch_max_records=50)
    app = ProcessorApp(config, lambda p: counter_fold(topics, p))
    task = asyncio.create_task(app.run(handle_signals=False))
    try:
        await wait_all_committed(kafka_bootstrap, app_id, topics, inputs, timeout_s=30)
        assert not task.done()
        more = await produce(kafka_bootstrap, topics.ingress, workload(20, keys=4, tag="after"))
        await wait_all_committed(kafka_bootstrap, app_id, topics, inputs + more, timeout_s=30)
    finally:
        app.stop()
    assert await asyncio.wait_for(task, 15) == {0: ProcessorExit.STOPPED}

    poison = inputs[25]
    rejections = [v for _, v in await read_committed(kafka_bootstrap, topics.rejections)]
    assert rejections == [f"REJECTED:conv-1:{poison.offset}:ValueError".encode()]
    await assert_exactly_once(kafka_bootstrap, topics, inputs + more)
    assert app.processors[0].metrics.poison_records == 1


@pytest.mark.slow
async def test_sigterm_commits_the_open_batch(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topics(kafka_bootstrap, topics, partitions=1)
    app_id = f"{topics.prefix}app"
    pieces = tmp_path / "pieces"
    monkeypatch.setenv(PIECES_ENV, str(pieces))
    cli_args = [
        "cli",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        topics.prefix,
        "--partitions",
        "0",
        "--app-id",
        app_id,
        "--batch-max-ms",
        "60000",
        "--batch-max-records",
        "100000",
        "--no-group-commit",  # with group commit the batch would close at once: no commit is in flight
        "--fold",
        "tests.integration.test_processor_eos:piece_noting_fold",
    ]
    child = Child(cli_args, tmp_path / "cli.log")
    try:

        async def resumed() -> bool:
            assert child.proc.poll() is None, child.output()[-3000:]
            return "resuming" in child.output()

        await wait_for(resumed, 30, "the CLI processor to start")
        inputs = await produce(kafka_bootstrap, topics.ingress, workload(300, keys=7))

        async def in_the_open_batch() -> bool:
            return pieces.exists() and sum(map(int, pieces.read_text().split())) >= len(inputs)

        await wait_for(in_the_open_batch, 60, "the records in the open batch, which has 60 s left")
        assert await read_committed(kafka_bootstrap, topics.committed) == []
        child.signal(signal.SIGTERM)
        assert await child.wait(20) == 0, child.output()[-3000:]
    finally:
        child.kill()
    assert (await committed_offsets(kafka_bootstrap, app_id, topics.ingress, [0]))[0] == 300
    await assert_exactly_once(kafka_bootstrap, topics, inputs)
