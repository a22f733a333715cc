"""Adapter render + digest cost, as a ratio to orjson.dumps of the same payload; token counting cost.

For each current adapter and conversations of 10 / 100 / 1,000 blocks, medians over repeats,
in the same run:

- `dumps`: `orjson.dumps(payload)` of the very payload the adapter renders (the yardstick);
- `before`: `Rendered.of(adapter.build(...))`, the render as it was up to 96a8cce (graph →
  payload → canonical bytes → sha256, the whole history every time);
- `fresh`: `adapter.render(sequence, params)` with no cache: a render from nothing (a
  conversation's first dispatch in this process);
- `continued`: `adapter.render(sequence, params, cache)` with the cache holding the render of
  the same conversation at its previous dispatch point (just before its last assistant turn:
  the last 6 of 1,002 blocks are new): the case of a dispatch late in a long conversation. The
  cache is seeded outside the timed call, afresh for every repeat.

Times are CPU (thread) time; the three renders take turns in every round, `dumps` runs on its
own, back to back (warm caches: the smallest time, so the hardest yardstick).
Ratios are to `dumps`. Token counting: ms per 100k tokens for the tiktoken (offline o200k)
counter and the bytes/3 estimate, on a rendered body.

The rest of a dispatch that grows with the history is its manifest's block list (a `BlockRef`
per block, in the manifest's digest and in its Avro record): per size, the manifest built, sealed
and encoded as a `ManifestIssued` record with `plain` refs (every block's ref built, dumped and
encoded again, as before the listings), a `listed` list built from nothing, and a list `continued`
from the listing of the previous dispatch point (dispatch/manifest_blocks.py), all with the same
request body (the rendered one); the bytes of the three are checked equal first.

Run: .venv/bin/python bench/bench_adapters.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.adapters.conversations import long_history, params_for, sequence_of
from turnledger.adapters.admission import EstimateCounter, counter_for
from turnledger.adapters.base import Rendered
from turnledger.adapters.prefix import RenderCache, RenderedPrefix
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.codec import encode
from turnledger.dispatch.manifest_blocks import ListedBlocks, list_blocks
from turnledger.model.events import ManifestIssued
from turnledger.model.graph import BlockRef, MessageSequence, Role
from turnledger.model.manifest import DispatchManifest
from turnledger.model.self_encoded import SelfEncoded


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CPU time of `fn()` (thread time: wall time on a shared machine counts the preemptions)."""
    samples = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        samples.append(time.thread_time() - t0)
    return statistics.median(samples)


def interleaved_medians(
    cases: dict[str, Callable[[], Callable[[], object]]], repeats: int
) -> dict[str, float]:
    """Median CPU time of each case, the cases taking turns in every round so that a busy spell of
    the machine falls on all of them; each case builds its call untimed (the seeded cache), then
    only the call is timed."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, prepare in cases.items():
            call = prepare()
            t0 = time.thread_time()
            call()
            samples[name].append(time.thread_time() - t0)
    return {name: statistics.median(values) for name, values in samples.items()}


def previous_dispatch_point(sequence: MessageSequence) -> int:
    """Where the conversation's previous dispatch rendered it: just before its last assistant turn."""
    blocks = sequence.blocks
    return max(
        i
        for i in range(1, len(blocks))
        if blocks[i].role == Role.ASSISTANT and blocks[i - 1].role != Role.ASSISTANT
    )


def seeded(key: tuple[str, str], entry: RenderedPrefix) -> RenderCache:
    cache = RenderCache()
    cache.put(key, entry)
    return cache


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()

    print(
        "| adapter | blocks (new) | dumps ms | before ms (ratio) | fresh ms (ratio) | continued ms (ratio) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for size in (10, 100, 1000):
        sequence = long_history(size)
        cut = previous_dispatch_point(sequence)
        earlier = sequence_of(sequence.conversation_id, sequence.blocks[:cut], revision=cut)
        for adapter_id in sorted(LATEST.values()):
            adapter = ADAPTERS[adapter_id]
            params = params_for(adapter.provider)
            payload = adapter.build(sequence, params)
            assert isinstance(payload, dict)
            seeding = RenderCache()
            adapter.render(earlier, params, seeding)
            key = (adapter.adapter_id, sequence.conversation_id)
            entry = seeding.get(key)
            assert entry is not None
            expected = Rendered.of(payload)
            assert adapter.render(sequence, params) == expected
            assert adapter.render(sequence, params, seeded(key, entry)) == expected
            repeats = args.repeats if size < 1000 else max(5, args.repeats // 3)
            t = interleaved_medians(
                {
                    "before": lambda a=adapter, p=params, s=sequence: lambda: Rendered.of(a.build(s, p)),
                    "fresh": lambda a=adapter, p=params, s=sequence: lambda: a.render(s, p),
                    "continued": lambda a=adapter, p=params, s=sequence, k=key, e=entry: partial(
                        a.render, s, p, seeded(k, e)
                    ),
                },
                repeats,
            )
            t_dumps = median_seconds(
                lambda p=payload: orjson.dumps(p), 4 * repeats
            )  # warm: the hardest yardstick
            t_before, t_fresh, t_continued = t["before"], t["fresh"], t["continued"]
            print(
                f"| {adapter_id} | {len(sequence.blocks)} ({len(sequence.blocks) - cut}) "
                f"| {t_dumps * 1e3:.3f} "
                f"| {t_before * 1e3:.3f} ({t_before / t_dumps:.0f}x) "
                f"| {t_fresh * 1e3:.3f} ({t_fresh / t_dumps:.0f}x) "
                f"| {t_continued * 1e3:.3f} ({t_continued / t_dumps:.1f}x) |"
            )

    manifest_rows(args.repeats)

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


def manifest_record(sequence: MessageSequence, body: str, listed: SelfEncoded | None) -> bytes:
    """A dispatch's manifest of `sequence`, sealed and encoded as its ManifestIssued record."""
    manifest = DispatchManifest(
        operation_id="op-1",
        conversation_id=sequence.conversation_id,
        conversation_revision=sequence.conversation_revision,
        cancel_generation=0,
        sequence_digest=sequence.sequence_digest,
        blocks=tuple(map(BlockRef.of, sequence.blocks)) if listed is None else (),
        adapter="openai-chat@2",
        adapter_digest="sha256:" + "0" * 64,
        provider="openai",
        model_revision="gpt",
        toolset_digest="sha256:" + "1" * 64,
        max_output_tokens=1024,
        request_digest="sha256:" + "2" * 64,
        request_body=body,
        input_tokens=100,
    ).sealed(listed)
    return encode(ManifestIssued(manifest=manifest, occurred_at_ms=1))


def listed_refs(sequence: MessageSequence, previous: ListedBlocks | None = None) -> SelfEncoded:
    refs = (list_blocks(sequence.blocks) if previous is None else list_blocks(sequence.blocks, previous)).refs
    assert isinstance(refs, SelfEncoded)
    return refs


def manifest_rows(repeats: int) -> None:
    print()
    print("| blocks (new) | plain ms | listed ms (ratio) | continued ms (ratio) |")
    print("|---:|---:|---:|---:|")
    for size in (10, 100, 1000):
        sequence = long_history(size)
        cut = previous_dispatch_point(sequence)
        earlier = list_blocks(sequence.blocks[:cut])
        rendered = ADAPTERS["openai-chat@2"].render(sequence, params_for("openai"))
        assert isinstance(rendered, Rendered)
        body = rendered.body.decode()
        plain = manifest_record(sequence, body, None)
        assert manifest_record(sequence, body, listed_refs(sequence)) == plain
        assert manifest_record(sequence, body, listed_refs(sequence, earlier)) == plain
        t = interleaved_medians(
            {
                "plain": lambda s=sequence, b=body: partial(manifest_record, s, b, None),
                "listed": lambda s=sequence, b=body: lambda: manifest_record(s, b, listed_refs(s)),
                "continued": lambda s=sequence, b=body, e=earlier: (
                    lambda: manifest_record(s, b, listed_refs(s, e))
                ),
            },
            repeats if size < 1000 else max(5, repeats // 3),
        )
        print(
            f"| {len(sequence.blocks)} ({len(sequence.blocks) - cut}) | {t['plain'] * 1e3:.3f} "
            f"| {t['listed'] * 1e3:.3f} ({t['listed'] / t['plain']:.2f}x) "
            f"| {t['continued'] * 1e3:.3f} ({t['continued'] / t['plain']:.3f}x) |"
        )


if __name__ == "__main__":
    main()
