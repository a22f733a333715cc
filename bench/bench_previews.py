"""Preview bytes per delta: appended previews (text at an offset) vs whole-text previews, same run.

    .venv/bin/python -m bench.bench_previews [--deltas 250,500,1000,2000] [--per-event 1]

One operation streams a text answer of N deltas (`--per-event` deltas per StreamDeltas ingress
event) through the pure dispatch fold. Its `PreviewUpdated` outputs are encoded as the processor
writes them (current schema: the text appended at `textOffset`). The earlier form is measured on
the same outputs: each record as the schema's earlier version (`PreviewUpdated@eb76c4c8738cee09`,
archived) wrote it, carrying the whole text so far. Reported: preview bytes on the topic per delta
at each length, and how much that grows from the shortest answer to the longest (1.0 = linear total
bytes, O(1) per delta; the earlier form grows with the answer's length, quadratic total).
"""

from __future__ import annotations

import argparse
from typing import Any

from tests.unit.dispatch.scenario import Conversation, text_stream
from turnledger.codec import default_codec
from turnledger.model.events import PreviewUpdated

EARLIER = bytes.fromhex("eb76c4c8738cee09")  # schemas/history/turnledger.v1.PreviewUpdated@eb76c4c8738cee09
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog,", "café", "日本", "🎉")


def previews_of(deltas: int, per_event: int) -> list[PreviewUpdated]:
    conv = Conversation("bench-previews")
    conv.user("tell me a long story")
    conv.dispatch_to_streaming()
    parts = [f"{WORDS[i % len(WORDS)]} " for i in range(deltas)]
    stream = text_stream(parts)
    for start in range(0, len(stream), per_event):
        conv.deltas(stream[start : start + per_event])
    return conv.of(PreviewUpdated)


def earlier_bytes(previews: list[PreviewUpdated]) -> int:
    """The same previews as the earlier version wrote them: the whole text so far in each."""
    codec = default_codec()
    writer = codec.registry.writer(EARLIER)
    assert writer is not None, "the earlier PreviewUpdated version is not in the schema history"
    whole = ""
    total = 0
    for p in previews:
        whole = whole[: p.text_offset] + p.text
        datum: dict[str, Any] = p.model_dump(by_alias=True, exclude={"text_offset"})
        total += len(codec.encode_datum(writer, {**datum, "text": whole}))
    return total


def measure(deltas: int, per_event: int) -> dict[str, float]:
    codec = default_codec()
    previews = previews_of(deltas, per_event)
    current = sum(len(codec.encode(p)) for p in previews)
    earlier = earlier_bytes(previews)
    return {
        "deltas": deltas,
        "records": len(previews),
        "current": current / deltas,
        "earlier": earlier / deltas,
        "current_total": current,
        "earlier_total": earlier,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", default="250,500,1000,2000")
    parser.add_argument("--per-event", type=int, default=1)
    args = parser.parse_args(argv if argv is not None else [])
    sizes = [int(n) for n in args.deltas.split(",")]
    rows = [measure(n, args.per_event) for n in sizes]
    print(f"deltas per StreamDeltas event: {args.per_event}")
    print(f"{'deltas':>7} {'records':>8} {'appended B/delta':>17} {'whole-text B/delta':>19} {'ratio':>8}")
    for r in rows:
        ratio = r["earlier"] / r["current"]
        print(
            f"{r['deltas']:>7} {r['records']:>8} {r['current']:>17.1f} {r['earlier']:>19.1f} {ratio:>7.1f}x"
        )
    first, last = rows[0], rows[-1]
    print(
        f"bytes per delta from {first['deltas']} to {last['deltas']} deltas: appended "
        f"x{last['current'] / first['current']:.2f}, whole text x{last['earlier'] / first['earlier']:.2f}"
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
