"""Guards of `state_json.py` that no test defended: found by mutation testing (session 25).

`StateJson` keeps the JSON of an operation's parts and of a request once per object, keyed by
identity, and drops an entry when its object is collected: a mutant that missed the cache
every time changed only the CPU, one that never dropped an entry kept every operation ever
folded (goal 4's memory), and neither changed a byte. The blocks of an assembler snapshot that
get content chunks are those with an int index seen once and a str content: a mutant that let a
second block of an index have chunks wrote two blocks' chunks under the same keys.
"""

from __future__ import annotations

import gc

from turnledger.dispatch.state import OperationState
from turnledger.dispatch.state_json import CONTENT_CHUNK, StateJson, assembler_contents, splice_operation

from .scenario import Conversation, text_stream
from .test_state_layout import _round_trip


def _streaming_op() -> tuple[Conversation, OperationState]:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["Hel"], stop=False)[:3])
    return c, c.state.operations["op-1"]


def test_an_operations_parts_and_its_request_are_serialized_once_per_object() -> None:
    """Two operations asked for in turn: each one's progress, own part and request part are the very
    bytes computed the first time (`is`), and a copy of an operation is serialized anew."""
    _, op = _streaming_op()
    other = op.model_copy(update={"updated_at_ms": op.updated_at_ms + 1})
    json = StateJson()
    first = [
        (json.operation_progress(o), json.operation_apart(o), json.request_part(o.request))
        for o in (op, other)
    ]
    again = [
        (json.operation_progress(o), json.operation_apart(o), json.request_part(o.request))
        for o in (op, other)
    ]
    for (progress, own, request), (progress_2, own_2, request_2) in zip(first, again, strict=True):
        assert progress is progress_2 and own is own_2 and request is request_2
    assert first[0][0] != first[1][0] and first[0][2] is first[1][2]  # one request, shared by both
    assert len(json.apart) == 2 and len(json.requests) == 1
    asked = op.request.model_copy(update={})  # an equal request, another object: its own entry
    parts = [json.request_part(r) for r in (asked, op.request, asked, op.request)]
    assert parts[0] is parts[2] and parts[1] is parts[3] and parts[0] is not parts[1]
    assert len(json.requests) == 2


def test_an_entry_goes_when_its_operation_or_request_is_collected() -> None:
    """The caches hold no operation or request alive and keep no entry of one that is gone."""
    _, op = _streaming_op()
    json = StateJson()
    copy = op.model_copy(update={"updated_at_ms": 1, "request": op.request.model_copy(update={})})
    json.operation_progress(copy)
    json.operation_apart(copy)
    json.request_part(copy.request)
    json.operation_progress(op)
    assert len(json.apart) == 2 and len(json.requests) == 1
    del copy
    gc.collect()
    assert list(json.apart) == [id(op)] and json.requests == {}


def test_only_one_block_of_an_index_gets_content_chunks() -> None:
    """A second block of an index, or a block whose content is not a str, stays inline; the state
    reads back equal with both blocks' contents whole (none the assembler writes, but a snapshot
    read from elsewhere may hold them)."""
    c, op = _streaming_op()
    assert op.assembler is not None
    long = "y" * (2 * CONTENT_CHUNK + 1)
    blocks = [
        {"index": 0, "content": "x" * (2 * CONTENT_CHUNK)},
        {"index": 0, "content": long},
        {"index": 1, "content": None},
        {"index": 2, "content": "z"},
    ]
    assembler = {**op.assembler, "blocks": blocks}
    contents = assembler_contents(assembler)
    assert contents == ((0, blocks[0]["content"], 2), None, None, (2, "z", 0))
    _round_trip(c.state.with_operation(op.model_copy(update={"assembler": assembler})))


def test_a_format_6_operation_is_spliced_at_its_first_newline_from_objects_only() -> None:
    """Format 6's own part is the JSON before and after the request, cut at its first newline (a space
    in a value is no cut); a progress that is not an object's text, or a part of other than two
    lines, splices to nothing."""
    before, after = b'{"operation_id":"op 1","state":"SENT"', b'"manifest":null,"note":"a b"}'
    spliced = splice_operation(before + b"\n" + after, b"{}", b'{"updated_at_ms":5}')
    request = b',"request":{},'
    assert spliced == before + request + b'"manifest":null,"note":"a b","updated_at_ms":5}'
    assert splice_operation(before + b"\n" + after, b"{}", b"[5]") is None
    assert splice_operation(before + after, b"{}", b"{}") is None
