"""Run every `bench/bench_*.py` module's `main()`.

    python -m bench            # every benchmark at its own default size (minutes to an hour)
    python -m bench --quick    # every benchmark at a reduced size, as CI runs it: the benchmarks
                               # keep running end to end; their speeds mean nothing at this size

`QUICK` holds each module's reduced-size arguments; a new benchmark must add its row (the quick run
fails on a module without one, so none is forgotten).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench

QUICK: dict[str, list[str]] = {
    "bench_adapters": ["--repeats", "1"],
    "bench_capacity": ["--quick"],
    "bench_dispatch": [
        "--conversations",
        "30",
        "--concurrency",
        "30",
        "--repeats",
        "1",
        "--seconds",
        "2",
        "--rate",
        "100",
        "--rss=",
        # runtime_x2 (two more processes, topics of their own) would add about 3 s to a run kept
        # under a minute; its plumbing has unit tests (tests/unit/test_bench_dispatch_contenders.py)
        "--contenders",
        "raw,raw_avro,raw_codec,runtime",
    ],
    "bench_dispatch_engine": ["--conversations", "50", "--concurrency", "50", "--repeats", "1"],
    "bench_previews": ["--deltas", "50,100"],
    "bench_processor": ["--records", "1000", "--keys", "50", "--seconds", "1", "--rate", "500"],
    "bench_projection": ["--conversations", "50"],
    "bench_scaling": ["--records", "2000", "--repeats", "1", "--members", "1", "--partitions", "2"],
    "bench_sequence": ["--repeats", "1"],
    "bench_streaming": ["--repeats", "1", "--text-deltas", "100", "--calls", "1"],
    # interpreted only: `--compiled` needs a C compiler for mypyc
    "bench_typed_state": ["--steps", "2000", "--repeats", "1"],
}


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    if quick and (missing := [n for n in names if n not in QUICK]):
        print(f"no reduced-size arguments for {', '.join(missing)}: add them to QUICK", file=sys.stderr)
        return 2
    for name in names:
        args = QUICK[name] if quick else []
        print(f"== {name} {' '.join(args)}".rstrip(), flush=True)
        started = time.monotonic()
        module = importlib.import_module(f"bench.{name}")
        sys.argv = [f"bench/{name}.py", *args]  # the modules whose main() reads sys.argv
        module.main()
        print(f"== {name}: {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
