"""An operation's parts on the changelog as rows: JSON arrays of values in a fixed order, no names.

Changelog format 7 (`state_layout.py`, and format 8, which only keeps toolsets apart) keeps an
operation's own part and its progress part as rows.
Format 6 kept them as JSON objects, whose names were half of their bytes: an operation's own part
was ~620 bytes, ~300 of them names, and its progress, which every streamed record writes, carried
the assembler snapshot's 28 names. With 1,000 conversations active at once every event writes its
operation's parts apart from any other event's, and those names made a changelog record of
~1,190 bytes per event, over issue 20's 1 KB.

The rules a row keeps:
- Each layout below is a literal, frozen with format 7: a value's place says which field it is,
  so a layout never changes. A model that gains or loses a field fails the guard at the bottom
  (`check_layouts`, at import), and a new layout is a new changelog format.
- An operation's own part is one row of `OPERATION_ROW`, its manifest a row of `MANIFEST_ROW`
  (or null). Its progress is a row of `PROGRESS_ROW` whose snapshot is a row of `SNAPSHOT_ROW`,
  each block a row of `BLOCK_ROW` (with `shown` as a ninth value when the block has it) and its
  counters a row of `COUNTERS_ROW`.
- A snapshot of any other shape (other names, in another order: an assembler of a later
  `SNAPSHOT_VERSION`, a hand-made one in a test) is written as the JSON object it is. A reader
  tells the two apart by their JSON type, so every snapshot reads back as the very dict it was,
  its names in their order (the state's JSON depends on that order).
- Reading checks each row's length and type and raises `RowError` otherwise; the values
  themselves are checked by the models they are read into, as the objects of format 6 were.

Pure: bytes and dicts in, bytes and dicts out.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from pydantic_core import to_json

from turnledger.dispatch.state import ManifestSeal, OperationState
from turnledger.errors import StateFormatError

OPERATION_ROW = (
    "operation_id",
    "state",
    "manifest",
    "prepared_revision",
    "attempt_generation",
    "attempt_cancel_generation",
    "idempotency_key",
    "response_handle",
    "attempt_terminated",
    "committed_revision",
    "lease_owner",
    "lease_ms",
    "resumable",
    "replayable",
)
"""An operation's own part: every field but its request and its progress, in the model's order."""
MANIFEST_ROW = ("manifest_digest", "conversation_revision", "cancel_generation", "request_digest")
PROGRESS_ROW = ("assembler", "updated_at_ms", "lease_renewed_at_ms")
SNAPSHOT_ROW = (
    "v",
    "response_handle",
    "generation",
    "next_sequence",
    "held",
    "blocks",
    "started",
    "stopped",
    "stop_reason",
    "raw_stop_reason",
    "model",
    "input_tokens",
    "output_tokens",
    "error",
    "violation",
    "closed",
    "finished",
    "retracted",
    "counters",
)
"""The assembler snapshot of `SNAPSHOT_VERSION` 1 (`BlockAssembler.snapshot`), in its order."""
BLOCK_ROW = ("index", "kind", "call_id", "tool_name", "content", "signature", "stopped", "deltas")
SHOWN_BLOCK_ROW = (*BLOCK_ROW, "shown")
COUNTERS_ROW = ("duplicates_dropped", "previews_retracted", "partial_tool_dispatches", "unknown_events")
_BLOCKS = SNAPSHOT_ROW.index("blocks")
_COUNTERS = SNAPSHOT_ROW.index("counters")
_MANIFEST = OPERATION_ROW.index("manifest")
_operation_values = attrgetter(*OPERATION_ROW)
_manifest_values = attrgetter(*MANIFEST_ROW)


class RowError(StateFormatError):
    """A part's row is not of its layout (a length or a type); `state_layout` reports it as a
    `StateLayoutError` naming the operation."""


def operation_row(op: OperationState) -> bytes:
    """The operation's own part: one row of `OPERATION_ROW`."""
    values = list(_operation_values(op))
    manifest = op.manifest
    if manifest is not None:
        values[_MANIFEST] = list(_manifest_values(manifest))
    return to_json(values)


def progress_row(snapshot: dict[str, Any] | None, updated_at_ms: int, lease_renewed_at_ms: int) -> bytes:
    """An operation's progress: one row of `PROGRESS_ROW`, its snapshot a row where it has the
    layout of `SNAPSHOT_ROW` (`snapshot_row`)."""
    return to_json([snapshot_row(snapshot), updated_at_ms, lease_renewed_at_ms])


def snapshot_row(snapshot: dict[str, Any] | None) -> list[Any] | dict[str, Any] | None:
    """The snapshot as a row, or as it is when any of its names or its blocks' or counters' is not
    in its layout's order."""
    if snapshot is None or tuple(snapshot) != SNAPSHOT_ROW:
        return snapshot
    blocks, counters = snapshot["blocks"], snapshot["counters"]
    if type(blocks) is not list or type(counters) is not dict or tuple(counters) != COUNTERS_ROW:
        return snapshot
    rows: list[list[Any]] = []
    for block in blocks:
        if type(block) is not dict:
            return snapshot
        names = tuple(block)
        if names != BLOCK_ROW and names != SHOWN_BLOCK_ROW:
            return snapshot
        rows.append(list(block.values()))
    values = list(snapshot.values())
    values[_BLOCKS], values[_COUNTERS] = rows, list(counters.values())
    return values


def operation_fields(row: Any) -> dict[str, Any]:
    """An operation's fields (all but its request and progress) from its row, parsed."""
    fields = _named(row, OPERATION_ROW, "an operation's")
    manifest = fields["manifest"]
    if manifest is not None:
        fields["manifest"] = _named(manifest, MANIFEST_ROW, "a manifest's")
    return fields


def progress_fields(row: Any) -> dict[str, Any]:
    """An operation's progress fields from its row, parsed, the snapshot as the dict it was."""
    fields = _named(row, PROGRESS_ROW, "a progress part's")
    snapshot = fields["assembler"]
    if type(snapshot) is list:
        fields["assembler"] = _snapshot(snapshot)
    elif snapshot is not None and type(snapshot) is not dict:
        raise RowError(f"an assembler snapshot is a {type(snapshot).__name__}")
    return fields


def _snapshot(row: list[Any]) -> dict[str, Any]:
    snapshot = _named(row, SNAPSHOT_ROW, "an assembler snapshot's")
    blocks = snapshot["blocks"]
    if type(blocks) is not list:
        raise RowError(f"an assembler snapshot's blocks are a {type(blocks).__name__}")
    snapshot["blocks"] = [
        _named(block, SHOWN_BLOCK_ROW if type(block) is list and len(block) == 9 else BLOCK_ROW, "a block's")
        for block in blocks
    ]
    snapshot["counters"] = _named(snapshot["counters"], COUNTERS_ROW, "the counters'")
    return snapshot


def _named(row: Any, names: tuple[str, ...], what: str) -> dict[str, Any]:
    if type(row) is not list:
        raise RowError(f"{what} row holds a {type(row).__name__}, not {len(names)} values")
    if len(row) != len(names):
        raise RowError(f"{what} row holds {len(row)} values, not {len(names)}")
    return dict(zip(names, row, strict=True))


def check_layouts(operation_fields: tuple[str, ...], manifest_fields: tuple[str, ...]) -> None:
    """Raise unless the rows name every field of their models, in order (`OperationState`'s
    fields, `ManifestSeal`'s): a model that changes needs a new changelog format."""
    static = tuple(f for f in operation_fields if f not in {"request", *PROGRESS_ROW})
    if static != OPERATION_ROW or manifest_fields != MANIFEST_ROW:
        raise RuntimeError("OperationState or ManifestSeal changed: a new changelog format (part_rows.py)")


check_layouts(tuple(OperationState.model_fields), tuple(ManifestSeal.model_fields))
