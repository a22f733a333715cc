"""Properties of parser + assembler over the whole fixture corpus.

- truncation at EVERY byte offset never commits a tool call or partial text;
- duplicating / replaying any subset of deltas gives the clean stream's outcome;
- random chunk boundaries give identical deltas;
- snapshot/restore at every delta gives the same final outcome;
- interleaved parallel tool-call fragments assemble per block.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.streaming import BlockAssembler, parser_for
from turnledger.streaming.outcomes import Complete, Incomplete

from .support import TOOLS, api_of, assemble, fixture, fixture_names, parse, run

FIXTURES = fixture_names()
PROPERTY = settings(max_examples=20, derandomize=True, deadline=None)


@pytest.mark.parametrize("name", FIXTURES)
def test_truncation_at_every_byte_never_commits_a_part(name: str) -> None:
    """Every prefix, evaluated incrementally.

    The prefix of length k yields exactly the deltas a byte-at-a-time parser has
    emitted after k bytes (flush never adds any, and the byte-at-a-time test pins
    chunking invariance), so the outcome only changes at offsets where a delta
    appears: we evaluate `finish()` on a restored copy of the running assembler there.
    """
    data = fixture(name)
    full, _ = run(name)
    parser = parser_for(api_of(name), generation=1)
    running = BlockAssembler(TOOLS)
    outcome, assembler = assemble([])
    for offset in range(len(data)):
        new = parser.feed(data[offset - 1 : offset]) if offset else []
        if new:
            for delta in new:
                running.feed(delta)
            assembler = BlockAssembler.restore(running.snapshot(), TOOLS)
            outcome = assembler.finish()
        assert assembler.partial_tool_dispatches == 0
        if isinstance(outcome, Complete):
            # only a cut inside the final line terminators can still be the whole response
            assert data[offset:].strip(b"\r\n") == b"", (name, offset)
            assert outcome == full
        else:
            assert isinstance(outcome, Incomplete)
            assert outcome.retract_previews == bool(assembler.previews_retracted)
    # and spot-check that a fresh parse of a prefix agrees with the incremental view
    for offset in range(0, len(data), max(1, len(data) // 7)):
        fresh, _ = assemble(parse(api_of(name), [data[:offset]]))
        assert isinstance(fresh, Incomplete) or fresh == full


@pytest.mark.parametrize("name", FIXTURES)
@PROPERTY
@given(data=st.data())
def test_random_chunk_boundaries_give_identical_deltas(name: str, data: st.DataObject) -> None:
    raw = fixture(name)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(raw)), max_size=40)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert parse(api_of(name), chunks) == parse(api_of(name), [raw])


@pytest.mark.parametrize("name", FIXTURES)
def test_byte_at_a_time_gives_identical_deltas(name: str) -> None:
    raw = fixture(name)
    assert parse(api_of(name), [raw[i : i + 1] for i in range(len(raw))]) == parse(api_of(name), [raw])


@pytest.mark.parametrize("name", FIXTURES)
@PROPERTY
@given(data=st.data())
def test_duplicates_and_replays_give_the_clean_outcome(name: str, data: st.DataObject) -> None:
    deltas = parse(api_of(name), [fixture(name)])
    clean, _ = assemble(deltas)
    # insert re-deliveries of earlier deltas at random later points (at-least-once delivery)
    noisy: list[NormalizedDelta] = []
    for i, delta in enumerate(deltas):
        noisy.append(delta)
        replays = data.draw(st.lists(st.integers(0, i), max_size=2))
        noisy += [deltas[j] for j in replays]
    # and replay a random subset of the whole stream at the end (a re-opened stream)
    noisy += data.draw(st.lists(st.sampled_from(deltas), max_size=len(deltas)))
    outcome, assembler = assemble(noisy)
    assert outcome == clean
    assert assembler.duplicates_dropped == len(noisy) - len(deltas)
    assert assembler.partial_tool_dispatches == 0


@pytest.mark.parametrize("name", FIXTURES)
@PROPERTY
@given(data=st.data())
def test_reordered_delivery_is_held_until_the_gap_fills(name: str, data: st.DataObject) -> None:
    deltas = parse(api_of(name), [fixture(name)])
    clean, _ = assemble(deltas)
    shuffled = data.draw(st.permutations(deltas))
    outcome, _ = assemble(shuffled)
    assert outcome == clean


@pytest.mark.parametrize("name", FIXTURES)
def test_snapshot_restore_at_every_delta_gives_the_same_outcome(name: str) -> None:
    deltas = parse(api_of(name), [fixture(name)])
    clean, _ = assemble(deltas)
    for cut in range(len(deltas) + 1):
        first = BlockAssembler(TOOLS)
        for delta in deltas[:cut]:
            first.feed(delta)
        snapshot = first.snapshot()
        restored = BlockAssembler.restore(snapshot, TOOLS)
        assert restored == first
        assert restored.previews() == first.previews()
        assert BlockAssembler.snapshot_has_previews(snapshot) == bool(first.previews())
        for delta in deltas[cut:]:
            restored.feed(delta)
        assert restored.finish() == clean


def _chat_chunk(index: int, call_id: str | None, name: str | None, arguments: str) -> bytes:
    import json

    call: dict[str, object] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        call["id"] = call_id
        call["type"] = "function"
        call["function"] = {"name": name, "arguments": arguments}
    chunk = {
        "id": "chatcmpl-interleave",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


@PROPERTY
@given(data=st.data())
def test_interleaved_parallel_tool_fragments_assemble_per_block(data: st.DataObject) -> None:
    import json

    calls = [
        ("call_a", "get_weather", json.dumps({"location": "Oslo, Norway", "unit": "celsius"})),
        ("call_b", "get_time", json.dumps({"timezone": "Europe/Oslo"})),
        ("call_c", "get_weather", json.dumps({"location": "Lima, Peru"})),
    ]
    pieces: dict[int, list[str]] = {}
    for index, (_, _, arguments) in enumerate(calls):
        cuts = sorted(data.draw(st.sets(st.integers(1, len(arguments) - 1), max_size=5)))
        pieces[index] = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
    # a random interleaving that keeps each call's own fragments in order
    order = data.draw(st.permutations([i for i, frags in pieces.items() for _ in frags]))
    stream = b""
    taken = dict.fromkeys(pieces, 0)
    for index in order:
        first = taken[index] == 0
        call_id, name, _ = calls[index]
        stream += _chat_chunk(index, call_id if first else None, name, pieces[index][taken[index]])
        taken[index] += 1
    stream += (
        b'data: {"id":"chatcmpl-interleave","object":"chat.completion.chunk","model":"m",'
        b'"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\ndata: [DONE]\n\n'
    )
    outcome, assembler = assemble(parse("openai-chat", [stream]))
    assert isinstance(outcome, Complete), outcome
    got = {b.call_id: (b.tool_name, b.arguments) for b in outcome.tool_calls}
    assert got == {call_id: (name, arguments) for call_id, name, arguments in calls}
    assert assembler.partial_tool_dispatches == 0


def test_every_fixture_has_a_stop_or_is_expected_incomplete() -> None:
    """Guard the corpus itself: each complete fixture really ends in a message stop."""
    for name in FIXTURES:
        deltas = parse(api_of(name), [fixture(name)])
        outcome, _ = assemble(deltas)
        has_stop = any(d.type is DeltaType.MESSAGE_STOP and d.stop_reason for d in deltas)
        assert isinstance(outcome, Complete) <= has_stop
