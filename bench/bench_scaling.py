"""Throughput of 1, 2 and 3 `turnledger process` members of one consumer group, on the same broker.

    python -m bench.bench_scaling [--records 60000] [--partitions 6] [--repeats 2] [--fold dispatch|counter]

For each member count K (1, 2, 3) and repeat: fresh topics; K separate OS processes run
`turnledger process` (group ownership, one group); once the group is stable (every member has its
partitions and every partition is positioned, read from the members' logs) `--records` pre-encoded
ingress records are appended as fast as one producer can, and throughput is records / (time from
the first append to the group's committed offsets covering them all). So no member processes
anything while the group still forms, and rebalances are not part of the measurement (their cost
is `seconds_to_stable`). `producer_records_per_s` is the same append alone, into a topic nobody
reads, to show the producer is not the bound. Reported: records/s per K (median of the repeats)
and the ratios to K = 1, measured in the same run.

`--fold counter` (default) is bench_processor's per-key counter (the runtime's own cost);
`--fold dispatch` drains bench/dispatch_workload.py's realistic events with the dispatch fold
(CPU-bound in the fold, so it shows what more processes buy on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from turnledger.processors.topics import ensure_topics
from turnledger.processors.writer import BatchWriter
from turnledger.topology import Topics

REPO = Path(__file__).resolve().parents[1]
FOLDS = {
    "counter": "bench.bench_processor:counter_fold",
    "dispatch": "turnledger.processors.dispatch_partition:DispatchPartitionFold",
}
ASSIGNED = re.compile(r"rebalance: partitions \[([\d, ]*)\] assigned")
RESUMING = re.compile(r"partition (\d+): resuming")


Pairs = list[tuple[bytes, bytes]]


def backlog(records: int, fold: str) -> Pairs:
    if fold == "dispatch":
        from bench.dispatch_workload import build

        workload = build(max(1, records // 39))  # about 39 events per conversation
        return [
            (e.conversation_id.encode(), v) for e, v in zip(workload.events, workload.values, strict=True)
        ]
    pad = b"x" * 200
    return [(f"conv-{i % 1000}".encode(), pad) for i in range(records)]


async def append(bootstrap: str, topic: str, pairs: Pairs) -> float:
    """Append every pair as fast as one producer can; returns the seconds it took."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=512 * 1024)
    await producer.start()
    try:
        began = time.monotonic()
        # record batches per partition (the runtime's writer): a send() per record caps near 25k/s here
        futures = await BatchWriter(producer).write((topic, None, key, value) for key, value in pairs)
        await asyncio.gather(*futures)
        return time.monotonic() - began
    finally:
        await producer.stop()


class Member:
    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self._fh = log.open("ab")
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "turnledger.cli", "process", *args],
            cwd=REPO,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def positioned(self) -> set[int] | None:
        """The partitions of the member's latest assignment once each was positioned after it, else None."""
        text = self.log.read_text(errors="replace")
        assigned = list(ASSIGNED.finditer(text))
        if not assigned:
            return None
        last = assigned[-1]
        owned = {int(p) for p in last.group(1).split(",") if p.strip()}
        resumed = {int(m.group(1)) for m in RESUMING.finditer(text, last.end())}
        return owned if owned and owned <= resumed else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()


async def drop_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Delete what a measurement created: a long benchmark must not leave the broker thousands of
    partitions (the devstack broker's 512 MB heap does not survive ~12k)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(list(names))
    finally:
        await admin.close()


async def committed_total(consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition]) -> int:
    return sum([(await consumer.committed(tp)) or 0 for tp in tps])


async def measure(
    bootstrap: str, partitions: int, members: int, pairs: Pairs, fold: str, workdir: Path
) -> dict[str, float]:
    topics = Topics(f"bench-scale-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(bootstrap, topics, partitions)
    app_id = f"{topics.prefix}app"
    args = [
        "--bootstrap",
        bootstrap,
        "--topic-prefix",
        topics.prefix,
        "--app-id",
        app_id,
        "--fold",
        FOLDS[fold],
    ]
    args += ["--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000", "--log-level", "INFO"]
    started = time.monotonic()
    group = [Member(args, workdir / f"{app_id}-{i}.log") for i in range(members)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=app_id, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topics.ingress, p) for p in range(partitions)]
    consumer.assign(tps)
    try:
        while True:
            for m in group:
                if m.proc.poll() is not None:
                    raise RuntimeError(f"a member exited: {m.log.read_text()[-2000:]}")
            owned = [m.positioned() for m in group]
            if all(o is not None for o in owned) and set().union(*owned) == set(range(partitions)):  # type: ignore[arg-type]
                break
            await asyncio.sleep(0.05)
        stable_at = time.monotonic()
        appending = asyncio.create_task(append(bootstrap, topics.ingress, pairs))
        while (done := await committed_total(consumer, tps)) < len(pairs):
            if appending.done():
                appending.result()
            await asyncio.sleep(0.02)
        finished = time.monotonic()
        await appending
    finally:
        await consumer.stop()
        for m in group:
            m.stop()
        await drop_topics(bootstrap, topics.all)
    return {"records_per_s": done / (finished - stable_at), "seconds_to_stable": stable_at - started}


async def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    pairs = backlog(args.records, args.fold)
    scratch = Topics(f"bench-scale-{uuid.uuid4().hex[:8]}.")
    await ensure_topics(bootstrap, scratch, args.partitions)
    producer_s = await append(bootstrap, scratch.ingress, pairs)
    await drop_topics(bootstrap, scratch.all)
    results: dict[int, list[dict[str, float]]] = {k: [] for k in args.members}
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        for _ in range(args.repeats):
            for k in args.members:
                results[k].append(await measure(bootstrap, args.partitions, k, pairs, args.fold, Path(tmp)))
    rates = {k: statistics.median(r["records_per_s"] for r in runs) for k, runs in results.items()}
    base = rates[args.members[0]]
    return {
        "fold": args.fold,
        "records": len(pairs),
        "producer_records_per_s": round(len(pairs) / producer_s),
        "partitions": args.partitions,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "records_per_s": {k: round(v) for k, v in rates.items()},
        "ratio_to_1": {k: round(v / base, 2) for k, v in rates.items()},
        "seconds_to_stable": {
            k: round(statistics.median(r["seconds_to_stable"] for r in runs), 1)
            for k, runs in results.items()
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--members", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--fold", choices=sorted(FOLDS), default="counter")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            from turnledger.devstack.session import session_endpoints

            bootstrap = stack.enter_context(session_endpoints()).bootstrap
        report = asyncio.run(run(args, bootstrap))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
