"""The pure dispatch engine (`BatchEngine.process_batch`) on the realistic mix, no broker.

    python -m bench.bench_dispatch_engine [--conversations 2000] [--batch 500] [--repeats 3]
        [--baseline REF] [--tune-gc] [--lazy-counters] [--profile] [--processes N]
    python -m bench.bench_dispatch_engine --mix capacity [--streams 300] [--seconds 10] [--batch 100] ...

`--mix capacity` folds bench_capacity's workload instead: `--streams` conversations up to their
HandleBound, then each stream's StreamDeltas records (six text deltas as one run, every 100 ms, for
`--seconds`) in due order, to the commit: the streaming hot path alone, and the changelog bytes a
streamed record writes.

The workload (bench/dispatch_workload.py) is built once, encoded, and folded in batches of
`--batch` records (interleaved conversations, so a batch dirties up to `--batch`
conversations, as in the processor). Every repeat runs in a fresh subprocess
(bench/engine_runner.py). `--baseline REF` exports git REF to a temp dir and alternates
repeats of the two engines on the same records: the table reports the median events/s (CPU
time) of each, the ratio, the bytes written to the changelog per ingress event (key and value of
every state record the batches wrote), the bytes the state holds at the end, the CPU of reading
every conversation's state back from the store afterwards (restore µs/conversation, the fastest of
three passes: what taking the conversations over from the changelog costs a processor, e.g. after
a failover), and whether their outputs are byte-identical and their final states identical (each
conversation's state JSON as the engine reads it back, so a change of the layout on the changelog
compares the states, not the records). The decoded comparisons leave out fields that hold None, so
an optional field added since the baseline does not count where it is unset; a baseline whose
schema history lacks a current record schema is given the workload encoded by its own codec.
The StreamDeltas events carry their text deltas as runs, as the worker appends them
(`streaming/runs.py`); a baseline tree without runs folds the same deltas expanded, encoded by its
own codec (`encode_runner.py`), and its outputs and final state are compared as they are.
`--tune-gc` applies the Kafka runtime's GC settings (`tune_gc`: freeze after restore, larger
gen0 threshold) to the current tree only, e.g. with `--baseline HEAD` to measure just that.
Both engines load the token counters' vocabularies before the clock starts, as the runtime does
at start (`preload_counters`, processors/dispatch_partition.py): ~0.45 s once per process, which the
first dispatches of a 300-conversation run otherwise paid inside the timing (~40 µs of each event's
average); `--lazy-counters` times them again as before.
`--processes N` times the box instead of the engine: per repeat, one runner alone and N runners of the
current tree folding the same records at once, their clocks started together (a barrier in
engine_runner.py), and reports their events/s of wall time together against one alone, with no broker on
the machine: the most that N processes of this engine can gain here, a ceiling for bench_dispatch's
`runtime_x2` (issue 20's goal 2b), whose processes also share the cores with the broker.
`--profile` prints the cProfile top functions of one in-process run instead (counters preloaded).
`--instructions` counts instead of timing: each tree folds the records once under valgrind's cachegrind
(`engine_runner.py --loop-only`: no digest in or after the loop), and once on the first record alone,
whose count (the interpreter, the imports, the counters) is subtracted; the table gives instructions an
event and the ratio. A count does not move with the machine's load, so one run replaces the repeats;
it takes minutes (valgrind runs ~50x slower) and checks no outputs (run without it for that).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pickle
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.cputime import machine_steal_s
from bench.dispatch_workload import Mix, build, offered_tools
from bench.engine_runner import BARRIER_ENV
from turnledger.codec import encode
from turnledger.model.events import IngressEvent, StreamDeltas, TurnSubmitted
from turnledger.streaming.runs import expand

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "engine_runner.py"
ENCODER = Path(__file__).resolve().parent / "encode_runner.py"


def _export(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    target = into / "baseline"
    target.mkdir()
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(target, filter="data")
    return target


def _run(
    tree: Path, records: Path, batch: int, tune_gc: bool = False, lazy_counters: bool = False
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if tune_gc:
        env["TURNLEDGER_BENCH_TUNE_GC"] = "1"
    if lazy_counters:
        env["TURNLEDGER_BENCH_LAZY_COUNTERS"] = "1"
    out = subprocess.run(
        [sys.executable, str(RUNNER), str(records), str(batch)],
        check=True,
        capture_output=True,
        env=env,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if not result["turnledger"].startswith(str(tree)):
        raise RuntimeError(f"measured {result['turnledger']}, not the tree under {tree}")
    return result


def side_by_side(results: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """Of runners that folded at once: their events a second of wall time, from the first start to
    the last end, and the cores they used together over that span."""
    start = min(r["started_at"] for r in results)
    span = max(r["started_at"] + r["wall_s"] for r in results) - start
    return sum(r["events"] for r in results) / span, sum(r["cpu_s"] for r in results) / span


def _run_side_by_side(
    tree: Path, records: Path, batch: int, processes: int, tune_gc: bool
) -> list[dict[str, Any]]:
    """`processes` runners of `tree` on the same records at once, their clocks started together
    (engine_runner's barrier: each says ready once loaded, all are told to go)."""
    env = {**os.environ, "PYTHONPATH": str(tree), BARRIER_ENV: "1"}
    if tune_gc:
        env["TURNLEDGER_BENCH_TUNE_GC"] = "1"
    command = [sys.executable, str(RUNNER), str(records), str(batch)]
    runners = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        for _ in range(processes)
    ]
    for runner in runners:
        assert runner.stdout is not None
        if runner.stdout.readline().strip() != "ready":
            raise RuntimeError(f"runner {runner.pid} did not get ready (exit {runner.wait()})")
    for runner in runners:
        assert runner.stdin is not None
        runner.stdin.write("go\n")
        runner.stdin.close()
    results = []
    for runner in runners:
        assert runner.stdout is not None
        out = runner.stdout.read()
        if runner.wait() != 0:
            raise RuntimeError(f"runner {runner.pid} exited {runner.returncode}")
        result = json.loads(out.strip().splitlines()[-1])
        if not result["turnledger"].startswith(str(tree)):
            raise RuntimeError(f"measured {result['turnledger']}, not the tree under {tree}")
        results.append(result)
    return results


def _processes(args: argparse.Namespace, records: Path, rows: int, what: str) -> None:
    """`--processes N`: the box's own scaling on this workload, no broker: per repeat, one runner
    alone and N at once (alternating which goes first), each on its own copy of the records."""
    alone: list[dict[str, Any]] = []
    together: list[list[dict[str, Any]]] = []
    stolen: dict[int, list[float]] = {1: [], args.processes: []}

    def timed(n: int, step: Callable[[], None]) -> None:
        steal, started = machine_steal_s(), time.monotonic()
        step()
        stolen[n].append((machine_steal_s() - steal) / (time.monotonic() - started))

    for repeat in range(args.repeats):
        steps = [
            lambda: timed(1, lambda: alone.append(_run(ROOT, records, args.batch, args.tune_gc))),
            lambda: timed(
                args.processes,
                lambda: together.append(
                    _run_side_by_side(ROOT, records, args.batch, args.processes, args.tune_gc)
                ),
            ),
        ]
        for step in steps if repeat % 2 == 0 else steps[::-1]:
            step()
    print(
        f"\n{rows} ingress events, {what}, batches of {args.batch}, {interpreter()}; "
        f"median of {args.repeats}\n"
    )
    print(
        "| runners at once | events/s (wall, all together) | cores | µs of CPU an event "
        "| machine cores stolen (per repeat) |"
    )
    print("|---:|---:|---:|---:|---|")
    one = [(r["events"] / r["wall_s"], r["cpu_s"] / r["wall_s"], r["cpu_s"] / r["events"]) for r in alone]
    many = [
        (*side_by_side(rs), sum(r["cpu_s"] for r in rs) / sum(r["events"] for r in rs)) for rs in together
    ]
    for n, table in ((1, one), (args.processes, many)):
        rate, cores, cpu = (statistics.median(column) for column in zip(*table, strict=True))
        steal = ", ".join(f"{v:.2f}" for v in stolen[n])
        print(f"| {n} | {rate:,.0f} | {cores:.2f} | {1e6 * cpu:.0f} | {steal} |")
    ratios = [m[0] / o[0] for o, m in zip(one, many, strict=True)]
    print(
        f"\n{args.processes} at once / one alone: **{statistics.median(ratios):.3f}** (per repeat "
        f"{', '.join(f'{r:.3f}' for r in ratios)}): what {args.processes} processes of this engine can "
        "gain on this machine with nothing else on it, a ceiling for bench_dispatch's runtime_x2"
    )


INSTRUCTIONS = re.compile(r"I\s+refs:\s+([\d,]+)")
"""cachegrind's summary line of the instructions the process executed."""


def interpreter() -> str:
    """The interpreter both trees run on, e.g. `CPython 3.11.7`: timings and instruction counts
    differ by interpreter (session 24: 3.12.1 took 1.18x the CPU of 3.11.7 on the same records) and
    counts also by machine (libc and the extensions pick their code paths by CPU), so a figure
    compares only with one of the same run."""
    return f"{platform.python_implementation()} {platform.python_version()}"


def instructions_executed(cachegrind_stderr: str) -> int:
    """The count of instructions in cachegrind's summary (`I refs: 13,755,509,295`)."""
    found = INSTRUCTIONS.search(cachegrind_stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {cachegrind_stderr[-500:]!r}")
    return int(found.group(1).replace(",", ""))


def _count(tree: Path, records: Path, batch: int, tune_gc: bool) -> int:
    """Instructions of one `engine_runner.py --loop-only` process on `records`, under cachegrind."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if tune_gc:
        env["TURNLEDGER_BENCH_TUNE_GC"] = "1"
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    command = [sys.executable, str(RUNNER), str(records), str(batch), "--loop-only"]
    # once without valgrind first, so that the counted run compiles no module: a stale or missing .pyc
    # compiled in the workload's run and not in the start-up's would be counted as the workload's
    subprocess.run(command, check=True, capture_output=True, env=env)
    done = subprocess.run([*valgrind, *command], check=True, capture_output=True, env=env, text=True)
    if not json.loads(done.stdout.strip().splitlines()[-1])["turnledger"].startswith(str(tree)):
        raise RuntimeError(f"valgrind measured another tree than {tree}")
    return instructions_executed(done.stderr)


def per_event(workload: int, start_up: int, events: int) -> float:
    """Instructions an event: the run on the workload less the run on its first record alone (the
    interpreter, the imports, the pickle, the token counters), over the other events."""
    return (workload - start_up) / max(events - 1, 1)


def _instructions(
    trees: dict[str, Path], inputs: dict[Path, Path], batch: int, tune_gc: bool, tmp: Path
) -> None:
    """`--instructions`: each tree's engine instructions an event, counted by valgrind (one run each:
    a count does not vary with the machine's load), and their ratio."""
    if shutil.which("valgrind") is None:
        raise SystemExit(
            "--instructions counts with valgrind, which is not installed (apt-get install valgrind)"
        )
    counts: dict[str, float] = {}
    for name, tree in trees.items():
        rows = pickle.loads(inputs[tree].read_bytes())
        first = tmp / f"first-{len(counts)}.pickle"
        first.write_bytes(pickle.dumps(rows[:1]))
        print(f"  counting {name} under valgrind (two runs, minutes)", file=sys.stderr, flush=True)
        workload = _count(tree, inputs[tree], batch, tune_gc and tree == ROOT)
        counts[name] = per_event(workload, _count(tree, first, batch, tune_gc and tree == ROOT), len(rows))
    print("\n| engine | instructions an event (valgrind) |\n|---|---:|")
    for name, count in counts.items():
        print(f"| {name} | {count:,.0f} |")
    if len(counts) == 2:
        (base, base_count), (_, current_count) = counts.items()
        print(f"\ncurrent / {base}: {base_count / current_count:.3f}x fewer instructions an event")


def _has_runs(tree: Path) -> bool:
    return (tree / "turnledger" / "streaming" / "runs.py").exists()


def _reads_current_schemas(tree: Path) -> bool:
    """Does the tree's schema history hold every record schema of the current tree (can it decode
    the workload as the current codec encodes it)?"""
    from turnledger.codec.history import current_record_schemas, file_name

    history = tree / "turnledger" / "_schemas" / "history"
    return all((history / file_name(schema)).exists() for schema in current_record_schemas())


def _encoded_for(tree: Path, workload: Sequence[IngressEvent], tmp: Path, *, expand_runs: bool) -> Path:
    """The workload encoded by the tree's own codec (`encode_runner.py`), so it reads it in its schema
    versions: for a tree without delta runs (`expand_runs`: every run expanded into the deltas it
    stands for), or one that predates a schema version of the current tree (a new optional field);
    its outputs and state are then compared with the current tree's as they are. A field the tree
    does not know is left out when it holds its default (e.g. `settleWithinMs` before 4815045)."""
    events = []
    for event in workload:
        data = event.model_dump(mode="json")
        if isinstance(event, StreamDeltas):
            if expand_runs:
                deltas = [p.model_dump(mode="json") for d in event.deltas for p in expand(d)]
                data["deltas"] = [{k: v for k, v in d.items() if k != "following_texts"} for d in deltas]
            data["deltas"] = [_without_nones(d) for d in data["deltas"]]
        if isinstance(event, TurnSubmitted):
            data["blocks"] = [_without_nones(b) for b in data["blocks"]]
        events.append((event.conversation_id.encode(), type(event).__name__, data, _at_default(event)))
    suffix = "expanded" if expand_runs else "own"
    source, target = tmp / f"events-{suffix}.pickle", tmp / f"records-{suffix}.pickle"
    source.write_bytes(pickle.dumps(events))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, str(ENCODER), str(source), str(target)], check=True, env=env)
    return target


def _without_nones(item: dict[str, Any]) -> dict[str, Any]:
    """A delta or block without its fields that hold None: every such field is optional with None for
    default, so any tree reads the same item without them, including one that predates the field
    (`encode_runner.py` checks only the event's own fields)."""
    return {k: v for k, v in item.items() if v is not None}


def _at_default(event: IngressEvent) -> list[str]:
    """The event's optional fields that hold their default: an older tree that lacks such a field
    reads the same event without it (`encode_runner.py` drops only those)."""
    return [
        name
        for name, info in type(event).model_fields.items()
        if not info.is_required() and getattr(event, name) == info.get_default(call_default_factory=True)
    ]


def capacity_events(streams: int, seconds: float) -> list[IngressEvent]:
    """bench_capacity's workload as ingress events: each stream's conversation up to HandleBound, then
    its StreamDeltas records (one of 6 text deltas, a run, every 100 ms) in due order, to the commit."""
    from bench.bench_capacity import _load, _setup
    from turnledger.codec import decode

    rows, opened = _setup(streams, "cap")
    load = _load(opened, seconds, 6, 0.1)
    return [decode(value) for _, value in rows] + [decode(record.value) for record in load]  # type: ignore[misc]


def _profile(rows: list[tuple[bytes, bytes]], batch: int, top: int) -> None:
    from bench.engine_runner import DictStore
    from turnledger.adapters.admission import preload_counters
    from turnledger.dispatch.engine import BatchEngine, SourceRecord

    records = [SourceRecord("turnledger.ingress", 0, i, k, v) for i, (k, v) in enumerate(rows)]
    preload_counters()
    engine, store = BatchEngine(), DictStore()
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(0, len(records), batch):
        engine.process_batch(records[i : i + batch], store)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conversations", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=Mix.rounds)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=1_000, help="conversations active at once")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="git ref of the engine to compare with")
    parser.add_argument(
        "--tune-gc",
        action="store_true",
        help="apply the Kafka runtime's GC settings (processors/gc_tuning.py) to the current tree only",
    )
    parser.add_argument(
        "--lazy-counters",
        action="store_true",
        help="time the token counters' loading by the first dispatches (both trees), as before",
    )
    parser.add_argument(
        "--mix",
        choices=("bench", "capacity"),
        default="bench",
        help="bench: the realistic mix (bench/dispatch_workload.py); capacity: bench_capacity's streams",
    )
    parser.add_argument("--streams", type=int, default=300, help="--mix capacity: concurrent streams")
    parser.add_argument("--seconds", type=float, default=10.0, help="--mix capacity: each answer's length")
    parser.add_argument(
        "--extra-tools",
        type=int,
        default=0,
        help="--mix bench: tools offered beside the two called, ~1 KB each (an agent's toolset)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="N > 1: time N processes of the current engine folding at once against one alone (no broker)",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="300 conversations, 1 repeat")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count each tree's instructions an event with valgrind instead of timing (no digests)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.conversations, args.concurrency, args.repeats = 300, 300, 1

    if args.mix == "capacity":
        events = capacity_events(args.streams, args.seconds)
        what = f"{args.streams} streams of {args.seconds:g} s at 60 tokens/s, a record every 100 ms"
    else:
        mix = Mix(rounds=args.rounds, extra_tools=args.extra_tools)
        workload = build(args.conversations, mix, concurrency=args.concurrency)
        events = workload.events
        what = f"{args.conversations} conversations, {workload.committed_turns} committed turns"
        if args.extra_tools:
            what += f", {len(offered_tools(mix))} tools offered"
    rows = [(e.conversation_id.encode(), encode(e)) for e in events]
    if args.profile:
        _profile(rows, args.batch, args.top)
        return
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        records = Path(tmp) / "records.pickle"
        records.write_bytes(pickle.dumps(rows))
        current = "current (tune_gc)" if args.tune_gc else "current"
        trees = {current: ROOT}
        inputs = {ROOT: records}
        if args.baseline:
            baseline = _export(args.baseline, Path(tmp))
            trees = {f"baseline {args.baseline}": baseline, **trees}
            if not _has_runs(baseline):
                inputs[baseline] = _encoded_for(baseline, events, Path(tmp), expand_runs=True)
            elif not _reads_current_schemas(baseline):
                inputs[baseline] = _encoded_for(baseline, events, Path(tmp), expand_runs=False)
            else:
                inputs[baseline] = records
        if args.processes > 1:
            _processes(args, records, len(rows), what)
            return
        if args.instructions:
            print(f"\n{len(rows)} ingress events, {what}, batches of {args.batch}, {interpreter()}")
            _instructions(trees, inputs, args.batch, args.tune_gc, Path(tmp))
            return
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                runs[name].append(
                    _run(tree, inputs[tree], args.batch, args.tune_gc and tree == ROOT, args.lazy_counters)
                )
    print(
        f"\n{len(rows)} ingress events, {what}, batches of {args.batch}, {interpreter()}; "
        f"median of {args.repeats} (CPU time); token counters "
        f"{'loaded by the first dispatches (timed)' if args.lazy_counters else 'preloaded (untimed)'}\n"
    )
    print(
        "| engine | events/s (CPU) | events/s (wall) | µs/event | changelog bytes/event | state bytes "
        "| restore µs/conversation | output / state digest |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    rates: dict[str, float] = {}
    for name, results in runs.items():
        cpu = statistics.median(r["cpu_s"] for r in results)
        wall = statistics.median(r["wall_s"] for r in results)
        rates[name] = len(rows) / cpu
        digests = {f"{r['digest'][:12]} / {r['state_digest'][:12]}" for r in results}
        restore = statistics.median(r["restore_cpu_s"] / r["conversations"] for r in results)
        print(
            f"| {name} | {len(rows) / cpu:,.0f} | {len(rows) / wall:,.0f} | {1e6 * cpu / len(rows):.0f} "
            f"| {results[0]['changelog_bytes'] / len(rows):,.0f} | {results[0]['state_bytes']:,} "
            f"| {1e6 * restore:,.0f} | {', '.join(sorted(digests))} |"
        )
    if args.baseline:
        (base, base_runs), (_, cur_runs) = list(runs.items())
        ratios = [b["cpu_s"] / c["cpu_s"] for b, c in zip(base_runs, cur_runs, strict=True)]
        same_outputs = {r["digest"] for r in base_runs} == {r["digest"] for r in cur_runs}
        same_state = {r["state_digest"] for r in base_runs} == {r["state_digest"] for r in cur_runs}
        same_decoded = {r["decoded_digest"] for r in base_runs} == {r["decoded_digest"] for r in cur_runs}
        print(
            f"\nspeed-up current / {base}: {statistics.median(ratios):.2f}x (median of per-repeat ratios); "
            f"outputs byte-identical: {'yes' if same_outputs else 'NO'}; "
            f"decoded-equal (previews as whole texts): {'yes' if same_decoded else 'NO'}; "
            f"final state identical (its JSON, read back): {'yes' if same_state else 'NO'}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
