"""The block assembler of an attempt: a snapshot in the state, and the live object reused between events."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from turnledger.dispatch.state import OperationState
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.streaming.assembler import BlockAssembler

LIVE_ASSEMBLERS_MAX = 10_000


def had_previews(op: OperationState) -> bool:
    return op.assembler is not None and BlockAssembler.snapshot_has_previews(op.assembler)


def tools_of(op: OperationState) -> dict[str, Any]:
    return {t.name: t for t in op.request.tools}


class LiveAssemblers:
    """The assemblers whose snapshots the state holds, kept alive so the next event need not restore them.

    Saves a restore and a re-snapshot of every earlier delta per StreamDeltas event. Owned by
    the engine that folds the states, bounded (oldest first out); a fold with a fresh one
    restores every assembler from its snapshot and yields the same outputs.
    """

    def __init__(self, max_size: int = LIVE_ASSEMBLERS_MAX) -> None:
        self._live: OrderedDict[int, tuple[dict[str, Any], BlockAssembler]] = OrderedDict()
        self._max_size = max_size

    def restore(self, op: OperationState, limits: Limits = DEFAULT_LIMITS) -> BlockAssembler | None:
        """The attempt's assembler: the live object its snapshot was taken from if there is one, else
        a restore from the snapshot (equal by construction: `restore(snapshot())` equals the original).

        A live assembler is handed out once (popped) since the caller mutates it: any later use of
        the same snapshot, e.g. a batch re-folded after an aborted transaction, restores from it.
        """
        if op.assembler is None:
            return None
        live = self._live.pop(id(op.assembler), None)
        if live is not None and live[0] is op.assembler:
            return live[1]
        return BlockAssembler.restore(op.assembler, tools_of(op), limits)

    def keep(self, assembler: BlockAssembler) -> dict[str, Any]:
        """Snapshot an assembler that is not touched again, and remember it for `restore`."""
        snapshot = assembler.snapshot()
        self._live[id(snapshot)] = (snapshot, assembler)
        while len(self._live) > self._max_size:
            self._live.popitem(last=False)
        return snapshot
