"""SseDecoder: WHATWG event-stream rules and chunk-boundary independence."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.streaming.sse import SseDecoder, SseEvent


def decode(*chunks: bytes) -> list[SseEvent]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def test_fields_comments_retry_and_multiline_data() -> None:
    decoder = SseDecoder()
    raw = (
        b"\xef\xbb\xbf: hi\nretry: 3000\nretry: x1\nid: 7\nevent: a\ndata: one\ndata:two\ndata\nbogus: 1\n\n"
    )
    assert decoder.feed(raw) == [SseEvent("a", "one\ntwo\n", "7")]
    assert decoder.retry == 3000


def test_id_persists_and_nul_ids_are_ignored() -> None:
    assert decode(b"id: 1\ndata: a\n\nid: 2\x00\ndata: b\n\n") == [
        SseEvent(None, "a", "1"),
        SseEvent(None, "b", "1"),
    ]


def test_event_without_data_is_not_dispatched() -> None:
    assert decode(b"event: ping\n\ndata: x\n\n") == [SseEvent(None, "x", None)]


def test_cr_lf_and_crlf_line_ends() -> None:
    assert decode(b"data: a\r\rdata: b\n\ndata: c\r\n\r\n") == [SseEvent(None, x, None) for x in "abc"]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    assert decode(b"data: a\r", b"\n\r", b"\ndata: b\r\n", b"\r\n") == [
        SseEvent(None, "a", None),
        SseEvent(None, "b", None),
    ]


def test_utf8_split_inside_a_character() -> None:
    raw = "data: 日本🎉\n\n".encode()
    assert decode(raw[:8], raw[8:11], raw[11:]) == [SseEvent(None, "日本🎉", None)]


def test_unterminated_event_is_discarded_at_end_of_stream() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: complete\n\ndata: cut") == [SseEvent(None, "complete", None)]
    assert decoder.flush() == []
    assert decoder.discarded_partial


LINES = st.sampled_from(
    [
        b"data: x\n",
        b"data: \xc3\xa9\xe2\x98\x95\n",
        b"\n",
        b"\r\n",
        b"\r",
        b": c\n",
        b"event: e\r\n",
        b"id: 9\n",
    ]
)


@settings(max_examples=80, derandomize=True, deadline=None)
@given(lines=st.lists(LINES, max_size=30), data=st.data())
def test_chunking_never_changes_the_events(lines: list[bytes], data: st.DataObject) -> None:
    raw = b"".join(lines)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(raw)), max_size=10)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert decode(*chunks) == decode(raw)


def test_a_cr_lf_split_inside_an_event_is_one_line_end() -> None:
    """A chunk that ends in the CR of a CRLF: the next chunk's LF belongs to it, not a blank line
    that would dispatch the event early (and drop its `event` field)."""
    assert decode(b"event: e\r", b"\ndata: a\r", b"\ndata: b\r\n\r\n") == [SseEvent("e", "a\nb", None)]


def test_a_leading_bom_is_dropped_and_only_there() -> None:
    expected = [SseEvent(None, "a", None)]
    assert decode(b"\xef\xbb\xbfdata: a\n\n") == expected
    assert decode(b"\xef\xbb", b"\xbfdata: a\n\n") == expected  # the BOM cut inside its bytes
    assert decode(b"data: ", b"\xef\xbb\xbfa\n\n") == [SseEvent(None, "\ufeffa", None)]


def test_discarded_partial_says_whether_the_stream_ended_inside_an_event() -> None:
    fresh = SseDecoder()
    assert fresh.discarded_partial is False and fresh.retry is None
    for chunks, partial in (
        ([b"data: a\n\n"], False),
        ([b"event: e\n"], True),  # a field of an event that never ended
        ([b"data: a\n\n", b"\xe2\x82"], True),  # a character cut at the end of the stream
    ):
        decoder = SseDecoder()
        for chunk in chunks:
            decoder.feed(chunk)
        assert decoder.flush() == []
        assert decoder.discarded_partial is partial, chunks
