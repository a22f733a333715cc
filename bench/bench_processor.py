"""Partition-processor runtime vs a raw aiokafka transactional copy loop, same broker, same run.

    python -m bench.bench_processor [--records 40000] [--keys 1000] [--partitions 2] [--rate 2000]

Contenders, each in its own process with one transactional producer per partition (as
`turnledger process` runs), all with the runtime's batching policy (at most `--batch-max-records`,
`--batch-max-ms` after the first record) and the same producer settings:

* `raw`: consume → `producer.send()` the same bytes per record → offsets → commit (the reference
  loop the issue defines; `throughput_ratio` = runtime / raw);
* `raw_batched`: the same loop writing through the runtime's `BatchWriter` (one record batch per
  partition), so `throughput_ratio_vs_raw_batched` isolates what the runtime adds beyond the copy:
  the fold, the batch overlay, one changelog record per dirty key and the bookkeeping;
* `raw_codec` (used by bench_dispatch, whose records are turnledger events): the `raw` loop that
  also decodes every value into its validated event model and encodes it again, and produces
  those bytes. Any processor that validates its input with this codec does at least that much
  per event, so its throughput bounds what the runtime can reach with the codec stack.
* `raw_avro` (bench_dispatch too): the same, with fastavro alone (the Avro body read into a
  datum and written again, JSON fields converted, no pydantic model). Any processor of these
  schemas that uses fastavro, validating or not, does at least that much per event.
* `runtime`: `ProcessorApp` with the fold.

Throughput: a backlog of `--records` ingress records is produced first; each contender drains it
under its own group id, and records/s is counted from "all partitions ready" to "all committed".

Latency: fresh topics; records are appended at `--rate`/s for `--seconds`, each carrying its send
time; a read_committed consumer measures append → committed output (p50/p99).

The fold is the per-key counter fold of the EOS tests (state = a count per key, output =
`key:count:value`); `--fold module:factory` plugs in another one (called as factory(topics, p)).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from turnledger.codec import decode, default_codec, encode
from turnledger.processors.app import ProcessorApp
from turnledger.processors.batching import collect_batch
from turnledger.processors.config import ProcessorConfig
from turnledger.processors.contract import PartitionFold, StateStore
from turnledger.processors.multiproc import ProcessGroup
from turnledger.processors.topics import ensure_topics
from turnledger.processors.writer import BatchWriter
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics

log = logging.getLogger("bench.processor")

KINDS = ("raw", "raw_batched", "runtime")
RUNTIME_DEFAULTS = ProcessorConfig(bootstrap="")
"""The raw loop's producer is tuned exactly like the runtime's, so the ratio measures the runtime only."""


class CounterFold:
    """Per key: count += 1, output `key:count:value`. Same fold as tests/integration/test_processor_eos."""

    def __init__(self, topics: Topics) -> None:
        self.out = topics.committed

    def process_batch(self, records: Sequence[SourceRecord], store: StateStore) -> list[OutputRecord]:
        outputs = []
        for record in records:
            key = (record.key or b"").decode()
            count = int(store.get(key) or b"0") + 1
            store.put(key, str(count).encode())
            outputs.append(
                OutputRecord(self.out, record.key, f"{key}:{count}:".encode() + (record.value or b""))
            )
        return outputs


def counter_fold(topics: Topics, partition: int) -> PartitionFold:
    return CounterFold(topics)


@dataclass(frozen=True)
class Job:
    kind: str  # "runtime" | "raw" | "raw_batched" | "raw_codec" | "raw_avro"
    bootstrap: str
    topics_prefix: str
    raw_out: str
    partitions: int
    app_id: str
    batch_max_records: int
    batch_max_ms: int
    target: int  # records to process before reporting; 0 = run until stopped
    fold: str
    state_dir: str | None
    processes: int = 1  # runtime only: partitions dealt over this many child processes (`--processes`)
    group_commit: bool = False  # runtime only: ProcessorConfig.group_commit


def _load_fold(spec: str) -> Callable[[Topics, int], PartitionFold]:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def _recode(value: bytes) -> bytes:
    """Decode into the validated model and encode again: the codec work any validating processor does."""
    return encode(decode(value))


def _reavro(value: bytes) -> bytes:
    """Read the Avro body into a datum and write it again with fastavro alone: no model, no validation."""
    codec = default_codec()
    name, datum = codec.decode_datum(value)
    entry = codec.registry.reader(name)
    assert entry is not None
    return codec.encode_datum(entry, datum)


async def _raw_partition(
    job: Job, p: int, counter: list[int], ready: asyncio.Event, stop: asyncio.Event
) -> None:
    """The baseline: consume → produce the same bytes → offsets → commit, nothing else."""
    topics = Topics(job.topics_prefix)
    tp = TopicPartition(topics.ingress, p)
    producer = AIOKafkaProducer(
        bootstrap_servers=job.bootstrap,
        transactional_id=f"{job.app_id}-{tp.topic}-{p}",
        transaction_timeout_ms=RUNTIME_DEFAULTS.transaction_timeout_ms,
        retry_backoff_ms=RUNTIME_DEFAULTS.producer_retry_backoff_ms,
        max_batch_size=RUNTIME_DEFAULTS.producer_max_batch_bytes,
    )
    await producer.start()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=job.bootstrap,
        group_id=job.app_id,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    consumer.assign([tp])
    committed = await consumer.committed(tp)
    if committed is None:
        await consumer.seek_to_beginning(tp)
    else:
        consumer.seek(tp, committed)

    async def fetch(timeout_ms: int, max_records: int) -> list[Any]:
        got = await consumer.getmany(tp, timeout_ms=timeout_ms, max_records=max_records)
        return got.get(tp, [])

    writer = BatchWriter(producer) if job.kind == "raw_batched" else None
    recode = {"raw_codec": _recode, "raw_avro": _reavro}.get(job.kind)
    ready.set()
    try:
        while not stop.is_set():
            batch = await collect_batch(
                fetch, max_records=job.batch_max_records, max_ms=job.batch_max_ms, stop=stop
            )
            if not batch:
                continue
            await producer.begin_transaction()
            # The offset first, as the runtime does (processors/transaction.py says why).
            await producer.send_offsets_to_transaction({tp: batch[-1].offset + 1}, job.app_id)
            if recode is not None:
                futures = [await producer.send(job.raw_out, recode(m.value), key=m.key) for m in batch]
            elif writer is None:
                futures = [await producer.send(job.raw_out, m.value, key=m.key) for m in batch]
            else:
                futures = await writer.write((job.raw_out, None, m.key, m.value) for m in batch)
            await asyncio.gather(*futures)
            await producer.commit_transaction()
            counter[0] += len(batch)
    finally:
        await consumer.stop()
        await producer.stop()


TRACEMALLOC_ENV = "TURNLEDGER_BENCH_TRACEMALLOC"
"""A file name: the job traces allocations from its start and writes the 40 largest live allocation
sites there when it is done (a memory profile of the contender; slows it down several times).
`TURNLEDGER_BENCH_TRACEMALLOC_FRAMES=N` groups them by their N innermost frames instead of one line."""


def _write_allocation_sites(path: str, top: int = 40) -> None:
    import tracemalloc

    frames = tracemalloc.get_traceback_limit()
    stats = tracemalloc.take_snapshot().statistics("lineno" if frames == 1 else "traceback")
    total = sum(s.size for s in stats)
    lines = [f"traced {total / 2**20:.1f} MiB live in {len(stats)} sites"]
    for s in stats[:top]:
        lines.append(f"{s.size / 2**20:8.1f} MiB {s.count:9d} blocks  {s.traceback}")
        callers = s.traceback.format()[2::2][: frames - 1] if frames > 1 else []
        lines += [f"{'':30}{frame}" for frame in callers]
    Path(path).write_text("\n".join(lines) + "\n")


async def _run_job(job: Job, stop_flag: MpEvent, results: Any) -> None:
    trace_to = os.environ.get(TRACEMALLOC_ENV)
    if trace_to:
        import tracemalloc

        tracemalloc.start(int(os.environ.get(TRACEMALLOC_ENV + "_FRAMES", "1")))
    stop = asyncio.Event()
    counter = [0]
    topics = Topics(job.topics_prefix)
    if job.kind.startswith("raw"):
        readies = [asyncio.Event() for _ in range(job.partitions)]
        tasks = [
            asyncio.create_task(_raw_partition(job, p, counter, readies[p], stop))
            for p in range(job.partitions)
        ]

        def processed() -> int:
            return counter[0]

        async def all_ready() -> None:
            await asyncio.gather(*(r.wait() for r in readies))

        def request_stop() -> None:
            stop.set()
    else:
        factory = _load_fold(job.fold)
        config = ProcessorConfig(
            bootstrap=job.bootstrap,
            app_id=job.app_id,
            topics=topics,
            batch_max_records=job.batch_max_records,
            batch_max_ms=job.batch_max_ms,
            state_dir=None if job.state_dir is None else Path(job.state_dir),
            group_commit=job.group_commit,
        )
        if job.processes > 1:
            await _run_group(job, config, stop_flag, results)
            return
        app = ProcessorApp(config, lambda p: factory(topics, p))
        tasks = [asyncio.create_task(app.run(handle_signals=False))]

        def processed() -> int:
            return sum(proc.metrics.records_in for proc in app.processors.values())

        async def all_ready() -> None:
            while len(app.processors) < job.partitions:
                await asyncio.sleep(0.01)
            await asyncio.gather(*(proc.ready.wait() for proc in app.processors.values()))

        def request_stop() -> None:
            app.stop()

    await all_ready()
    started = time.monotonic()
    results.put(("ready", time.time()))
    finished = None
    while not stop_flag.is_set():
        if job.target and finished is None and processed() >= job.target:
            finished = time.monotonic()
            if trace_to:
                _write_allocation_sites(trace_to)
            results.put(("done", finished - started, processed()))
        for task in tasks:
            if task.done():
                task.result()
        await asyncio.sleep(0.005)
    request_stop()
    await asyncio.gather(*tasks)
    metrics: dict[str, Any] = {}
    if job.kind == "runtime":
        ms = [proc.metrics for proc in app.processors.values()]
        batches = sum(m.batches for m in ms)
        metrics = {
            "batches": batches,
            "changelog_out": sum(m.changelog_out for m in ms),
            "txn_commit_ms_mean": round(
                1000 * sum(m.txn_commit_seconds_total for m in ms) / max(batches, 1), 2
            ),
            "txn_commit_ms_max": round(1000 * max((m.txn_commit_seconds_max for m in ms), default=0.0), 1),
        }
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results.put(("stopped", processed(), rss_mb, metrics))


async def _run_group(job: Job, config: ProcessorConfig, stop_flag: MpEvent, results: Any) -> None:
    """The runtime as `turnledger process --processes N` runs it; progress = the group's committed offsets
    (polled every 100 ms: a finish is seen at most 0.1 s late, against drains of tens of seconds, and
    at 20 ms the group's parent, which runs this poll, used ~8% of a core during a drain on a 2-core
    box, taken from the children), as the children's metrics stay in the children."""
    group = ProcessGroup(config, job.fold, range(job.partitions), job.processes, log_level="WARNING")
    task = asyncio.create_task(group.run(handle_signals=False))
    await asyncio.wait([task, asyncio.create_task(group.ready.wait())], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=job.bootstrap, group_id=job.app_id, enable_auto_commit=False
    )
    await consumer.start()
    tps = [TopicPartition(config.topics.ingress, p) for p in range(job.partitions)]
    consumer.assign(tps)
    started = time.monotonic()
    results.put(("ready", time.time()))
    processed, finished = 0, None
    try:
        while not stop_flag.is_set() and not task.done():
            processed = sum([(await consumer.committed(tp)) or 0 for tp in tps])
            if job.target and finished is None and processed >= job.target:
                finished = time.monotonic()
                results.put(("done", finished - started, processed))
            await asyncio.sleep(0.1)
    finally:
        await consumer.stop()
    group.stop()
    await task
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    results.put(("stopped", processed, rss_mb, {"processes": len(group.groups)}))


def _child(job: Job, stop_flag: MpEvent, results: Any) -> None:
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(_run_job(job, stop_flag, results))


class Contender:
    def __init__(self, job: Job) -> None:
        ctx = mp.get_context("spawn")
        self.stop_flag = ctx.Event()
        self.results = ctx.Queue()
        # A daemonic process may not have children, which the runtime with --processes N needs.
        daemon = job.processes == 1
        self.proc = ctx.Process(target=_child, args=(job, self.stop_flag, self.results), daemon=daemon)
        self.proc.start()

    def expect(self, kind: str, timeout_s: float) -> tuple[Any, ...]:
        msg = self.results.get(timeout=timeout_s)
        if msg[0] != kind:
            raise RuntimeError(f"expected {kind!r} from the child, got {msg!r}")
        return tuple(msg[1:])

    def stop(self) -> tuple[Any, ...]:
        self.stop_flag.set()
        stopped = self.expect("stopped", 60)
        self.proc.join(30)
        return stopped


async def _produce_backlog(bootstrap: str, topic: str, n: int, keys: int, value_size: int) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=256 * 1024
    )
    await producer.start()
    pad = b"x" * value_size
    try:
        futures = [await producer.send(topic, pad, key=f"conv-{i % keys}".encode()) for i in range(n)]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _offered_load(
    bootstrap: str, topic: str, rate: int, seconds: float, keys: int, value_size: int
) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    pad = b"x" * value_size
    sent = 0
    start = time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate) - sent
            for _ in range(due):
                value = f"{time.time_ns()}|".encode() + pad
                await producer.send(topic, value, key=f"conv-{sent % keys}".encode())
                sent += 1
            await asyncio.sleep(0.002)
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def _latencies(
    bootstrap: str, topic: str, partitions: int, sent: asyncio.Future[int], timeout_s: float
) -> list[float]:
    """Latency (ms) of every committed output until as many arrived as were sent (or `timeout_s`)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    out: list[float] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not (sent.done() and len(out) >= sent.result()):
            batch = await consumer.getmany(*tps, timeout_ms=100)
            now = time.time_ns()
            for records in batch.values():
                for m in records:
                    value = m.value or b""
                    sent_ns = int(value.split(b"|", 1)[0].rsplit(b":", 1)[-1])
                    out.append((now - sent_ns) / 1e6)
    finally:
        await consumer.stop()
    return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _job(
    args: argparse.Namespace, kind: str, bootstrap: str, topics: Topics, raw_out: str, target: int
) -> Job:
    return Job(
        kind=kind,
        bootstrap=bootstrap,
        topics_prefix=topics.prefix,
        raw_out=raw_out,
        partitions=args.partitions,
        app_id=f"{topics.prefix}{kind}",
        batch_max_records=args.batch_max_records,
        batch_max_ms=args.batch_max_ms,
        target=target,
        fold=args.fold,
        state_dir=args.state_dir,
    )


async def _fresh_topics(bootstrap: str, partitions: int) -> tuple[Topics, str]:
    """The runtime's topics plus the raw loop's output topic, all new."""
    topics = Topics(f"bench-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(bootstrap, topics, partitions)
    raw_out = f"{topics.prefix}raw-out"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(raw_out, partitions, 1)])
    finally:
        await admin.close()
    return topics, raw_out


def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    report: dict[str, Any] = {"records": args.records, "keys": args.keys, "partitions": args.partitions}

    topics, raw_out = asyncio.run(_fresh_topics(bootstrap, args.partitions))
    asyncio.run(_produce_backlog(bootstrap, topics.ingress, args.records, args.keys, args.value_size))
    for kind in KINDS:
        contender = Contender(_job(args, kind, bootstrap, topics, raw_out, args.records))
        contender.expect("ready", 120)
        seconds, n = contender.expect("done", 600)
        _, rss_mb, metrics = contender.stop()
        report[f"{kind}_records_per_s"] = round(n / seconds)
        report[f"{kind}_rss_mb"] = round(rss_mb, 1)
        if metrics:
            report[f"{kind}_metrics"] = metrics
    report["throughput_ratio"] = round(report["runtime_records_per_s"] / report["raw_records_per_s"], 3)
    report["throughput_ratio_vs_raw_batched"] = round(
        report["runtime_records_per_s"] / report["raw_batched_records_per_s"], 3
    )

    for kind in KINDS:
        topics, raw_out = asyncio.run(_fresh_topics(bootstrap, args.partitions))
        contender = Contender(_job(args, kind, bootstrap, topics, raw_out, 0))
        contender.expect("ready", 120)
        out_topic = topics.committed if kind == "runtime" else raw_out

        async def measure(out_topic: str = out_topic, topics: Topics = topics) -> tuple[int, list[float]]:
            sent: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            reader = asyncio.create_task(
                _latencies(bootstrap, out_topic, args.partitions, sent, args.seconds + 30)
            )
            offered = _offered_load(
                bootstrap, topics.ingress, args.rate, args.seconds, args.keys, args.value_size
            )
            sent.set_result(await offered)
            return sent.result(), await reader

        sent, lat = asyncio.run(measure())
        contender.stop()
        report[f"{kind}_latency_ms"] = {
            "p50": round(statistics.median(lat), 1) if lat else None,
            "p99": round(_pct(lat, 0.99), 1),
            "n": len(lat),
            "sent": sent,
        }
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--batch-max-records", type=int, default=500)
    parser.add_argument("--batch-max-ms", type=int, default=100)
    parser.add_argument("--rate", type=int, default=2_000, help="records/s offered in the latency phase")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the latency phase")
    parser.add_argument("--fold", default="bench.bench_processor:counter_fold")
    parser.add_argument(
        "--state-dir", default=None, help="SQLite state dir for the runtime (default: memory)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            from turnledger.devstack.session import session_endpoints

            bootstrap = stack.enter_context(session_endpoints()).bootstrap
        report = run(args, bootstrap)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
