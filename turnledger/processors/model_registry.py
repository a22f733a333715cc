"""The model registry a processor (and a replay of its log) admits requests with: the built-in one,
merged with the operator's override file. Read here, outside the pure fold, and handed to the engine.

A replay must be given the same registry as the processor that wrote the log, or admissions
(PREPARED, UNKNOWN_MODEL, TOKEN_BUDGET_EXCEEDED) can differ.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from turnledger.adapters.admission import ModelRegistry, ModelRegistryError, builtin_registry

REGISTRY_ENV = "TURNLEDGER_MODEL_REGISTRY"


@functools.cache
def _load(path: str | None) -> ModelRegistry:
    base = builtin_registry()
    if path is None:
        return base
    try:
        override = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelRegistryError(f"model registry override {path!r}: {exc}") from exc
    return ModelRegistry.from_data(override, base=base)


def load_model_registry(path: str | os.PathLike[str] | None = None) -> ModelRegistry:
    """Built-in registry, merged with `path` or else `$TURNLEDGER_MODEL_REGISTRY` (cached per path)."""
    chosen = os.fspath(path) if path is not None else os.environ.get(REGISTRY_ENV) or None
    return _load(chosen)
