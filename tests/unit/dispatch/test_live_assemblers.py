"""The cache of live assemblers (`dispatch/live_assemblers.py`): the object a snapshot was taken
from is handed back once, the oldest are dropped first beyond the bound, and anything not live is
restored equal from its snapshot. No output depends on the cache; these pin that it works."""

from __future__ import annotations

from turnledger.dispatch.live_assemblers import LiveAssemblers, tools_of
from turnledger.dispatch.state import OperationState
from turnledger.streaming.assembler import BlockAssembler

from .scenario import Conversation, text_stream


def _streaming_operation() -> OperationState:
    c = Conversation()
    c.user("hi")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["a", "b"])[:3])
    return c.state.operations["op-1"]


def _kept(live: LiveAssemblers, op: OperationState) -> tuple[OperationState, BlockAssembler]:
    assembler = BlockAssembler.restore(op.assembler or {}, tools_of(op))
    return op.model_copy(update={"assembler": live.keep(assembler)}), assembler


def test_the_assembler_a_snapshot_was_taken_from_is_handed_back_once() -> None:
    live = LiveAssemblers()
    op, assembler = _kept(live, _streaming_operation())
    assert live.restore(op) is assembler
    again = live.restore(op)
    assert again is not assembler and again is not None and again.snapshot() == assembler.snapshot()


def test_beyond_its_bound_the_oldest_assemblers_are_dropped_first() -> None:
    live = LiveAssemblers(max_size=2)
    streaming = _streaming_operation()
    (a, first), (b, second), (c, third) = (_kept(live, streaming) for _ in range(3))
    assert live.restore(b) is second and live.restore(c) is third
    restored = live.restore(a)
    assert restored is not first and restored is not None and restored.snapshot() == first.snapshot()


def test_a_snapshot_equal_to_a_kept_one_but_not_it_is_restored() -> None:
    live = LiveAssemblers()
    op, assembler = _kept(live, _streaming_operation())
    copy = op.model_copy(update={"assembler": dict(op.assembler or {})})
    restored = live.restore(copy)
    assert restored is not assembler and restored is not None
    assert live.restore(op) is assembler  # still there for the snapshot it was kept with


def test_an_operation_without_an_assembler_has_none() -> None:
    op = _streaming_operation().model_copy(update={"assembler": None})
    assert LiveAssemblers().restore(op) is None
