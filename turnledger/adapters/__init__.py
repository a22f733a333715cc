"""Versioned provider adapters (graph → exact request bytes) and token admission."""

from turnledger.adapters.admission import (
    Admitted,
    ModelInfo,
    ModelRegistry,
    OverBudget,
    TokenCounter,
    UnknownModel,
    admit,
    builtin_registry,
)
from turnledger.adapters.base import (
    Adapter,
    DispatchParams,
    Rendered,
    RenderOutcome,
    UnknownAdapterError,
    UnsupportedKind,
)
from turnledger.adapters.registry import ADAPTERS, LATEST, get_adapter

__all__ = [
    "ADAPTERS",
    "LATEST",
    "Adapter",
    "Admitted",
    "DispatchParams",
    "ModelInfo",
    "ModelRegistry",
    "OverBudget",
    "RenderOutcome",
    "Rendered",
    "TokenCounter",
    "UnknownAdapterError",
    "UnknownModel",
    "UnsupportedKind",
    "admit",
    "builtin_registry",
    "get_adapter",
]
