"""Run every `bench/bench_*.py` module's `main()`; with none yet, say so and succeed."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import bench


def main() -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    if not names:
        print("No benchmarks yet (add bench/bench_<name>.py with a main()).")
        return 0
    for name in names:
        print(f"== {name}")
        module = importlib.import_module(f"bench.{name}")
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
