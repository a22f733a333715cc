"""`part_rows`: an operation's parts as rows read back as the very fields they were written from."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.dispatch.part_rows import (
    BLOCK_ROW,
    COUNTERS_ROW,
    SHOWN_BLOCK_ROW,
    SNAPSHOT_ROW,
    RowError,
    check_layouts,
    operation_fields,
    operation_row,
    progress_fields,
    progress_row,
    snapshot_row,
)
from turnledger.dispatch.state import ManifestSeal, OperationState
from turnledger.model.deltas import DeltaType
from turnledger.streaming.assembler import BlockAssembler

from .scenario import Conversation, _DeltaMaker, text_stream, tool_stream


def _snapshot() -> dict[str, Any]:
    """A streaming assembler's snapshot: a text block shown in part (`shown`), a tool call, a delta
    held past a gap."""
    d = _DeltaMaker("msg_1", 1)
    assembler = BlockAssembler({})
    for delta in [
        d(DeltaType.MESSAGE_START, -1),
        d(DeltaType.BLOCK_START, 0, block_kind="text"),
        d(DeltaType.TEXT_DELTA, 0, text="Hello"),
    ]:
        assembler.feed(delta)
    assert assembler.take_preview(0) == (0, "Hello")
    assembler.feed(d(DeltaType.TEXT_DELTA, 0, text=", world"))
    assembler.feed(d(DeltaType.BLOCK_START, 1, block_kind="tool_call", call_id="c1", tool_name="f"))
    d.seq += 1  # a gap: the next delta is held
    assembler.feed(d(DeltaType.ARGUMENT_FRAGMENT, 1, text="{}"))
    return assembler.snapshot()


def _read(snapshot: dict[str, Any] | None) -> Any:
    return progress_fields(orjson.loads(progress_row(snapshot, 5, 7)))


def test_the_assemblers_snapshot_is_written_as_rows_and_read_back_as_the_dict_it_was() -> None:
    """Fails when the assembler's snapshot changes its names: a new layout is a new format."""
    snapshot = _snapshot()
    assert tuple(snapshot) == SNAPSHOT_ROW and tuple(snapshot["counters"]) == COUNTERS_ROW
    assert [tuple(b) for b in snapshot["blocks"]] == [SHOWN_BLOCK_ROW, BLOCK_ROW]
    assert len(snapshot["held"]) == 1
    row = snapshot_row(snapshot)
    assert isinstance(row, list) and len(row) == len(SNAPSHOT_ROW)
    assert [len(b) for b in row[SNAPSHOT_ROW.index("blocks")]] == [9, 8]
    fields = _read(snapshot)
    assert fields == {"assembler": snapshot, "updated_at_ms": 5, "lease_renewed_at_ms": 7}
    assert orjson.dumps(fields["assembler"]) == orjson.dumps(snapshot)  # the names in their order
    assert b'"next_sequence"' not in progress_row(snapshot, 5, 7)
    assert _read(None) == {"assembler": None, "updated_at_ms": 5, "lease_renewed_at_ms": 7}


def _reshaped(snapshot: dict[str, Any], how: int) -> dict[str, Any]:
    changed = copy.deepcopy(snapshot)
    if how == 0:  # its names in another order
        return dict(reversed(changed.items()))
    if how == 1:  # a name more
        return {**changed, "later": [1]}
    if how == 2:  # a block with a name less
        del changed["blocks"][1]["deltas"]
    elif how == 3:  # a block's names in another order
        changed["blocks"][0] = dict(reversed(changed["blocks"][0].items()))
    elif how == 4:  # the counters of another layout
        changed["counters"] = {"duplicates_dropped": 0}
    elif how == 5:  # a block that is not an object
        changed["blocks"].append([1, 2])
    elif how == 6:  # blocks that are not a list
        changed["blocks"] = {"0": changed["blocks"][0]}
    elif how == 7:  # blocks of the layout, but in a tuple
        changed["blocks"] = tuple(changed["blocks"])
    elif how == 8:  # counters that are not an object
        changed["counters"] = [0, 0, 0, 0]
    return changed


@pytest.mark.parametrize("how", range(9))
def test_a_snapshot_of_another_shape_is_written_as_the_object_it_is(how: int) -> None:
    snapshot = _reshaped(_snapshot(), how)
    assert snapshot_row(snapshot) is snapshot
    fields = _read(snapshot)
    assert orjson.dumps(fields["assembler"]) == orjson.dumps(snapshot)
    if how != 7:  # JSON has no tuples
        assert fields["assembler"] == snapshot


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(_JSON, min_size=len(SNAPSHOT_ROW), max_size=len(SNAPSHOT_ROW)),
    blocks=st.lists(st.tuples(st.lists(_JSON, min_size=9, max_size=9), st.booleans()), max_size=3),
    counters=st.lists(st.integers(0, 10**6), min_size=4, max_size=4),
)
def test_any_snapshot_of_the_rows_layout_reads_back_equal_names_in_order(
    values: list[Any], blocks: list[tuple[list[Any], bool]], counters: list[int]
) -> None:
    snapshot = dict(zip(SNAPSHOT_ROW, values, strict=True))
    snapshot["blocks"] = [
        dict(zip(SHOWN_BLOCK_ROW if shown else BLOCK_ROW, block, strict=False)) for block, shown in blocks
    ]
    snapshot["counters"] = dict(zip(COUNTERS_ROW, counters, strict=True))
    assert isinstance(snapshot_row(snapshot), list)
    assert orjson.dumps(_read(snapshot)["assembler"]) == orjson.dumps(snapshot)


def _operations() -> list[OperationState]:
    requested = Conversation()
    requested.user("weather?")
    requested.request("op-1")
    c = Conversation()
    c.user("weather?")
    c.dispatch_to_streaming("op-1")
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Paris"}'])]))
    c.tool_results(("call-1", "get_weather", '{"temp": 20}'))
    c.request("op-2")
    c.attempt("op-2")
    streaming = Conversation()
    streaming.user("hello")
    streaming.dispatch_to_streaming()
    streaming.deltas(text_stream(["Hel"], stop=False))
    prepared = requested.state.operations["op-1"]
    ops = [prepared.model_copy(update={"manifest": None}), prepared, *c.state.operations.values()]
    return [*ops, streaming.state.operations["op-1"]]


def test_an_operations_row_reads_back_as_its_fields() -> None:
    operations = _operations()
    states = ["PREPARED", "PREPARED", "COMMITTED", "WAITING", "STREAMING"]
    assert [op.state.value for op in operations] == states
    assert [op.manifest is not None for op in operations] == [False, True, True, False, True]
    assert operations[-1].assembler is not None
    for op in operations:
        row = orjson.loads(operation_row(op))
        assert len(row) == 14 and (row[2] is None) == (op.manifest is None)
        fields = operation_fields(row) | progress_fields(
            orjson.loads(progress_row(op.assembler, op.updated_at_ms, op.lease_renewed_at_ms))
        )
        fields["request"] = op.request
        assert OperationState.model_validate(fields) == op


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({}, "an operation's row holds a dict, not 14 values"),
        ([1] * 13, "an operation's row holds 13 values, not 14"),
        (["op", "PREPARED", [1, 2], *[0] * 11], "a manifest's row holds 2 values, not 4"),
    ],
)
def test_a_row_not_of_its_layout_is_a_typed_error(row: Any, message: str) -> None:
    with pytest.raises(RowError, match=message):
        operation_fields(row)


def test_a_progress_row_not_of_its_layout_is_a_typed_error() -> None:
    row = orjson.loads(progress_row(_snapshot(), 1, 1))
    for snapshot, message in [
        ("text", "an assembler snapshot is a str"),
        (row[0][:-1], "an assembler snapshot's row holds 18 values, not 19"),
        ([*row[0][:5], [[0]], *row[0][6:]], "a block's row holds 1 values, not 8"),
        ([*row[0][:18], {"a": 1}], "the counters' row holds a dict, not 4 values"),
        ([*row[0][:5], {"0": [0]}, *row[0][6:]], "an assembler snapshot's blocks are a dict"),
    ]:
        with pytest.raises(RowError, match=message):
            progress_fields([snapshot, 1, 1])
    with pytest.raises(RowError, match="a progress part's row holds 2 values, not 3"):
        progress_fields([row[0], 1])


def test_a_model_that_changes_its_fields_fails_the_layouts_guard() -> None:
    operation, manifest = tuple(OperationState.model_fields), tuple(ManifestSeal.model_fields)
    check_layouts(operation, manifest)
    for changed_operation, changed_manifest in [
        ((*operation, "later"), manifest),
        (operation[:-1], manifest),
        ((operation[1], operation[0], *operation[2:]), manifest),
        (operation, (*manifest, "later")),
        (operation, manifest[1:]),
    ]:
        with pytest.raises(RuntimeError) as caught:
            check_layouts(changed_operation, changed_manifest)
        assert str(caught.value) == (
            "OperationState or ManifestSeal changed: a new changelog format (part_rows.py)"
        )
    check_layouts((*operation[:2], *operation[3:]), manifest)  # the request is never in a row
