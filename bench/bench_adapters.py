"""Adapter render + digest cost, as a ratio to orjson.dumps of the same payload; token counting cost.

For each current adapter and conversations of 10 / 100 / 1,000 blocks: median time of
`adapter.render()` (graph → payload → canonical bytes → sha256) over repeats, and the
median of `orjson.dumps(payload)` of the very payload it rendered, in the same run.
The ratio is what our rules, canonical sorting and digest cost on top of a bare
serialization. Token counting: ms per 100k tokens for the tiktoken (offline o200k)
counter and the bytes/3 estimate, on a rendered body.

Run: .venv/bin/python bench/bench_adapters.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.adapters.conversations import long_history, params_for
from turnledger.adapters.admission import EstimateCounter, counter_for
from turnledger.adapters.base import Rendered
from turnledger.adapters.registry import ADAPTERS, LATEST


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()

    print("| adapter | blocks | render+digest (ms, median) | orjson.dumps (ms, median) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for size in (10, 100, 1000):
        sequence = long_history(size)
        for adapter_id in sorted(LATEST.values()):
            adapter = ADAPTERS[adapter_id]
            params = params_for(adapter.provider)
            payload = adapter.build(sequence, params)
            assert isinstance(payload, dict)
            repeats = args.repeats if size < 1000 else max(5, args.repeats // 3)
            t_render = median_seconds(lambda a=adapter, p=params, s=sequence: a.render(s, p), repeats)
            t_dumps = median_seconds(lambda p=payload: orjson.dumps(p), repeats)
            print(
                f"| {adapter_id} | {len(sequence.blocks)} | {t_render * 1e3:.3f} | {t_dumps * 1e3:.4f} "
                f"| {t_render / t_dumps:.0f}x |"
            )

    rendered = ADAPTERS["openai-chat@1"].render(long_history(1000), params_for("openai"))
    assert isinstance(rendered, Rendered)
    print()
    print("| counter | body bytes | tokens | ms per call (median) | ms per 100k tokens |")
    print("|---|---:|---:|---:|---:|")
    t0 = time.perf_counter()
    tiktoken_counter = counter_for("o200k_base")
    load_ms = (time.perf_counter() - t0) * 1e3
    for counter in (tiktoken_counter, counter_for("cl100k_base"), EstimateCounter()):
        tokens = counter.count(rendered.body)
        t = median_seconds(lambda c=counter: c.count(rendered.body), max(5, args.repeats // 3))
        print(
            f"| {counter.name} | {len(rendered.body)} | {tokens} | {t * 1e3:.2f} "
            f"| {t * 1e3 * 100_000 / tokens:.3f} |"
        )
    print(f"\n(one-time offline o200k_base load, hash check included: {load_ms:.0f} ms)")


if __name__ == "__main__":
    main()
