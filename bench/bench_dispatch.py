"""The dispatch processor (ProcessorApp + DispatchPartitionFold) vs the raw transactional copy loop.

    python -m bench.bench_dispatch [--conversations 1500] [--repeats 3] [--rate 300] [--seconds 20]
        [--rss 10000:memory,100000:sqlite] [--contenders raw,...,runtime_x2]
        [--phases throughput,latency,rss] [--broker-pid PID] [--quick]

Workload: bench/dispatch_workload.py, the realistic mix (user turns, DispatchRequested,
DispatchAttempt, DispatchSent, HandleBound, StreamDeltas of text and tool-call deltas, tool
results, several rounds), built with the pure fold so every dispatch streams and commits.

* Throughput: per repeat, fresh topics, the whole workload appended first; then the raw
  loop (bench_processor's `raw`: consume → produce the same bytes → offsets → commit) and
  the runtime with the real DispatchPartitionFold drain it (order alternating per repeat), each in
  its own process with the same batching and producer settings. A third contender,
  `raw_codec`, is the raw loop that also decodes every event into its validated model and
  encodes it again: the least codec work any validating processor does per event, so
  raw_codec / raw bounds what the runtime can reach with this codec stack. A fourth,
  `raw_avro`, does the same with fastavro alone (no pydantic): the bound for any processor of
  these schemas built on fastavro. Reported: events/s of each, and the medians of the
  per-repeat ratios runtime / raw (issue 6's goal: ≥ 0.7, issue 20's: ≥ 0.25), raw_codec / raw,
  raw_avro / raw and runtime / raw_codec. A fifth, `runtime_x2`, is the same runtime in twice the
  processes (`--processes`, as `turnledger process --processes N` runs it, the partitions dealt
  over them), same batching and producer settings, draining a copy of the workload appended to
  topics of its own (a runtime resumes from its changelog, so it cannot share the runtime's
  topics): runtime_x2 / runtime is issue 20's scaling goal (≥ 1.7 from one process to two). For
  each drain the cores used are sampled from /proc (the contender with its children, the broker,
  the whole machine), so a run shows whether the box had a core to give.
* Latency: per repeat and contender, fresh topics, the contender running; a second (smaller)
  workload is appended at `--rate` events/s; for every event that commits a turn, the time
  from its append (the producer's send) to the read_committed arrival of its CommittedTurn on
  turnledger.committed (for raw: of its copy). p50/p99, and their ratios to raw.
* RSS: the runtime alone drains N conversations of a light mix (one user turn and one
  dispatch request each: a committed block and a PREPARED operation with its manifest); peak
  RSS (VmHWM of the processor process) and RSS at ready, with the memory or SQLite store, and
  the engine's state cache at its default size or at the size an item's third field gives
  (`100000:sqlite:2000`: TURNLEDGER_STATE_CACHE_SIZE=2000, decoded states per partition).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench import cputime
from bench.bench_processor import Contender, Job, _fresh_topics, _pct
from bench.dispatch_workload import ADAPTERS, TOOLS, Mix, Workload, build
from turnledger.codec import decode, encode
from turnledger.model.events import CommittedTurn, DispatchRequested, SubmittedBlock, TurnSubmitted
from turnledger.processors.dispatch_partition import STATE_CACHE_ENV
from turnledger.topology import Topics

DISPATCH_FOLD = "turnledger.processors.dispatch_partition:DispatchPartitionFold"


def _job(args: argparse.Namespace, kind: str, bootstrap: str, topics: Topics, raw_out: str, **kw: Any) -> Job:
    fields: dict[str, Any] = {
        "kind": kind,
        "bootstrap": bootstrap,
        "topics_prefix": topics.prefix,
        "raw_out": raw_out,
        "partitions": args.partitions,
        "app_id": f"{topics.prefix}{kind}",
        "batch_max_records": args.batch_max_records,
        "batch_max_ms": args.batch_max_ms,
        "target": 0,
        "fold": DISPATCH_FOLD,
        "state_dir": None,
        "processes": args.processes if kind == "runtime" else 1,
    }
    return Job(**{**fields, **kw})


async def _append(bootstrap: str, topic: str, rows: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=512 * 1024
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in rows]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def _rows(workload: Workload) -> list[tuple[bytes, bytes]]:
    return [(e.conversation_id.encode(), v) for e, v in zip(workload.events, workload.values, strict=True)]


async def _count(bootstrap: str, topic: str, partitions: int) -> int:
    """Records on `topic` visible to read_committed (transaction markers excluded)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        n = 0
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(*tps, timeout_ms=500)
            n += sum(len(records) for records in batch.values())
        return n
    finally:
        await consumer.stop()


def _drain(job: Job, target: int, broker_pid: int | None) -> tuple[float, dict[str, float]]:
    """events/s from ready to done, and the cores used meanwhile (contender tree, broker, machine)."""
    contender = Contender(Job(**{**job.__dict__, "target": target}))
    contender.expect("ready", 120)
    pid = contender.proc.pid
    assert pid is not None
    start = cputime.sample(time.monotonic(), pid, broker_pid)
    seconds, n = contender.expect("done", 1800)
    end = cputime.sample(time.monotonic(), pid, broker_pid)
    contender.stop()
    return n / seconds, cputime.cores(start, end)


CONTENDERS = ("raw", "raw_avro", "raw_codec", "runtime", "runtime_x2")
OWN_TOPICS = ("runtime_x2",)
"""Contenders that drain a copy of the workload on topics of their own. A runtime restores its state,
and with it its input positions, from the changelog: a second runtime on the first one's topics
would resume where the first one ended and never reach its target."""
RATIOS = (
    ("runtime", "raw"),
    ("raw_codec", "raw"),
    ("raw_avro", "raw"),
    ("runtime", "raw_codec"),
    ("runtime_x2", "runtime"),
    ("runtime_x2", "raw"),
)
GOALS = {"runtime/raw": " (issue 20 goal ≥ 0.25)", "runtime_x2/runtime": " (issue 20 goal ≥ 1.7)"}


def _job_of(args: argparse.Namespace, kind: str, bootstrap: str, topics: Topics, raw_out: str) -> Job:
    """runtime_x2 is the runtime contender with twice its processes (`--processes`), else the same."""
    if kind == "runtime_x2":
        return _job(args, "runtime", bootstrap, topics, raw_out, processes=2 * args.processes)
    return _job(args, kind, bootstrap, topics, raw_out)


def _checks(bootstrap: str, topics: Topics, partitions: int) -> dict[str, int]:
    return {
        name: asyncio.run(_count(bootstrap, getattr(topics, name), partitions))
        for name in ("committed", "rejections", "quarantine")
    }


def throughput(
    args: argparse.Namespace, bootstrap: str, workload: Workload, broker_pid: int | None
) -> dict[str, Any]:
    rows = _rows(workload)
    kinds = args.contenders
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    check: dict[str, dict[str, int]] = {}
    for repeat in range(args.repeats):
        shared = asyncio.run(_fresh_topics(bootstrap, args.partitions))
        asyncio.run(_append(bootstrap, shared[0].ingress, rows))
        own = {}
        for kind in (k for k in kinds if k in OWN_TOPICS):
            own[kind] = asyncio.run(_fresh_topics(bootstrap, args.partitions))
            asyncio.run(_append(bootstrap, own[kind][0].ingress, rows))
        shift = repeat % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            topics, raw_out = own.get(kind, shared)
            rate, used = _drain(_job_of(args, kind, bootstrap, topics, raw_out), len(rows), broker_pid)
            rates[kind].append(rate)
            cpu[kind].append(used)
            print(
                f"  throughput repeat {repeat + 1}: {kind} {rate:,.0f} events/s, cores: contender "
                f"{used['contender']:.2f} broker {used['broker']:.2f} machine {used['machine']:.2f} "
                f"(stolen {used['steal']:.2f})",
                file=sys.stderr,
            )
        if repeat == args.repeats - 1:
            if "runtime" in kinds:
                check["runtime"] = _checks(bootstrap, shared[0], args.partitions)
            for kind, (topics, _) in own.items():
                check[kind] = _checks(bootstrap, topics, args.partitions)

    per_repeat = {
        f"{kind}/{base}": [k / b for k, b in zip(rates[kind], rates[base], strict=True)]
        for kind, base in RATIOS
        if kind in rates and base in rates
    }
    return {"rates": rates, "cpu": cpu, "per_repeat": per_repeat, "check": check}


async def _offered(
    bootstrap: str, topic: str, workload: Workload, rate: int, sent_at: dict[str, int]
) -> tuple[int, float]:
    """Append the workload at `rate` events/s; `sent_at[event_id]` = append time (ns) of commit events."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    sent, start = 0, time.monotonic()
    try:
        while sent < len(workload.events):
            due = min(len(workload.events), int((time.monotonic() - start) * rate) + 1)
            while sent < due:
                event, value = workload.events[sent], workload.values[sent]
                if event.event_id in workload.commit_events:
                    sent_at[event.event_id] = time.time_ns()
                await producer.send(topic, value, key=event.conversation_id.encode())
                sent += 1
            await asyncio.sleep(0.002)
        await producer.flush()
    finally:
        await producer.stop()
    return sent, time.monotonic() - start


async def _arrivals(
    bootstrap: str,
    topic: str,
    partitions: int,
    raw: bool,
    by_value: dict[bytes, str],
    expected: int,
    arrived: dict[str, int],
    timeout_s: float,
) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    deadline = time.monotonic() + timeout_s
    try:
        while len(arrived) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(*tps, timeout_ms=100)
            now = time.time_ns()
            for records in batch.values():
                for m in records:
                    if raw:
                        event_id = by_value.get(m.value)
                    else:
                        turn = decode(m.value)
                        event_id = turn.source_event_id if isinstance(turn, CommittedTurn) else None
                    if event_id is not None:
                        arrived.setdefault(event_id, now)
    finally:
        await consumer.stop()


def latency(args: argparse.Namespace, bootstrap: str, workload: Workload) -> dict[str, Any]:
    by_value = {
        v: e.event_id
        for e, v in zip(workload.events, workload.values, strict=True)
        if e.event_id in workload.commit_events
    }
    expected = len(workload.commit_events)
    out: dict[str, dict[str, list[float]]] = {
        "raw": {"p50": [], "p99": []},
        "runtime": {"p50": [], "p99": []},
    }
    for repeat in range(args.repeats):
        kinds = ("raw", "runtime") if repeat % 2 == 0 else ("runtime", "raw")
        for kind in kinds:
            topics, raw_out = asyncio.run(_fresh_topics(bootstrap, args.partitions))
            contender = Contender(_job(args, kind, bootstrap, topics, raw_out))
            contender.expect("ready", 120)
            sent_at: dict[str, int] = {}
            arrived: dict[str, int] = {}

            async def measure(
                topics: Topics = topics,
                raw_out: str = raw_out,
                kind: str = kind,
                sent_at: dict[str, int] = sent_at,
                arrived: dict[str, int] = arrived,
            ) -> None:
                reader = asyncio.create_task(
                    _arrivals(
                        bootstrap,
                        raw_out if kind == "raw" else topics.committed,
                        args.partitions,
                        kind == "raw",
                        by_value,
                        expected,
                        arrived,
                        len(workload.events) / args.rate + 60,
                    )
                )
                await _offered(bootstrap, topics.ingress, workload, args.rate, sent_at)
                await reader

            asyncio.run(measure())
            contender.stop()
            lat = [(arrived[k] - sent_at[k]) / 1e6 for k in arrived if k in sent_at]
            if len(lat) < expected:
                print(f"  latency {kind}: only {len(lat)}/{expected} commits arrived", file=sys.stderr)
            out[kind]["p50"].append(statistics.median(lat))
            out[kind]["p99"].append(_pct(lat, 0.99))
            print(
                f"  latency repeat {repeat + 1}: {kind} p50 {out[kind]['p50'][-1]:.1f} ms "
                f"p99 {out[kind]['p99'][-1]:.1f} ms (n={len(lat)})",
                file=sys.stderr,
            )
    return out


def light_workload(conversations: int, prefix: str) -> list[tuple[bytes, bytes]]:
    """Per conversation: a user turn and a DispatchRequested (no fold needed to build them)."""
    rows: list[tuple[bytes, bytes]] = []
    for i in range(conversations):
        cid = f"{prefix}-{i}"
        adapter, provider, model = ADAPTERS[i % len(ADAPTERS)]
        common = {"conversation_id": cid, "occurred_at_ms": 1_700_000_000_000}
        block = SubmittedBlock(
            id="u1-b0",
            role="user",
            kind="text",
            trust_label="user",
            text=f"question of {cid}: what is the weather in Paris today?",
        )
        turn = TurnSubmitted(**common, event_id=f"{cid}/e1", turn_id="u1", blocks=(block,))
        request = DispatchRequested(
            **common,
            event_id=f"{cid}/e2",
            operation_id="op-1",
            adapter=adapter,
            provider=provider,
            model_revision=model,
            tools=TOOLS,
            max_output_tokens=1024,
        )
        rows += [(cid.encode(), encode(turn)), (cid.encode(), encode(request))]
    return rows


def _vm(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss(
    args: argparse.Namespace, bootstrap: str, conversations: int, store: str, state_cache: int | None
) -> dict[str, Any]:
    topics, raw_out = asyncio.run(_fresh_topics(bootstrap, args.partitions))
    rows = light_workload(conversations, "rss")
    asyncio.run(_append(bootstrap, topics.ingress, rows))
    # The processor's own knob, inherited by the spawned child; unset: the engine's default.
    if state_cache is None:
        os.environ.pop(STATE_CACHE_ENV, None)
    else:
        os.environ[STATE_CACHE_ENV] = str(state_cache)
    with tempfile.TemporaryDirectory(prefix="bench-state-") as state_dir:
        job = _job(
            args,
            "runtime",
            bootstrap,
            topics,
            raw_out,
            target=len(rows),
            state_dir=state_dir if store == "sqlite" else None,
            processes=1,  # the RSS of one processor process
        )
        contender = Contender(job)
        contender.expect("ready", 120)
        pid = contender.proc.pid
        assert pid is not None
        at_ready = _vm(pid, "VmRSS")
        seconds, n = contender.expect("done", 3600)
        peak, final = _vm(pid, "VmHWM"), _vm(pid, "VmRSS")
        contender.stop()
    return {
        "conversations": conversations,
        "store": store,
        "state_cache": "default" if state_cache is None else f"{state_cache:,}",
        "events": n,
        "events_per_s": n / seconds,
        "rss_ready_mb": at_ready,
        "rss_end_mb": final,
        "peak_rss_mb": peak,
    }


def _rss_plan(value: str) -> list[tuple[int, str, int | None]]:
    """conversations:store[:state cache size per partition], comma-separated. Parsed before anything
    runs, so a typo fails in a second, not after the other phases."""
    plan = []
    for item in filter(None, value.split(",")):
        count, _, rest = item.partition(":")
        store, _, cache = rest.partition(":")
        if not count.isdigit() or store not in ("memory", "sqlite") or not (cache == "" or cache.isdigit()):
            raise argparse.ArgumentTypeError(
                f"expected conversations:memory|sqlite[:state cache], got {item!r}"
            )
        plan.append((int(count), store, int(cache) if cache else None))
    return plan


def _names(value: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated subset of `allowed`, kept in `allowed`'s order; checked before anything runs."""
    names = tuple(filter(None, value.split(",")))
    if unknown := [n for n in names if n not in allowed]:
        raise argparse.ArgumentTypeError(
            f"unknown {', '.join(unknown)}; expected some of {', '.join(allowed)}"
        )
    return tuple(n for n in allowed if n in names)


PHASES = ("throughput", "latency", "rss")
NAMES = {
    "raw": "raw aiokafka copy loop",
    "raw_avro": "raw loop + fastavro read/write of every event (Avro floor)",
    "raw_codec": "raw loop + decode/encode of every event (codec floor)",
    "runtime": "runtime + DispatchPartitionFold",
    "runtime_x2": "the same runtime in twice the processes, on topics of its own",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=1_500, help="throughput workload")
    parser.add_argument("--concurrency", type=int, default=1_000, help="conversations active at once")
    parser.add_argument("--rounds", type=int, default=Mix.rounds)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch-max-records", type=int, default=500)
    parser.add_argument("--batch-max-ms", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="runtime contender: `turnledger process --processes N` (runtime_x2: 2N; needs 2N ≤ partitions)",
    )
    parser.add_argument(
        "--contenders",
        type=lambda v: _names(v, CONTENDERS),
        default=CONTENDERS,
        help=f"throughput contenders, comma-separated (default: {','.join(CONTENDERS)})",
    )
    parser.add_argument(
        "--phases",
        type=lambda v: _names(v, PHASES),
        default=PHASES,
        help=f"phases to run, comma-separated (default: {','.join(PHASES)})",
    )
    parser.add_argument(
        "--broker-pid",
        type=int,
        default=None,
        help="the broker's pid, for its CPU (default: the devstack's broker when the bench uses it)",
    )
    parser.add_argument("--rate", type=int, default=300, help="events/s offered in the latency phase")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the latency phase")
    parser.add_argument(
        "--rss",
        type=_rss_plan,
        default="10000:memory,10000:sqlite,100000:sqlite",
        help="conversations:store[:state cache] list for the RSS phase ('' to skip); store is memory or "
        "sqlite; state cache: the engine's decoded states kept per partition (default BatchEngine's)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="300 conversations, 1 repeat, 8 s of latency, RSS for 2000 only, no runtime_x2",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.conversations, args.concurrency, args.repeats, args.seconds = 300, 300, 1, 8.0
        args.rss = [(2000, "memory", None)]
        args.contenders = tuple(k for k in args.contenders if k != "runtime_x2")
    if "runtime_x2" in args.contenders and 2 * args.processes > args.partitions:
        parser.error(f"runtime_x2 runs {2 * args.processes} processes: needs --partitions ≥ that")
    if "rss" not in args.phases:
        args.rss = []
    logging.basicConfig(level=logging.WARNING)

    started = time.monotonic()
    mix = Mix(rounds=args.rounds)
    workload = lat_workload = None
    if "throughput" in args.phases:
        workload = build(args.conversations, mix, concurrency=args.concurrency)
    if "latency" in args.phases:
        per_conv = (
            len(workload.events) / max(1, args.conversations)
            if workload is not None
            else mix_events_per_conversation(mix)
        )
        lat_convs = max(1, round(args.rate * args.seconds / per_conv))
        lat_workload = build(lat_convs, mix, prefix="lat", concurrency=max(1, lat_convs // 2))
    print(f"workloads built in {time.monotonic() - started:.0f} s", file=sys.stderr)

    with contextlib.ExitStack() as stack:
        from turnledger.devstack.session import dev_up_broker_pid, session_endpoints

        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if bootstrap:
            broker_pid = dev_up_broker_pid(bootstrap)
        else:
            endpoints = stack.enter_context(session_endpoints())
            bootstrap, broker_pid = endpoints.bootstrap, endpoints.broker_pid
        if args.broker_pid is not None:
            broker_pid = args.broker_pid
        tput = None if workload is None else throughput(args, bootstrap, workload, broker_pid)
        lat = None if lat_workload is None else latency(args, bootstrap, lat_workload)
        rss_rows = [rss(args, bootstrap, n, store, cache) for n, store, cache in args.rss]

    if workload is not None and tput is not None:
        _print_throughput(args, workload, tput, broker_pid)
    if lat_workload is not None and lat is not None:
        _print_latency(args, lat_workload, lat)
    if rss_rows:
        _print_rss(rss_rows)
    print(f"\n(total {time.monotonic() - started:.0f} s)")


def mix_events_per_conversation(mix: Mix) -> float:
    """Ingress events per conversation of `mix`, from a small sample (sizes the latency workload)."""
    sample = build(20, mix, prefix="size", concurrency=20)
    return len(sample.events) / 20


def _print_broker_threads(kinds: list[str], cpu: dict[str, list[dict[str, float]]]) -> None:
    """Who had the cores beside the contender: the broker's by thread family, and the stolen ones."""
    med = statistics.median
    families = cputime.BROKER_FAMILIES
    print(f"\n| contender | broker cores: {' | '.join(families)} | machine cores stolen |")
    print("|---|" + "---:|" * (len(families) + 1))
    for kind in kinds:
        used = [med(c[f"broker_{family}"] for c in cpu[kind]) for family in families]
        steal = med(c["steal"] for c in cpu[kind])
        print(f"| {NAMES[kind]} | {' | '.join(f'{u:.2f}' for u in used)} | {steal:.2f} |")
    print(
        "\n(the broker's threads by what they do, `bench/cputime.py` BROKER_THREADS: request handling, "
        "the JIT compilers, the garbage collector, the rest; stolen: cores the hypervisor gave to "
        "other guests, part of the machine's busy cores)"
    )


def _print_throughput(
    args: argparse.Namespace, workload: Workload, tput: dict[str, Any], broker_pid: int | None
) -> None:
    med = statistics.median
    procs = f"{args.processes} process{'es' if args.processes > 1 else ''}"
    print(
        f"\n### Throughput ({len(workload.events):,} ingress events, {args.conversations:,} conversations, "
        f"{workload.committed_turns:,} committed turns, {args.partitions} partitions, runtime in "
        f"{procs}, batches ≤ {args.batch_max_records} records / {args.batch_max_ms} ms; "
        f"median of {args.repeats})\n"
    )
    broker = "broker cores" if broker_pid else "broker cores (pid unknown)"
    print(
        f"| contender | events/s (median) | runs | contender cores | contender CPU µs/event "
        f"| {broker} | machine busy cores |"
    )
    print("|---|---:|---|---:|---:|---:|---:|")
    for kind in args.contenders:
        rates, cpu = tput["rates"][kind], tput["cpu"][kind]
        runs = ", ".join(f"{r:,.0f}" for r in rates)
        used = {k: med(c[k] for c in cpu) for k in ("contender", "broker", "machine")}
        per_event = med(1e6 * c["contender"] / r for c, r in zip(cpu, rates, strict=True))
        print(
            f"| {NAMES[kind]} | {med(rates):,.0f} | {runs} | {used['contender']:.2f} | {per_event:,.0f} "
            f"| {used['broker']:.2f} | {used['machine']:.2f} |"
        )
    print(
        "\n(cores: CPU seconds / wall seconds from ready to done; µs/event: CPU of the contender's "
        f"processes per event; medians over the repeats; the machine has {os.cpu_count()} cores, shared)"
    )
    if broker_pid:
        _print_broker_threads(args.contenders, tput["cpu"])
    for name, values in tput["per_repeat"].items():
        print(
            f"- {name}: **{med(values):.3f}**{GOALS.get(name, '')} (median of per-repeat ratios "
            f"{', '.join(f'{r:.3f}' for r in values)})"
        )
    print(
        f"check (last repeat): {tput['check']} (expected committed = {workload.committed_turns}, "
        "rejections = 0, quarantine = 0)"
    )


def _print_latency(args: argparse.Namespace, lat_workload: Workload, lat: dict[str, Any]) -> None:
    med = statistics.median
    print(
        f"\n### Latency, ingress append → committed output ({len(lat_workload.events):,} events at "
        f"{args.rate}/s, {len(lat_workload.commit_events):,} commits measured; median of {args.repeats})\n"
    )
    print("| contender | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    for kind in ("raw", "runtime"):
        print(f"| {kind} | {med(lat[kind]['p50']):.1f} | {med(lat[kind]['p99']):.1f} |")
    print(
        f"| runtime / raw | {med(lat['runtime']['p50']) / med(lat['raw']['p50']):.2f} "
        f"| {med(lat['runtime']['p99']) / med(lat['raw']['p99']):.2f} |"
    )


def _print_rss(rss_rows: list[dict[str, Any]]) -> None:
    print(
        "\n### Processor RSS (one process, all partitions; user turn + dispatch request per conversation)\n"
    )
    print(
        "| conversations | store | state cache | events/s | RSS at ready MB | peak RSS MB | RSS at end MB |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rss_rows:
        print(
            f"| {r['conversations']:,} | {r['store']} | {r['state_cache']} | {r['events_per_s']:,.0f} "
            f"| {r['rss_ready_mb']:.0f} | {r['peak_rss_mb']:.0f} | {r['rss_end_mb']:.0f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
