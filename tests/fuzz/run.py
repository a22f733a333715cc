"""Run the mutation fuzzer from the command line: `python -m tests.fuzz.run --inputs 100000`.

Prints, per target, the inputs, wall time, rate and outcome counts, and every failure with the command
that replays it (`--target NAME --only INDEX`); `--report file.json` writes the same as JSON. Exit
status 1 when any input failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

from tests.fuzz.mutation import Result, run_target
from tests.fuzz.targets import TARGETS


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _line(result: Result) -> str:
    outcomes = ", ".join(f"{o} {c}" for o, c in sorted(result.outcomes.items(), key=lambda kv: -kv[1]))
    cpu_rate = result.inputs / result.cpu_seconds if result.cpu_seconds else 0.0
    stopped = " (interrupted)" if result.interrupted else ""
    return (
        f"{result.target}: {result.inputs} inputs{stopped} in {result.seconds:.1f} s wall "
        f"({result.rate:.0f}/s), {result.cpu_seconds:.1f} s CPU ({cpu_rate:.0f}/s), "
        f"{len(result.failures)} failures; {outcomes}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="inputs per target (default 100,000)")
    parser.add_argument(
        "--seed", type=int, default=1, help="run seed: input i of target t is Random(f'{seed}:{t}:{i}')"
    )
    parser.add_argument(
        "--target", action="append", choices=sorted(TARGETS), help="only these targets (repeatable)"
    )
    parser.add_argument("--only", type=int, help="replay the one input of this index (with --target)")
    parser.add_argument("--start", type=int, default=0, help="index of the first input")
    parser.add_argument("--report", help="write the results as JSON here")
    parser.add_argument("--commit", help="the commit to record (default: git rev-parse HEAD of the cwd)")
    args = parser.parse_args(argv)

    names = args.target or list(TARGETS)
    start, inputs = (args.only, 1) if args.only is not None else (args.start, args.inputs)
    began = datetime.now(UTC)
    results = []
    for name in names:
        result = run_target(
            TARGETS[name],
            inputs,
            args.seed,
            start=start,
            progress=lambda r: print("  ..." + _line(r), flush=True),
        )
        results.append(result)
        print(_line(result), flush=True)
        for failure in result.failures:
            print(failure, flush=True)
        if result.interrupted:
            break
    if args.report:
        report = {
            "date": began.isoformat(timespec="seconds"),
            "commit": args.commit or _commit(),
            "python": platform.python_version(),
            "seed": args.seed,
            "start": start,
            "command": " ".join(sys.argv),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "targets": {
                r.target: {
                    "inputs": r.inputs,
                    "also_counts_for": list(TARGETS[r.target].also_counts_for),
                    "interrupted": r.interrupted,
                    "seconds": round(r.seconds, 1),
                    "cpu_seconds": round(r.cpu_seconds, 1),
                    "per_second": round(r.rate, 1),
                    "per_cpu_second": round(r.inputs / r.cpu_seconds, 1) if r.cpu_seconds else 0.0,
                    "outcomes": dict(sorted(r.outcomes.items())),
                    "failures": [vars(f) for f in r.failures],
                }
                for r in results
            },
        }
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if any(r.failures for r in results) else 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)  # stop early, still report what ran
    started = time.monotonic()
    code = main()
    print(f"total {time.monotonic() - started:.1f} s", flush=True)
    sys.exit(code)
