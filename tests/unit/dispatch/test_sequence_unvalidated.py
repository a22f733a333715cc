"""`sequence_of` builds the MessageSequence and its tool edges without validating them (`of_validated`):
the sequence of every graph of every fold scenario is the very instance validation builds."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic import BaseModel

from turnledger.model.base import Frozen
from turnledger.model.events import IngressEvent
from turnledger.model.graph import MessageSequence, ToolEdge
from turnledger.sequence.builder import sequence_of, tool_edges
from turnledger.sequence.graph_state import CallRecord, GraphState, ResultRecord

from . import test_fold
from .scenario import Conversation

FOLD_SCENARIOS = [
    fn
    for name, fn in inspect.getmembers(test_fold, inspect.isfunction)
    if name.startswith("test_") and not inspect.signature(fn).parameters
]
EDGE_SOURCES = {
    "tool_name": (CallRecord, "tool_name"),
    "call_block_id": (CallRecord, "block_id"),
    "schema_digest": (CallRecord, "schema_digest"),
    "argument_state": (CallRecord, "argument_state"),
    "argument_digest": (CallRecord, "argument_digest"),
    "generation": (CallRecord, "generation"),
}
"""An edge's fields taken as they are from its call's record: the same annotation."""
SEQUENCE_SOURCES = {
    "conversation_id": "conversation_id",
    "conversation_revision": "revision",
    "sequence_digest": "sequence_digest",
    "blocks": "blocks",
}
"""A sequence's fields taken from the graph state's: the same annotation."""


@pytest.mark.parametrize("model", [MessageSequence, ToolEdge])
def test_a_sequence_and_an_edge_have_nothing_validation_could_change(model: type[BaseModel]) -> None:
    decorators = model.__pydantic_decorators__
    assert not (decorators.validators or decorators.field_validators or decorators.model_validators)
    assert not any(info.metadata for info in model.model_fields.values())


def test_their_fields_come_from_fields_of_the_same_annotation() -> None:
    for name, (source, field) in EDGE_SOURCES.items():
        assert ToolEdge.model_fields[name].annotation == source.model_fields[field].annotation
    for name in ("result_id", "result_status"):  # a result's str into the edge's optional str
        assert ToolEdge.model_fields[name].annotation == str | None
    assert ResultRecord.model_fields["block_id"].annotation is str
    assert ResultRecord.model_fields["result_status"].annotation is str
    for name, field in SEQUENCE_SOURCES.items():
        assert MessageSequence.model_fields[name].annotation == GraphState.model_fields[field].annotation


def _assert_as_validated(model: BaseModel) -> None:
    validated = type(model).model_validate(dict(model.__dict__))
    assert list(model.__dict__.items()) == list(validated.__dict__.items())
    assert [type(v) for v in model.__dict__.values()] == [type(v) for v in validated.__dict__.values()]
    assert model.__pydantic_fields_set__ == set(type(model).model_fields)
    assert model.model_dump_json() == validated.model_dump_json()


def test_the_sequence_of_every_graph_of_every_fold_scenario_is_as_validated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graphs: dict[int, GraphState] = {}
    apply = Conversation.apply

    def collecting(self: Conversation, event: IngressEvent) -> list[Frozen]:
        outputs = apply(self, event)
        graphs[id(self.state.graph)] = self.state.graph
        return outputs

    monkeypatch.setattr(Conversation, "apply", collecting)
    for scenario in FOLD_SCENARIOS:
        scenario()
    edges: list[ToolEdge] = []
    waiting = 0
    for graph in graphs.values():
        outcome = sequence_of(graph)
        waiting += bool(graph.pending_call_ids)
        _assert_as_validated(outcome.sequence)
        blocks_only = sequence_of(graph, edges=False)
        assert type(blocks_only) is type(outcome)
        assert blocks_only.sequence == outcome.sequence.model_copy(update={"tool_edges": ()})
        _assert_as_validated(blocks_only.sequence)
        edges.extend(outcome.sequence.tool_edges)
    for edge in edges:
        _assert_as_validated(edge)
    assert len(graphs) >= 40 and waiting > 0
    assert {edge.result_id is None for edge in edges} == {True, False}  # calls with and without results


def test_an_edge_is_its_call_and_its_result() -> None:
    call = CallRecord(block_id="b1", tool_name="weather", argument_state="complete", generation=2, revision=1)
    result = ResultRecord(block_id="b2", result_status="ok", revision=2)
    values: dict[str, Any] = {
        "conversation_id": "c",
        "chain_head": "h",
        "sequence_digest": "d",
        "calls": {"call-1": call, "call-2": call},
        "results": {"call-1": result},
    }
    state = GraphState(**values)
    assert tool_edges(state) == (
        ToolEdge(
            call_id="call-1",
            tool_name="weather",
            call_block_id="b1",
            argument_state="complete",
            generation=2,
            result_id="b2",
            result_status="ok",
        ),
        ToolEdge(
            call_id="call-2", tool_name="weather", call_block_id="b1", argument_state="complete", generation=2
        ),
    )
