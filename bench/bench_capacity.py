"""Capacity: how many concurrent provider streams one processor process guards in time.

    python -m bench.bench_capacity [--streams 100,250,500] [--seconds 20] [--tokens-per-s 60]
        [--flush-ms 100] [--partitions 2] [--contenders raw,runtime,runtime_window] [--repeats 1]
        [--quick]

Issue 20, goal 6: streams of 60 tokens/s each, the worker flushing deltas at most every 100 ms, at
least 500 streams per processor core with p99 append → preview at most 250 ms.

Per level of `--streams` N, on fresh topics, one `turnledger process`-equivalent child (ProcessorApp
with the real DispatchPartitionFold, one process, so at most one core of fold):

1. Setup: N conversations, each a user turn, DispatchRequested, DispatchAttempt, DispatchSent and
   HandleBound (built with the pure fold, so HandleBound carries the digest the processor computes),
   appended and drained before the clock starts.
2. Load: every stream appends, every `--flush-ms`, one StreamDeltas record as the worker writes it
   (`tokens-per-s * flush-ms / 1000` TEXT_DELTAs as one run, `streaming/runs.py`, the first record
   with MESSAGE_START and BLOCK_START),
   the streams staggered evenly over the interval, for `--seconds`; then BLOCK_STOP and MESSAGE_STOP,
   so every operation commits. Records are encoded before the clock starts.
3. Latency of a record: from its append (the producer's send call) to the read_committed arrival of
   the first PreviewUpdated of its conversation whose throughSequence covers the record's last delta
   (the fold coalesces previews per ingress event, so a record with several deltas of a block gets one;
   a later preview of the conversation covers the records before it too).

Contenders, one after another per level (their order alternating from level to level): `raw` (the
copy loop), `runtime` (the processor with `--group-commit`: pipelined commits, a batch closing as
soon as the commit before it has ended) and `runtime_window` (the processor's default, group commit
off, every batch open `--batch-max-ms`), so the two batching policies are compared in the same run.

Reported per level: records/s and tokens/s offered, the share of records answered by a preview,
p50/p99/max latency, the processor's CPU (user + system seconds per wall second, from /proc; 1.0 is
one core) and how many committed turns arrived. The load generator, the broker and the processor
share the machine, so a level that saturates the machine says so through the CPU column.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.bench_dispatch import DISPATCH_FOLD
from bench.bench_processor import Contender, Job, _fresh_topics, _pct
from bench.dispatch_workload import ADAPTERS, WORDS, Mix, _Deltas, _Driver
from turnledger.codec import decode, encode
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.events import CommittedTurn, PreviewUpdated, StreamDeltas
from turnledger.streaming.runs import merge_runs

log = logging.getLogger("bench.capacity")


@dataclass(frozen=True)
class Record:
    """One StreamDeltas record of the load phase: when it is due and what it covers."""

    due_s: float
    key: bytes
    value: bytes
    conversation: str
    through: int
    """The record's last delta sequence."""
    text: bool
    """Carries text, so a preview answers it (the last record, BLOCK_STOP and MESSAGE_STOP, commits)."""


def _setup(n: int, prefix: str) -> tuple[list[tuple[bytes, bytes]], list[tuple[str, str, int, str]]]:
    """Each stream's conversation up to HandleBound; returns the rows and (conv, op, generation, handle)."""
    rows: list[tuple[bytes, bytes]] = []
    streams = []
    for i in range(n):
        conv = f"{prefix}-{i}"
        driver = _Driver(conv, ADAPTERS[i % len(ADAPTERS)])
        driver.user(f"tell me a long story, {conv}")
        handle = f"h-{conv}"
        generation = driver.dispatch([], Mix(), handle)
        rows += [(conv.encode(), encode(e)) for e in driver.events]
        op = next(iter(driver.state.operations))
        streams.append((conv, op, generation, handle))
    return rows, streams


def _load(
    streams: list[tuple[str, str, int, str]], seconds: float, tokens_per_record: int, flush_s: float
) -> list[Record]:
    """Every stream's records, due times staggered over the flush interval, in due order."""
    records: list[Record] = []
    per_stream = max(1, int(seconds / flush_s))
    for i, (conv, op, generation, handle) in enumerate(streams):
        deltas = _Deltas(handle)
        offset = flush_s * i / len(streams)
        for k in range(per_stream + 1):
            batch: list[NormalizedDelta] = []
            if k == 0:
                batch.append(deltas(DeltaType.MESSAGE_START, -1, model="m", input_tokens=100))
                batch.append(deltas(DeltaType.BLOCK_START, 0, block_kind="text"))
            if k < per_stream:
                for t in range(tokens_per_record):
                    word = WORDS[(i + k * tokens_per_record + t) % len(WORDS)]
                    batch.append(deltas(DeltaType.TEXT_DELTA, 0, text=word + " "))
            else:
                batch.append(deltas(DeltaType.BLOCK_STOP, 0))
                batch.append(
                    deltas(
                        DeltaType.MESSAGE_STOP,
                        -1,
                        stop_reason=StopReason.END_TURN,
                        raw_stop_reason="end_turn",
                        output_tokens=tokens_per_record * per_stream,
                    )
                )
            batch = list(merge_runs(d.model_copy(update={"generation": generation}) for d in batch))
            event = StreamDeltas(
                conversation_id=conv,
                event_id=f"{conv}/load-{k}",
                occurred_at_ms=1_700_000_100_000 + k,
                operation_id=op,
                attempt_generation=generation,
                deltas=tuple(batch),
            )
            through = max(d.last_sequence for d in batch if d.block_index == 0)
            records.append(
                Record(offset + k * flush_s, conv.encode(), encode(event), conv, through, k < per_stream)
            )
    records.sort(key=lambda r: r.due_s)
    return records


async def _append_rows(bootstrap: str, topic: str, rows: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in rows]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _offer(bootstrap: str, topic: str, records: list[Record], sent_ns: list[int]) -> float:
    """Append each record at its due time; `sent_ns[i]` = when record i was handed to the producer."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    start = time.monotonic()
    i = 0
    lateness: list[float] = []
    try:
        while i < len(records):
            now = time.monotonic() - start
            while i < len(records) and records[i].due_s <= now:
                sent_ns[i] = time.time_ns()
                lateness.append(now - records[i].due_s)
                await producer.send(topic, records[i].value, key=records[i].key)
                i += 1
            await asyncio.sleep(0.002)
        await producer.flush()
    finally:
        await producer.stop()
    return _pct(lateness, 0.99) * 1000


async def _watch(
    bootstrap: str,
    watched: tuple[str, ...],
    partitions: int,
    expected_commits: int,
    stop: asyncio.Event,
    positioned: asyncio.Event,
) -> tuple[dict[str, list[tuple[int, int]]], int]:
    """Arrivals per conversation as (throughSequence, arrival ns) of previews (or, from the raw loop, of
    the copied StreamDeltas); and the assistant turns committed (or, raw, the copied last records).
    `positioned` is set once every partition's position is at its end: the load may start."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    tps = [TopicPartition(t, p) for t in watched for p in range(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)  # resolves the seek
    positioned.set()
    arrivals: dict[str, list[tuple[int, int]]] = {}
    commits = 0
    ends: dict[TopicPartition, int] | None = None
    try:
        while ends is None or [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            if ends is None and stop.is_set() and commits >= expected_commits:
                ends = await consumer.end_offsets(tps)  # then read what was committed with the last turns
            batch = await consumer.getmany(*tps, timeout_ms=50)
            now = time.time_ns()
            for records in batch.values():
                for m in records:
                    out = decode(m.value or b"")
                    if isinstance(out, PreviewUpdated):
                        arrivals.setdefault(out.conversation_id, []).append((out.through_sequence, now))
                    elif isinstance(out, CommittedTurn) and "#" in out.turn_id:
                        commits += 1
                    elif isinstance(out, StreamDeltas):
                        if any(d.type is DeltaType.MESSAGE_STOP for d in out.deltas):
                            commits += 1
                        else:
                            through = max(d.last_sequence for d in out.deltas)
                            arrivals.setdefault(out.conversation_id, []).append((through, now))
    finally:
        await consumer.stop()
    return arrivals, commits


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _latencies(
    records: list[Record], sent_ns: list[int], arrivals: dict[str, list[tuple[int, int]]]
) -> list[float]:
    out: list[float] = []
    for record, sent in zip(records, sent_ns, strict=True):
        if not record.text:
            continue
        answer = next(
            (at for through, at in arrivals.get(record.conversation, []) if through >= record.through), None
        )
        if answer is not None:
            out.append((answer - sent) / 1e6)
    return out


CONTENDERS = ("raw", "runtime", "runtime_window")
"""`runtime_window`: the processor with group commit off (every batch stays open `--batch-max-ms`)."""


def level(args: argparse.Namespace, bootstrap: str, n: int, contender_name: str) -> dict[str, Any]:
    """One level of `n` streams against one contender: `runtime` (the processor), `runtime_window` (the
    processor without group commit) or `raw` (the copy loop)."""
    kind = "raw" if contender_name == "raw" else "runtime"
    topics, raw_out = asyncio.run(_fresh_topics(bootstrap, args.partitions))
    rows, streams = _setup(n, f"cap{n}")
    tokens_per_record = max(1, round(args.tokens_per_s * args.flush_ms / 1000))
    records = _load(streams, args.seconds, tokens_per_record, args.flush_ms / 1000)
    job = Job(
        kind=kind,
        bootstrap=bootstrap,
        topics_prefix=topics.prefix,
        raw_out=raw_out,
        partitions=args.partitions,
        app_id=f"{topics.prefix}{contender_name}",
        batch_max_records=args.batch_max_records,
        batch_max_ms=args.batch_max_ms,
        target=len(rows),
        fold=DISPATCH_FOLD,
        state_dir=None,
        group_commit=contender_name == "runtime",
    )
    watched = (topics.previews, topics.committed) if kind == "runtime" else (raw_out,)
    contender = Contender(job)
    try:
        contender.expect("ready", 120)
        asyncio.run(_append_rows(bootstrap, topics.ingress, rows))
        contender.expect("done", 600)
        sent_ns = [0] * len(records)
        pid = contender.proc.pid or 0

        async def run() -> tuple[dict[str, list[tuple[int, int]]], int, float, float, float]:
            stop, positioned = asyncio.Event(), asyncio.Event()
            watcher = asyncio.create_task(_watch(bootstrap, watched, args.partitions, n, stop, positioned))
            await asyncio.wait_for(positioned.wait(), 120)
            cpu0, wall0 = _cpu_seconds(pid), time.monotonic()
            late_p99 = await _offer(bootstrap, topics.ingress, records, sent_ns)
            stop.set()
            arrivals, commits = await asyncio.wait_for(watcher, timeout=args.seconds + 300)
            cpu1, wall1 = _cpu_seconds(pid), time.monotonic()
            return arrivals, commits, (cpu1 - cpu0) / (wall1 - wall0), late_p99, wall1 - wall0

        arrivals, commits, cpu, late_p99, wall = asyncio.run(run())
    finally:
        _, _, metrics = contender.stop()
    lat = _latencies(records, sent_ns, arrivals)
    content_records = [r for r in records if r.text]
    return {
        "contender": contender_name,
        "streams": n,
        "records_per_s": round(len(records) / args.seconds),
        "tokens_per_s": round(n * args.tokens_per_s),
        "answered": f"{len(lat)}/{len(content_records)}",
        "p50_ms": round(statistics.median(lat), 1) if lat else None,
        "p99_ms": round(_pct(lat, 0.99), 1),
        "max_ms": round(max(lat), 1) if lat else None,
        "cpu": round(cpu, 2),
        "generator_lateness_p99_ms": round(late_p99, 1),
        "finished": f"{commits}/{n}",
        "wall_s": round(wall, 1),
        "metrics": metrics,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--streams", default="100,250,500", help="comma-separated levels of concurrent streams"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="load duration per level")
    parser.add_argument("--tokens-per-s", type=float, default=60.0)
    parser.add_argument("--flush-ms", type=int, default=100, help="the worker's flush interval")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch-max-records", type=int, default=500)
    parser.add_argument("--batch-max-ms", type=int, default=100)
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of every contender per level, the order alternating"
    )
    parser.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help=f"comma-separated, of {', '.join(CONTENDERS)} (raw is always run: the ratios are to it)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="one small level (CI: the bench runs, no speed read)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.seconds, args.contenders = "10", 1.0, "raw,runtime"
    logging.basicConfig(level=logging.WARNING)
    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            from turnledger.devstack.session import session_endpoints

            bootstrap = stack.enter_context(session_endpoints()).bootstrap
        report = []
        names = ["raw", *(c for c in args.contenders.split(",") if c in CONTENDERS and c != "raw")]
        for n in (int(s) for s in args.streams.split(",")):
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for repeat in range(args.repeats):
                for name in names[:: 1 if repeat % 2 == 0 else -1]:
                    runs[name].append(level(args, bootstrap, n, name))
                    print(json.dumps(runs[name][-1]), file=sys.stderr)
            report.append(_summary(n, runs))
            print(_table(report[-1]), file=sys.stderr)
    print(json.dumps({"levels": report, "args": vars(args)}, indent=2))
    print("\n".join(_table(level) for level in report), file=sys.stderr)


def _summary(n: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per contender the median p50/p99/CPU over the repeats (each repeat runs every contender, the
    order alternating), and the median of the per-repeat ratios of each p99 to raw's."""
    summary: dict[str, Any] = {"streams": n, "runs": runs}
    for name, results in runs.items():
        summary[name] = {
            key: statistics.median(r[key] for r in results) for key in ("p50_ms", "p99_ms", "cpu")
        }
        ratios = [r["p99_ms"] / raw["p99_ms"] for r, raw in zip(results, runs["raw"], strict=True)]
        summary[name]["p99_ratio"] = round(statistics.median(ratios), 2)
    return summary


def _table(level: dict[str, Any]) -> str:
    rows = [f"\n{level['streams']} streams, median of {len(level['runs']['raw'])} repeat(s)"]
    rows.append("| contender | p50 ms | p99 ms | p99 / raw | processor CPU |")
    rows.append("|---|---:|---:|---:|---:|")
    for name in level["runs"]:
        m = level[name]
        cells = f"{m['p50_ms']:.0f} | {m['p99_ms']:.0f} | {m['p99_ratio']:.2f} | {m['cpu']:.2f}"
        rows.append(f"| {name} | {cells} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
