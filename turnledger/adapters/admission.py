"""Context token admission: does the FINAL rendered request fit the model's window?

We count the exact request body the adapter produced — tool definitions, the scoped
input notice and every other adapter-added byte included — not the graph, so nothing
the adapter adds can push a request past the window unseen. The budget is
`context_window - max_output_tokens`.

Counters. For models with a public BPE (OpenAI), tiktoken with offline encodings
(`encodings.py`) counts the body text exactly. Counting the JSON text also counts its
keys and punctuation, which the provider does not bill one-for-one; the count errs on
the high side, which is the safe side for admission. Claude, Gemini and Bedrock have
no offline tokenizer (reference 6), so they get `EstimateCounter`: ceil(UTF-8 bytes
/ 3). BPE vocabularies average about 3.5-4.5 bytes per token on English prose, code
and JSON, so bytes/3 over-counts those by 15-50%; it can under-count text made mostly
of 4-byte characters (emoji) or rare scripts. It is an estimate, named as such in
every outcome.

The model registry is data (`models.json` shipped with the package); an operator's
override file (`TURNLEDGER_MODEL_REGISTRY`) is merged over it by the runtime
(`turnledger.processors.model_registry`), which hands the result to the engine. Keys are
`provider/model` or an exact `provider/model@revision`, which wins.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, Protocol

from turnledger.adapters.base import (
    Adapter,
    DispatchParams,
    InvalidModelRevisionError,
    Rendered,
    parse_model_revision,
)
from turnledger.adapters.encodings import load_encoding
from turnledger.adapters.token_chunks import SPLITTABLE, ChunkCounts, independent_chunks
from turnledger.errors import AdapterError
from turnledger.model.reasons import ReasonCode


class ModelRegistryError(AdapterError, ValueError):
    """The registry file is unreadable or malformed."""


@dataclass(frozen=True)
class ModelInfo:
    context_window: int
    encoding: str | None = None  # a tiktoken encoding name, or None: no offline tokenizer
    provider: str = ""


class ModelRegistry:
    """Model key → ModelInfo. Keys: `provider/model` or exact `provider/model@revision`."""

    def __init__(self, models: Mapping[str, ModelInfo]) -> None:
        self.models: Mapping[str, ModelInfo] = MappingProxyType(dict(models))

    @classmethod
    def from_data(cls, data: Mapping[str, Any], base: ModelRegistry | None = None) -> ModelRegistry:
        entries = data.get("models")
        if not isinstance(entries, Mapping):
            raise ModelRegistryError("model registry: top-level 'models' object is missing")
        models: dict[str, ModelInfo] = dict(base.models) if base is not None else {}
        for key, entry in entries.items():
            provider, slash, model = str(key).partition("/")
            window = entry.get("context_window") if isinstance(entry, Mapping) else None
            encoding = entry.get("encoding") if isinstance(entry, Mapping) else None
            if not slash or not provider or not model:
                raise ModelRegistryError(f"model registry: key {key!r} is not provider/model[@revision]")
            if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
                raise ModelRegistryError(f"model registry: {key!r} needs a positive integer context_window")
            if encoding is not None and not isinstance(encoding, str):
                raise ModelRegistryError(f"model registry: {key!r} encoding must be a string or null")
            models[str(key)] = ModelInfo(context_window=window, encoding=encoding, provider=provider)
        return cls(models)

    def lookup(self, model_revision: str) -> ModelInfo | None:
        exact = self.models.get(model_revision)
        if exact is not None:
            return exact
        try:
            key = parse_model_revision(model_revision).key
        except InvalidModelRevisionError:
            return None
        return self.models.get(key)


@functools.cache
def builtin_registry() -> ModelRegistry:
    """The registry shipped with turnledger (models.json). An operator's override is merged in by the
    runtime (`turnledger.processors.model_registry`) and handed to the engine: the fold reads no
    environment or file, so its outcome depends on the log and its configuration only."""
    builtin_text = resources.files("turnledger.adapters").joinpath("models.json").read_text("utf-8")
    return ModelRegistry.from_data(json.loads(builtin_text))


class TokenCounter(Protocol):
    name: str

    def count(self, body: bytes) -> int: ...


class TiktokenCounter:
    """Exact BPE count of the body text with an offline encoding (special tokens counted as text).

    For encodings in `SPLITTABLE` the body is counted as the sum of its neutral
    chunks (`token_chunks`: the same total, proven there), each looked up in a
    bounded cache first, so the history a request repeats is not re-encoded.
    """

    def __init__(self, encoding: str) -> None:
        self.name = f"tiktoken:{encoding}"
        self._encoding = load_encoding(encoding)
        self._chunk_counts = ChunkCounts(self.count_text) if encoding in SPLITTABLE else None

    def count(self, body: bytes) -> int:
        text = body.decode("utf-8")
        if self._chunk_counts is None:
            return self.count_text(text)
        return sum(map(self._chunk_counts, independent_chunks(text)))

    def count_text(self, text: str) -> int:
        """The count of `text` as one whole: what `count` must always equal."""
        return len(self._encoding.encode_ordinary(text))


class EstimateCounter:
    """ceil(UTF-8 bytes / bytes_per_token): a documented over-estimate for text without a tokenizer."""

    def __init__(self, bytes_per_token: int = 3) -> None:
        self.name = f"estimate:utf8/{bytes_per_token}"
        self._bytes_per_token = bytes_per_token

    def count(self, body: bytes) -> int:
        return math.ceil(len(body) / self._bytes_per_token)


@functools.cache
def counter_for(encoding: str | None) -> TokenCounter:
    """One counter (and so one Encoding) per encoding per process."""
    if encoding is None:
        return EstimateCounter()
    return TiktokenCounter(encoding)


def preload_counters(registry: ModelRegistry | None = None) -> tuple[str, ...]:
    """Build the token counter of every model in the registry; returns their names.

    Loading a vocabulary takes about 0.4 s. Done lazily, the first dispatch for each
    encoding pays it inside a processor batch, and every event of that batch waits.
    """
    registry = registry if registry is not None else builtin_registry()
    encodings = sorted({info.encoding for info in registry.models.values()}, key=lambda e: e or "")
    return tuple(counter_for(encoding).name for encoding in encodings)


@dataclass(frozen=True)
class Admitted:
    input_tokens: int
    counter: str = ""


@dataclass(frozen=True)
class OverBudget:
    input_tokens: int
    limit: int
    counter: str = ""

    @property
    def reason(self) -> ReasonCode:
        return ReasonCode.TOKEN_BUDGET_EXCEEDED


@dataclass(frozen=True)
class UnknownModel:
    model_revision: str
    detail: str = ""

    @property
    def reason(self) -> ReasonCode:
        return ReasonCode.UNKNOWN_MODEL


AdmissionOutcome = Admitted | OverBudget | UnknownModel


def admit(
    adapter: Adapter,
    rendered: Rendered,
    params: DispatchParams,
    registry: ModelRegistry | None = None,
) -> AdmissionOutcome:
    """Count `rendered.body` and check it against `context_window - max_output_tokens`.

    A model the registry does not know, or one of another provider than the
    adapter's, is `UnknownModel`: guessing a window would admit blindly.
    """
    registry = registry if registry is not None else builtin_registry()
    info = registry.lookup(params.model_revision)
    if info is None:
        return UnknownModel(params.model_revision, detail="not in the model registry")
    if info.provider != adapter.provider:
        return UnknownModel(
            params.model_revision,
            detail=f"model provider {info.provider!r} != adapter provider {adapter.provider!r}",
        )
    counter = counter_for(info.encoding)
    tokens = counter.count(rendered.body)
    limit = info.context_window - params.max_output_tokens
    if tokens > limit:
        return OverBudget(input_tokens=tokens, limit=limit, counter=counter.name)
    return Admitted(input_tokens=tokens, counter=counter.name)
