"""Exact BPE counts of a request body from separately counted chunks, and their cache.

Each dispatch counts the whole rendered request again, and a conversation's next
request repeats its previous one almost entirely. Counting only "the new part" is
wrong in general (BPE pieces can span the join), but some cut points are provably
neutral, and cutting there lets the unchanged chunks be counted once.

The neutral cuts: for `cl100k_base` and `o200k_base`, cutting `text` at an index
`i` where `text[i]` is `"` and `text[i-1]` is an ASCII letter or digit gives
`count(text) == count(text[:i]) + count(text[i:])`. tiktoken splits the text with
the encoding's regex into pieces and byte-pair encodes each piece on its own, so
it is enough that the pieces of `text` are those of `text[:i]` then those of
`text[i:]`:

1. A piece ends at `i`. An ASCII letter or digit can only be matched by the letter
   alternatives or by `\\p{N}{1,3}` (every other alternative, and the optional
   one-character prefix of the letter alternatives, exclude `\\p{L}` and `\\p{N}`),
   and none of those can go on with `"`: it is no letter, mark or digit, and not
   the `'` that opens a contraction.
2. The pieces from `i` on are those of `text[i:]`: the patterns have no lookbehind
   and no start anchor, so matching restarts at `i` seeing only `text[i:]`.
3. The pieces before `i` are those of `text[:i]`: a match attempt that started
   before `i` can only reach `i` having consumed `text[i-1]` with a letter or digit
   class, and what it tests next (a letter, mark, digit or `'`) fails on `"` just
   as on the end of the text. The only end-sensitive constructs, `\\s+(?!\\S)` and
   `\\s++$`, test a position right after whitespace, and `text[i-1]` is not.

This holds for the regexes of those two encodings only (`SPLITTABLE`); tests
compare chunked and whole counts on generated texts for both. Cuts are taken only
before `"}],` (with sorted keys, where a message's content list of parts ends), so
a conversation's earlier messages, and the constant tail of model and tool
definitions, come out as the same chunks in every request; cutting before every
`"}` gives more hits but costs more in lookups than it saves.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

SPLITTABLE = frozenset({"cl100k_base", "o200k_base"})
"""Encodings whose regex the argument above was checked against."""

_CUT_BEFORE = '"}],'
_ENTRY_BYTES = 160
"""What one cached entry costs beyond its characters (str header, dict slot, links), roughly."""


def independent_chunks(text: str) -> list[str]:
    """`text` cut at the neutral points before each `"}],` that follows an ASCII letter or digit."""
    chunks = []
    start = 0
    i = text.find(_CUT_BEFORE, 1)
    while i != -1:
        before = text[i - 1]
        if before.isascii() and before.isalnum():
            chunks.append(text[start:i])
            start = i
        i = text.find(_CUT_BEFORE, i + 1)
    chunks.append(text[start:])
    return chunks


class ChunkCounts:
    """Token count per exact chunk text, least recently used out first, bounded in bytes.

    Keyed by the chunk itself (no hash stands in for it), so a hit is the count of
    exactly that text. The bound is on the (approximate) bytes held, so long chunks
    cannot make it large; a chunk bigger than the whole budget is counted and not
    kept. A lock keeps the bookkeeping whole if processors share it across threads.
    """

    def __init__(self, count: Callable[[str], int], max_bytes: int = 32 << 20) -> None:
        self._count = count
        self._max_bytes = max_bytes
        self._bytes = 0
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, chunk: str) -> int:
        with self._lock:
            tokens = self._counts.get(chunk)
            if tokens is not None:
                self._counts.move_to_end(chunk)
                return tokens
        tokens = self._count(chunk)
        if len(chunk) + _ENTRY_BYTES <= self._max_bytes:
            self._keep(chunk, tokens)
        return tokens

    def _keep(self, chunk: str, tokens: int) -> None:
        with self._lock:
            if chunk in self._counts:
                return
            self._counts[chunk] = tokens
            self._bytes += len(chunk) + _ENTRY_BYTES
            while self._bytes > self._max_bytes:
                evicted, _ = self._counts.popitem(last=False)
                self._bytes -= len(evicted) + _ENTRY_BYTES

    def __len__(self) -> int:
        return len(self._counts)

    @property
    def held_bytes(self) -> int:
        return self._bytes
