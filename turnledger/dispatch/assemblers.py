"""The block assembler of an attempt, kept as a snapshot in the state and reused live between events."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from turnledger.dispatch.state import OperationState
from turnledger.streaming.assembler import BlockAssembler


def had_previews(op: OperationState) -> bool:
    return op.assembler is not None and BlockAssembler.snapshot_has_previews(op.assembler)


def tools_of(op: OperationState) -> dict[str, Any]:
    return {t.name: t for t in op.request.tools}


_LIVE_ASSEMBLERS: OrderedDict[int, tuple[dict[str, Any], BlockAssembler]] = OrderedDict()
_LIVE_ASSEMBLERS_MAX = 10_000


def restore_assembler(op: OperationState) -> BlockAssembler | None:
    """The attempt's assembler: the live object its snapshot was taken from if there is one, else
    a restore from the snapshot (equal by construction: `restore(snapshot())` equals the original).

    Saves a restore and a re-snapshot of every earlier delta per StreamDeltas event. A live
    assembler is handed out once (popped) since the caller mutates it: any later use of the same
    snapshot, e.g. a batch re-folded after an aborted transaction, restores from the snapshot.
    """
    if op.assembler is None:
        return None
    live = _LIVE_ASSEMBLERS.pop(id(op.assembler), None)
    if live is not None and live[0] is op.assembler:
        return live[1]
    return BlockAssembler.restore(op.assembler, tools_of(op))


def keep_live(assembler: BlockAssembler) -> dict[str, Any]:
    """Snapshot an assembler that is not touched again, and remember it for `restore_assembler`."""
    snapshot = assembler.snapshot()
    _LIVE_ASSEMBLERS[id(snapshot)] = (snapshot, assembler)
    while len(_LIVE_ASSEMBLERS) > _LIVE_ASSEMBLERS_MAX:
        _LIVE_ASSEMBLERS.popitem(last=False)
    return snapshot
