"""Previews carry the text appended since the block's previous preview, at its offset in code points.

One answer's preview bytes grow with its length, not its square; a reader appends a record only at
exactly the length it holds, so the offsets must chain: each record starts where the block's previous
one ended, whatever the event boundaries, restores of the assembler or resumes in between.
"""

from __future__ import annotations

from turnledger.codec import decode, default_codec, encode
from turnledger.codec.history import fingerprint_hex
from turnledger.dispatch.state import ConversationState
from turnledger.model.deltas import DeltaType
from turnledger.model.events import PreviewRetracted, PreviewUpdated
from turnledger.streaming.assembler import BlockAssembler

from .scenario import Conversation, _DeltaMaker, text_stream


def _previews(c: Conversation) -> list[tuple[int, int, str, int]]:
    return [(p.block_index, p.text_offset, p.text, p.through_sequence) for p in c.of(PreviewUpdated)]


def _zigzag(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _zigzag(len(raw)) + raw


def test_each_event_previews_only_what_it_appended_at_the_offset_where_the_last_one_ended() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["Hel", "lo", " 日本", "🎉!", " bye"])
    c.deltas(stream[:4])  # message start, block start, "Hel", "lo": coalesced into one record
    c.deltas(stream[4:5])  # " 日本"
    c.deltas(stream[5:7])  # "🎉!", " bye"
    assert _previews(c) == [(0, 0, "Hello", 3), (0, 5, " 日本", 4), (0, 8, "🎉! bye", 6)]
    # the emoji is one code point: the offsets are of the text a reader holds, not of its bytes
    assert [p.text_end for p in c.of(PreviewUpdated)] == [5, 8, 14]
    c.deltas(stream[7:])
    assert c.state.operations["op-1"].state.value == "COMMITTED"


def test_the_record_on_the_topic_is_the_appended_text_and_its_offset_in_the_current_schema() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    stream = text_stream(["ab", "cdé"])
    c.deltas(stream[:3])
    c.deltas(stream[3:4])
    second = c.of(PreviewUpdated)[1]
    current = default_codec().registry.reader("turnledger.v1.PreviewUpdated")
    assert current is not None
    body = b"".join(
        (
            _string("conv-1"),
            _string("op-1"),
            _zigzag(1),  # attemptGeneration
            _zigzag(0),  # blockIndex
            _string("cdé"),  # only what this event appended
            _zigzag(3),  # throughSequence
            _zigzag(second.occurred_at_ms),
            _zigzag(2),  # textOffset: after "ab"
        )
    )
    data = encode(second)
    assert data == b"\xc3\x01" + current.fingerprint + body
    assert current.fingerprint == bytes.fromhex(fingerprint_hex(current.schema))
    assert decode(data) == second
    assert len(data) == 10 + len(body) == 33


def test_two_text_blocks_in_one_event_each_carry_their_own_offset() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    d = _DeltaMaker("msg_1", 1)
    first = [
        d(DeltaType.MESSAGE_START, -1),
        d(DeltaType.BLOCK_START, 0, block_kind="text"),
        d(DeltaType.TEXT_DELTA, 0, text="one"),
        d(DeltaType.BLOCK_STOP, 0),
        d(DeltaType.BLOCK_START, 1, block_kind="text"),
        d(DeltaType.TEXT_DELTA, 1, text="tw"),
    ]
    c.deltas(first)
    c.deltas([d(DeltaType.TEXT_DELTA, 1, text="o"), d(DeltaType.TEXT_DELTA, 1, text="!")])
    assert _previews(c) == [(0, 0, "one", 2), (1, 0, "tw", 5), (1, 2, "o!", 7)]


def test_a_fold_restoring_the_assembler_from_its_snapshot_continues_at_the_same_offsets() -> None:
    """The offset shown lives in the assembler's snapshot: a processor restarted from its changelog
    (no live assembler) emits exactly the records of one that never stopped."""
    stream = text_stream(["a", "b", "c", "d"])
    live = Conversation()
    live.user("hello")
    live.dispatch_to_streaming()
    restored = Conversation()
    restored.user("hello")
    restored.dispatch_to_streaming()
    for cut in ((0, 3), (3, 4), (4, 6)):
        live.deltas(stream[slice(*cut)])
        restored.state = ConversationState.model_validate_json(restored.state.model_dump_json())
        restored.deltas(stream[slice(*cut)])
    assert _previews(restored) == _previews(live) == [(0, 0, "a", 2), (0, 1, "b", 3), (0, 2, "cd", 5)]


def test_deltas_applied_on_a_resume_are_in_the_next_preview() -> None:
    """A resume applies held deltas without previewing them: the next preview starts where the last
    preview ended, not where the text ends, so no reader sees a gap."""
    assembler = BlockAssembler({})
    d = _DeltaMaker("msg_1", 1)
    for delta in (d(DeltaType.MESSAGE_START, -1), d(DeltaType.BLOCK_START, 0, block_kind="text")):
        assembler.feed(delta)
    assembler.feed(d(DeltaType.TEXT_DELTA, 0, text="ab"))
    assert assembler.take_preview(0) == (0, "ab")
    gap = d(DeltaType.TEXT_DELTA, 0, text="X")  # sequence 3, held: sequence 4 comes first
    ahead = d(DeltaType.TEXT_DELTA, 0, text="cd")
    assembler.feed(ahead)
    assembler.resume(gap.delta_sequence)  # 3 acknowledged: a violation, but 4 applies without preview
    snapshot = assembler.snapshot()
    assert [b["shown"] for b in snapshot["blocks"] if "shown" in b] == [2]
    again = BlockAssembler.restore(snapshot, {})
    assert again.take_preview(0) == (2, "cd") == assembler.take_preview(0)


def test_a_snapshot_without_a_shown_offset_has_shown_all_of_its_text() -> None:
    """Snapshots written before appended previews (and every snapshot at an event's end) omit it."""
    assembler = BlockAssembler({})
    for delta in text_stream(["ab"], stop=False)[:3]:
        assembler.feed(delta)
    assembler.take_preview(0)
    snapshot = assembler.snapshot()
    assert all("shown" not in b for b in snapshot["blocks"])
    again = BlockAssembler.restore(snapshot, {})
    assert again.take_preview(0) == (2, "")


def test_a_generation_read_again_after_its_retraction_previews_from_offset_zero() -> None:
    c = Conversation()
    c.user("hello")
    c.request()
    c.attempt(replayable=True)
    c.sent()
    c.bind()
    stream = text_stream(["Hel", "lo"], stop=False)
    c.deltas(stream[:3])
    c.deltas(stream[3:])
    c.recovered()
    c.replay()
    c.bind()
    c.deltas(text_stream(["Hi"], stop=False))
    assert len(c.of(PreviewRetracted)) == 1
    assert _previews(c) == [(0, 0, "Hel", 2), (0, 3, "lo", 3), (0, 0, "Hi", 2)]
