"""Chunked token counting equals counting the whole text, and its cache stays bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.adapters import conversations
from turnledger.adapters.admission import TiktokenCounter
from turnledger.adapters.base import Rendered
from turnledger.adapters.encodings import load_encoding
from turnledger.adapters.registry import get_adapter
from turnledger.adapters.token_chunks import SPLITTABLE, ChunkCounts, independent_chunks

# What the two regexes treat differently: ASCII and non-ASCII letters of every case class
# (Lu, Ll, Lt, Lm, Lo), combining marks, digits of several scripts, contractions,
# whitespace runs and line breaks, JSON punctuation, and the cut marker itself.
FRAGMENTS = (
    *"aZq09\"'{}[],:/\\ \t\n\r.-_",
    '"}],',
    '"}],"',
    "'s",
    "'LL",
    "'re",
    "é",
    "ß",
    "ǅ",
    "ʰ",
    "中文",
    "\u0301",
    "٣",
    "Ⅻ",
    "🙂",
    "  ",
    " \n ",
    "ABCdef",
    "abcDEF",
    "123456",
)
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)


def _count(encoding: str, text: str) -> int:
    return len(load_encoding(encoding).encode_ordinary(text))


@pytest.mark.parametrize("encoding", sorted(SPLITTABLE))
@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_every_neutral_cut_keeps_the_count(encoding: str, text: str) -> None:
    """The module's claim itself, at every `"` after an ASCII letter or digit, not only at the marker."""
    whole = _count(encoding, text)
    for i in range(1, len(text)):
        if text[i] == '"' and text[i - 1].isascii() and text[i - 1].isalnum():
            assert _count(encoding, text[:i]) + _count(encoding, text[i:]) == whole, (text, i)


@pytest.mark.parametrize("encoding", sorted(SPLITTABLE))
@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_chunked_count_equals_whole_count(encoding: str, text: str) -> None:
    chunks = independent_chunks(text)
    assert "".join(chunks) == text
    counter = TiktokenCounter(encoding)
    assert counter.count(text.encode()) == counter.count_text(text)
    assert counter.count(text.encode()) == counter.count_text(text)  # again, from the cache


@pytest.mark.parametrize("adapter_id", ["openai-chat@1", "openai-responses@1"])
@pytest.mark.parametrize(
    "build",
    [
        conversations.plain_text,
        conversations.parallel_tools,
        conversations.snippets,
        conversations.thinking_with_signature,
        conversations.long_history,
        conversations.injection,
    ],
)
def test_rendered_requests_count_as_a_whole(adapter_id: str, build: object) -> None:
    rendered = get_adapter(adapter_id).render(build(), conversations.params_for("openai"))  # type: ignore[operator]
    assert isinstance(rendered, Rendered)
    counter = TiktokenCounter("o200k_base")
    assert len(independent_chunks(rendered.body.decode())) > 1
    assert counter.count(rendered.body) == counter.count_text(rendered.body.decode())


def test_chunk_counts_hit_on_the_exact_chunk_only() -> None:
    calls: list[str] = []
    counts = ChunkCounts(lambda text: calls.append(text) or len(text))
    assert counts("abc") == 3
    assert counts("abc") == 3
    assert counts("abd") == 3
    assert calls == ["abc", "abd"]


def test_chunk_counts_stay_within_their_byte_budget() -> None:
    counts = ChunkCounts(len, max_bytes=2_000)
    for i in range(100):
        assert counts(f"{i:03d}" * 50) == 150
        assert counts.held_bytes <= 2_000
    assert 0 < len(counts) < 100
    assert counts("x" * 5_000) == 5_000  # bigger than the budget: counted, not kept
    assert counts.held_bytes <= 2_000


def test_chunk_counts_evict_the_least_recently_used() -> None:
    counts = ChunkCounts(len, max_bytes=3 * (160 + 10))
    for text in ("a" * 10, "b" * 10, "c" * 10):
        counts(text)
    counts("a" * 10)  # touched: now the most recent
    counts("d" * 10)
    calls: list[str] = []
    counts._count = lambda text: calls.append(text) or len(text)  # type: ignore[method-assign]
    counts("a" * 10)
    counts("b" * 10)
    assert calls == ["b" * 10]


@pytest.mark.parametrize(
    ("text", "chunks"),
    [
        ('a"}],b', ['a', '"}],b']),  # the earliest cut there can be: after one character
        ('"}],x', ['"}],x']),  # a marker at the start has nothing before it to cut after
        ('"}],x"}],', ['"}],x', '"}],']),
        ('a"}],b"}],c"}],d', ['a', '"}],b', '"}],c', '"}],d']),  # every cut, not only the first and last
        ('x"}], "}],y"}],z', ['x', '"}], "}],y', '"}],z']),  # the middle one follows a blank
        ('é"}],1"}],', ['é"}],1', '"}],']),  # after a non-ASCII letter: no cut
        ("", [""]),
    ],
)  # fmt: skip
def test_the_cuts_taken_and_the_ones_refused(text: str, chunks: list[str]) -> None:
    assert independent_chunks(text) == chunks
    assert "".join(chunks) == text


def test_the_cache_accounts_its_bytes_exactly() -> None:
    """Each kept chunk costs its length and 160; a chunk that fits the budget exactly is kept, and the
    eviction that makes room takes back what the evicted chunk cost."""
    counts = ChunkCounts(len, max_bytes=2 * 170)
    assert counts.held_bytes == 0
    counts("a" * 10)
    assert (len(counts), counts.held_bytes) == (1, 170)
    counts("b" * 10)
    assert (len(counts), counts.held_bytes) == (2, 340)  # exactly the budget: nothing evicted
    counts("c" * 10)
    assert (len(counts), counts.held_bytes) == (2, 340)  # "a…" out, "c…" in
    whole = ChunkCounts(len, max_bytes=170)
    whole("d" * 10)
    assert (len(whole), whole.held_bytes) == (1, 170)  # a chunk of exactly the budget is kept
    whole("e" * 11)
    assert (len(whole), whole.held_bytes) == (1, 170)  # one byte over: counted, not kept
