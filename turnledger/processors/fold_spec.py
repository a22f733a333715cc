"""`--fold module:attr`: loading the partition fold a processor runs, by name.

A name rather than an object because `turnledger process --processes N` starts its
children by spawn: each child loads the fold factory again from the same spec.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from turnledger.errors import ProcessorError
from turnledger.processors.contract import PartitionFold
from turnledger.topology import Topics

FoldSpecFactory = Callable[[Topics, int], PartitionFold]
"""What `--fold module:attr` names: called once per partition with the physical topic names."""

DEFAULT_FOLD_SPEC = "turnledger.processors.dispatch_partition:DispatchPartitionFold"
"""The dispatch fold: the pure engine of `turnledger.dispatch` on one partition."""


class FoldSpecError(ProcessorError, ValueError):
    """A `--fold` spec that does not name a callable."""


def load_fold_factory(spec: str) -> FoldSpecFactory:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise FoldSpecError(f"expected module:attr, got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise FoldSpecError(f"cannot load {spec!r}: {exc}") from exc
    except Exception as exc:  # the module's own code failed while it was imported
        raise FoldSpecError(
            f"cannot load {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(factory):
        raise FoldSpecError(f"{spec!r} is not callable")
    return factory  # type: ignore[no-any-return]
