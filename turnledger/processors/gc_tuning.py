"""The interpreter's garbage collector, tuned for a processor that holds a large restored state."""

from __future__ import annotations

import gc

GC_GEN0_THRESHOLD = 10_000
"""CPython's default is 700. The fold allocates many short-lived, mostly acyclic objects per event
(pydantic models, dicts, decoded records), so young collections run every few events and almost
never find a cycle; each also sometimes escalates to a full collection that traverses every live
state. 10k keeps the garbage pending between collections to a few MB."""


def tune_gc(gen0_threshold: int = GC_GEN0_THRESHOLD) -> None:
    """Collect once, move every surviving object (modules, restored state, caches) to the permanent
    generation with `gc.freeze()`, and raise (never lower) the gen0 threshold.

    Frozen objects are no longer traversed by collections but refcounting still frees them (only
    cyclic garbage among them would stay; the restored store holds bytes, the rest is modules and
    caches). Process-wide: it is called from the Kafka runtime only, never from the pure core.
    Calling it again (once per partition) only freezes what was allocated since.
    """
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, gen0_threshold), gen1, gen2)
