"""A conversation's state read back from the changelog's keys, in every format this release reads:
a whole state (formats 1 to 3, brought up to date by `migrate.py`) or a head and its parts (formats
4 to 8, each operation by its format's reader, `_OPERATION_READERS`). What was read is kept in a
`Stored`, so the next write knows what the store holds. The layout: `state_layout.py`.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import TypeAdapter
from pydantic_core import from_json, to_json

from turnledger.codec import CodecError, decode
from turnledger.dispatch.migrate import READABLE_FORMATS, UnreadableStateFormat, upgrade_state
from turnledger.dispatch.part_rows import operation_fields, progress_fields
from turnledger.dispatch.state import ConversationState, OperationState
from turnledger.dispatch.state_json import splice_operation, splice_request
from turnledger.dispatch.state_keys import (
    HANDLES_TAG,
    INLINE_CONTENTS_FORMAT,
    OBJECT_PARTS_FORMAT,
    PROGRESS_INLINE_FORMAT,
    ROWS_FORMAT,
    SPLIT_FORMAT,
    SPLIT_FORMATS,
    TURNS_TAG,
    blocks_key,
    chunk_key,
    content_key,
    head_key,
    operation_key,
    progress_key,
    request_key,
    toolset_key,
)
from turnledger.dispatch.stored import StateDecodeError, StateLayoutError, Stored, holds, snapshot_base
from turnledger.errors import StateFormatError
from turnledger.model.events import ConversationSnapshot
from turnledger.model.graph import Block
from turnledger.model.tools import ToolDefinition, toolset_of_json
from turnledger.sequence.graph_state import CallRecord, ResultRecord

_BLOCKS = TypeAdapter(tuple[Block, ...])
_BLOCK_IDS = TypeAdapter(dict[str, int])
_CALLS = TypeAdapter(dict[str, CallRecord])
_RESULTS = TypeAdapter(dict[str, ResultRecord])
_META = TypeAdapter(tuple[list[str], list[int], int, int])
_TURN_IDS = TypeAdapter(tuple[str, ...])
_HANDLES = TypeAdapter(dict[str, str])
_COUNTS = TypeAdapter(list[int | None])
_TEXT = TypeAdapter(str)


def decode_snapshot(value: bytes) -> ConversationSnapshot:
    try:
        snapshot = decode(value)
    except CodecError as exc:
        raise StateDecodeError(str(exc)) from exc
    if not isinstance(snapshot, ConversationSnapshot):
        raise StateDecodeError(f"{type(snapshot).__name__} is not a ConversationSnapshot")
    return snapshot


def decode_whole(snapshot: ConversationSnapshot) -> ConversationState:
    """A state written whole (formats 1 to 3), brought to the current format."""
    try:
        return upgrade_state(snapshot.format_version, snapshot.state)
    except UnreadableStateFormat as exc:
        whole = sorted(READABLE_FORMATS)
        detail = f"this release reads {whole} whole, {sorted(SPLIT_FORMATS)} split"
        raise StateDecodeError(f"state format {snapshot.format_version} ({detail})") from exc


Get = Callable[[str], bytes | None]


def read_state(get: Get, conversation_id: str) -> tuple[ConversationState, Stored] | None:
    """The conversation's state as the store holds it (None: no state yet), in either layout, and
    what was read. A value that does not parse as the part its key names is a `StateDecodeError`
    naming the conversation (never pydantic's or the JSON parser's own error): a changelog value
    another writer or a broken disk left must cost a typed refusal, whatever part it is."""
    try:
        return _read_state(get, conversation_id)
    except StateFormatError:
        raise
    except ValueError as exc:
        detail = f"the state of {conversation_id!r} on the changelog does not parse: {exc}"
        raise StateLayoutError(detail) from exc


def _read_state(get: Get, conversation_id: str) -> tuple[ConversationState, Stored] | None:
    key = head_key(conversation_id)
    value = get(key)
    if value is None:
        return None if key == conversation_id else _whole_under_bare_id(get, conversation_id)
    snapshot = _snapshot_of(value, key, conversation_id)
    stored = _read(conversation_id, snapshot.format_version, key, value, snapshot.state)
    if snapshot.format_version not in SPLIT_FORMATS:
        return decode_whole(snapshot), stored
    meta, newline, state_json = snapshot.state.partition(b"\n")
    if not newline:
        raise StateLayoutError(f"the head of {conversation_id!r} has no line after its part list")
    operation_ids, starts, turn_chunks, handle_chunks = _META.validate_json(meta)
    state = ConversationState.model_validate_json(state_json)
    turn_ids: list[str] = []
    for index in range(turn_chunks):
        turn_ids += _TURN_IDS.validate_json(
            _part(get, chunk_key(conversation_id, TURNS_TAG, index), conversation_id, stored)
        )
    handles: dict[str, str] = {}
    for index in range(handle_chunks):
        handles.update(
            _HANDLES.validate_json(
                _part(get, chunk_key(conversation_id, HANDLES_TAG, index), conversation_id, stored)
            )
        )
    operations = {operation_id: _read_operation(get, operation_id, stored) for operation_id in operation_ids}
    graph = state.graph
    blocks: list[Block] = []
    block_ids, calls, results = dict(graph.block_ids), dict(graph.calls), dict(graph.results)
    for start in starts:
        lines = _part(get, blocks_key(conversation_id, start), conversation_id, stored).split(b"\n")
        blocks.extend(_BLOCKS.validate_json(lines[0]))
        if len(lines) == 4:
            block_ids.update(_BLOCK_IDS.validate_json(lines[1]))
            calls.update(_CALLS.validate_json(lines[2]))
            results.update(_RESULTS.validate_json(lines[3]))
    graph = graph.model_copy(
        update={"blocks": tuple(blocks), "block_ids": block_ids, "calls": calls, "results": results}
    )
    update = {"graph": graph, "operations": operations, "turn_ids": tuple(turn_ids), "handles": handles}
    return state.model_copy(update=update), stored


def _read_operation(get: Get, operation_id: str, stored: Stored) -> OperationState:
    """An operation from its parts, in the head's format (`_OPERATION_READERS`)."""
    conversation_id = stored.conversation_id
    part = _part(get, operation_key(conversation_id, operation_id), conversation_id, stored)
    request = _part(get, request_key(conversation_id, operation_id), conversation_id, stored)
    read = _OPERATION_READERS[stored.format_version]
    if stored.format_version != SPLIT_FORMAT or request.startswith(b"{"):
        return read(get, operation_id, part, request, stored)
    request, tools = _toolset_apart(get, operation_id, request, stored)
    op = read(get, operation_id, part, request, stored)
    return op.model_copy(update={"request": op.request.model_copy(update={"tools": tools})})


def _toolset_apart(
    get: Get, operation_id: str, part: bytes, stored: Stored
) -> tuple[bytes, tuple[ToolDefinition, ...]]:
    """A format-8 request part (its toolset's digest, a newline, its JSON with `"tools":[]`): that
    JSON, and the toolset's definitions from its own part, parsed once per distinct toolset
    (`toolset_of_json`): a processor taking a partition over reads the same agent toolset back for
    each of its conversations, and parsing it was half of a conversation's restore with 22 tools."""
    conversation_id = stored.conversation_id
    digest, _, request = part.partition(b"\n")
    if not request.startswith(b"{") or _EMPTY_TOOLS not in request:
        raise StateLayoutError(f"operation {operation_id!r}'s request part is not a toolset digest and JSON")
    key = digest.decode()
    toolset = _part(get, toolset_key(conversation_id, key), conversation_id, stored)
    try:
        return request, toolset_of_json(key, toolset)
    except ValueError as exc:
        raise StateLayoutError(
            f"the toolset {key!r} of {conversation_id!r} is not a list of tools: {exc}"
        ) from exc


_EMPTY_TOOLS = b'"tools":[]'


def _lines(part: bytes, count: int, operation_id: str) -> list[bytes]:
    lines = part.split(b"\n", count - 1)
    if len(lines) != count:
        raise StateLayoutError(f"the part of operation {operation_id!r} has {len(lines)} lines")
    return lines


def _operation_inline(
    get: Get, operation_id: str, part: bytes, request: bytes, stored: Stored
) -> OperationState:
    """Format 4: the JSON before and after the request, the assembler's contents inline."""
    before, after = _lines(part, 2, operation_id)
    return OperationState.model_validate_json(splice_request(before, request, after))


def _operation_progress_inline(
    get: Get, operation_id: str, part: bytes, request: bytes, stored: Stored
) -> OperationState:
    """Format 5: the JSON before and after the request, the progress inline, then the chunk counts."""
    before, after, counts = _lines(part, 3, operation_id)
    op = OperationState.model_validate_json(splice_request(before, request, after))
    _read_contents(get, op, _COUNTS.validate_json(counts), stored)
    return op


def _operation_objects(
    get: Get, operation_id: str, part: bytes, request: bytes, stored: Stored
) -> OperationState:
    """Format 6: the operation's own part (two lines of JSON objects), its request, then its
    progress part (a JSON object) and chunk counts."""
    progress = _progress(get, operation_id, stored)
    whole = splice_operation(part, request, progress[0])
    if whole is None:
        raise StateLayoutError(f"the parts of operation {operation_id!r} are not its two lines each")
    op = OperationState.model_validate_json(whole)
    _read_contents(get, op, _COUNTS.validate_json(progress[1]), stored)
    return op


def _operation_rows(
    get: Get, operation_id: str, part: bytes, request: bytes, stored: Stored
) -> OperationState:
    """Formats 7 and 8: the operation's own part (a row), its request (in format 8 with `"tools":[]`
    when it names a toolset, put back by `_read_operation`), then its progress part (a row) and chunk
    counts (`part_rows.py`)."""
    progress = _progress(get, operation_id, stored)
    try:
        fields = operation_fields(from_json(part)) | progress_fields(from_json(progress[0]))
    except ValueError as exc:
        raise StateLayoutError(f"the parts of operation {operation_id!r} are not its rows: {exc}") from exc
    op = OperationState.model_validate_json(b"".join((to_json(fields)[:-1], b',"request":', request, b"}")))
    _read_contents(get, op, _COUNTS.validate_json(progress[1]), stored)
    return op


def _progress(get: Get, operation_id: str, stored: Stored) -> list[bytes]:
    """An operation's progress part's two lines: its progress and its chunk counts."""
    conversation_id = stored.conversation_id
    part = _part(get, progress_key(conversation_id, operation_id), conversation_id, stored)
    return _lines(part, 2, operation_id)


_OPERATION_READERS: dict[int, Callable[[Get, str, bytes, bytes, Stored], OperationState]] = {
    INLINE_CONTENTS_FORMAT: _operation_inline,
    PROGRESS_INLINE_FORMAT: _operation_progress_inline,
    OBJECT_PARTS_FORMAT: _operation_objects,
    ROWS_FORMAT: _operation_rows,
    SPLIT_FORMAT: _operation_rows,
}
"""How each split format keeps an operation (`SPLIT_FORMATS`)."""


def _read_contents(get: Get, op: OperationState, counts: list[int | None], stored: Stored) -> None:
    """Put the content chunks back into the blocks of the operation's assembler snapshot (a dict just
    read, no one else's), before the rest of each content, inline: `counts`, each block's chunk count
    (None: its content is all inline)."""
    blocks = [] if op.assembler is None else op.assembler.get("blocks")
    if not isinstance(blocks, list) or len(blocks) != len(counts):
        raise StateLayoutError(f"operation {op.operation_id!r} counts the chunks of {len(counts)} blocks")
    conversation_id = stored.conversation_id
    for block, count in zip(blocks, counts, strict=True):
        if count is None:
            continue
        index, rest = (block.get("index"), block.get("content")) if isinstance(block, dict) else (None, None)
        if type(index) is not int or type(rest) is not str:
            raise StateLayoutError(f"operation {op.operation_id!r} counts chunks of a block with no index")
        keys = (content_key(conversation_id, op.operation_id, index, n) for n in range(count))
        chunks = [_TEXT.validate_json(_part(get, key, conversation_id, stored)) for key in keys]
        block["content"] = "".join(chunks) + rest


def _whole_under_bare_id(get: Get, conversation_id: str) -> tuple[ConversationState, Stored] | None:
    """A whole state format 3 kept under the bare id of a conversation holding the separator. The key
    may be another conversation's part: that value is not this conversation's (None, and since it is
    not in what was read, the next write leaves it alone); ours is deleted by the next write."""
    value = get(conversation_id)
    if value is None:
        return None
    snapshot = decode_snapshot(value)
    if snapshot.conversation_id != conversation_id or snapshot.format_version in SPLIT_FORMATS:
        return None
    state = decode_whole(snapshot)
    return state, _read(conversation_id, snapshot.format_version, conversation_id, value, snapshot.state)


def _read(conversation_id: str, format_version: int, key: str, value: bytes, part: bytes) -> Stored:
    stored = Stored(conversation_id, format_version)
    _remember_read(stored, key, value, part)
    return stored


def _remember_read(stored: Stored, key: str, value: bytes, part: bytes) -> None:
    """Keep the JSON a key was read with; the value too if it is not the encoding of that JSON."""
    stored.parts[key] = part
    if not holds(value, snapshot_base(stored.conversation_id, stored.format_version), part):
        if stored.raw is None:
            stored.raw = {}
        stored.raw[key] = value


def _snapshot_of(value: bytes, key: str, conversation_id: str) -> ConversationSnapshot:
    snapshot = decode_snapshot(value)
    if snapshot.conversation_id != conversation_id:
        raise StateLayoutError(
            f"{key!r} holds a part of {snapshot.conversation_id!r}, not of {conversation_id!r}"
        )
    return snapshot


def _part(get: Get, key: str, conversation_id: str, stored: Stored) -> bytes:
    value = get(key)
    if value is None:
        raise StateLayoutError(
            f"the head of {conversation_id!r} names {key!r}, which the store does not hold"
        )
    snapshot = _snapshot_of(value, key, conversation_id)
    if snapshot.format_version != stored.format_version:
        raise StateLayoutError(
            f"{key!r} holds a format-{snapshot.format_version} snapshot, not a part of the "
            f"format-{stored.format_version} head"
        )
    _remember_read(stored, key, value, snapshot.state)
    return snapshot.state
