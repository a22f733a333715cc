"""`BlockAssembler.feed_into` (the dispatch fold's feed) is `feed` without the FeedResult.

The oracle is the `feed` the assembler had before `feed_into` existed, kept verbatim
below: over any delivery (reordered, duplicated, foreign, after finish) both give the
same status per delta, the same preview updates, and the same snapshot after each delta.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.model.deltas import NormalizedDelta
from turnledger.streaming import BlockAssembler
from turnledger.streaming.outcomes import FeedResult, FeedStatus

from .support import TOOLS, api_of, delivery, fixture, fixture_names, parse

PROPERTY = settings(max_examples=25, derandomize=True, deadline=None)


class _Oracle(BlockAssembler):
    def feed(self, delta: NormalizedDelta) -> FeedResult:
        if self.response_handle is None or self.generation is None:
            self.response_handle, self.generation = delta.response_handle, delta.generation
        elif delta.response_handle != self.response_handle or delta.generation != self.generation:
            return FeedResult(FeedStatus.FOREIGN)
        if self._finished or self._closed is not None:
            return FeedResult(FeedStatus.LATE)
        sequence = delta.delta_sequence
        if sequence < self._next or sequence in self._held:
            self.duplicates_dropped += 1
            return FeedResult(FeedStatus.DUPLICATE)
        if sequence > self._next:
            self._held[sequence] = delta
            return FeedResult(FeedStatus.HELD)
        updates: dict[int, str] = {}
        self._apply(delta, updates)
        while self._next in self._held:
            self._apply(self._held.pop(self._next), updates)
        return FeedResult(FeedStatus.ACCEPTED, updates)


@pytest.mark.parametrize("name", fixture_names())
@PROPERTY
@given(data=st.data())
def test_feed_into_equals_the_original_feed(name: str, data: st.DataObject) -> None:
    deltas = parse(api_of(name), [fixture(name)])
    delivered = delivery(deltas, data)
    handle = deltas[0].response_handle if deltas else "h"
    bindings = [
        {},
        {"generation": 1},
        {"response_handle": handle},
        {"response_handle": handle, "generation": 1},
    ]
    binding = data.draw(st.sampled_from([*bindings, {"response_handle": "other", "generation": 1}]))
    oracle, fast = _Oracle(TOOLS, **binding), BlockAssembler(TOOLS, **binding)
    finish_at = data.draw(st.integers(0, len(delivered) + 1))
    updates: dict[int, str] = {}
    for position, delta in enumerate(delivered):
        if position == finish_at:
            assert fast.finish() == oracle.finish()
        expected = oracle.feed(delta)
        status = fast.feed_into(delta, updates)
        assert (status, updates) == (expected.status, expected.preview_updates)
        assert fast.snapshot() == oracle.snapshot()
        updates.clear()
    assert fast.finish() == oracle.finish()
    assert fast.snapshot() == oracle.snapshot()


def test_feed_into_writes_only_accepted_updates_into_the_callers_dict() -> None:
    deltas = parse(api_of("anthropic_text.sse"), [fixture("anthropic_text.sse")])
    assembler = BlockAssembler(TOOLS)
    updates = {99: "kept"}
    for delta in deltas:
        assembler.feed_into(delta, updates)
    assert updates[99] == "kept"
    assert assembler.feed_into(deltas[0], updates) is FeedStatus.DUPLICATE
    assert updates == {99: "kept", **assembler.previews()}
