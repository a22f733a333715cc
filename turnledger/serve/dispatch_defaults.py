"""What `turnledger serve` puts in the dispatch requests of its page (`--adapter`, `--provider`,
`--model-revision`), checked at start against the tables the processor prepares a dispatch with: the
adapter registry (`adapters/registry.py`) and the model registry (`processors/model_registry.py`, the
built-in one merged with TURNLEDGER_MODEL_REGISTRY, which serve must then be given too). A value the
processor would reject (UNKNOWN_ADAPTER, UNKNOWN_MODEL) is refused before serving, not on every
dispatch of the page. A POST `…/dispatch` whose body names its own adapter, provider or model revision
is checked by the same rule (`dispatch_refusal`) and answered 422, nothing sent, rather than accepted
(202) for the processor to reject later.

The revision after `@` is free text (the registry is keyed by `provider/model`, an exact
`provider/model@revision` key only overriding it), so only the model revision's form and its
`provider/model` are checked. The request's provider must be the adapter's: the processor refuses
one that is not (INVALID_EVENT, `dispatch/request_rules.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from turnledger.adapters.admission import ModelRegistry
from turnledger.adapters.base import Adapter, InvalidModelRevisionError, parse_model_revision
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.errors import DispatchDefaultError

Checked = Literal["adapter", "provider", "model_revision"]

FLAGS: dict[Checked, str] = {
    "adapter": "--adapter",
    "provider": "--provider",
    "model_revision": "--model-revision",
}


DEFAULT_API = "anthropic-messages"
"""The API of the page's dispatches when `--adapter` names none: its adapter is the registry's latest
version of it (`LATEST`), its provider that adapter's, so a new version is the default as it is registered
(`anthropic-messages@2` stayed the default after `@3` was)."""


@dataclass(frozen=True)
class DispatchDefaults:
    adapter: str = LATEST[DEFAULT_API]
    provider: str = ADAPTERS[LATEST[DEFAULT_API]].provider
    model_revision: str = "anthropic/claude-sonnet-4@2025-05"
    max_output_tokens: int = 512


@dataclass(frozen=True)
class DispatchRefusal:
    checked: Checked
    value: str
    why: str


def dispatch_refusal(
    adapter_id: str, provider: str, model_revision: str, registry: ModelRegistry
) -> DispatchRefusal | None:
    """The first of adapter, provider and model revision that the processor would not take; the
    adapter first, as the other two are checked against it. None when it would take all three."""
    adapter = ADAPTERS.get(adapter_id)
    if adapter is None:
        why = f"not a registered adapter; use one of {', '.join(sorted(ADAPTERS))}"
        return DispatchRefusal("adapter", adapter_id, why)
    provider_refused = _provider_refusal(provider, adapter)
    if provider_refused is not None:
        return DispatchRefusal("provider", provider, provider_refused)
    model_refused = _model_refusal(model_revision, adapter, registry)
    if model_refused is not None:
        known = ", ".join(
            sorted(k for k, info in registry.models.items() if info.provider == adapter.provider)
        )
        why = (
            f"{model_refused}; the registry's {adapter.provider} models: {known} (as provider/model@revision)"
        )
        return DispatchRefusal("model_revision", model_revision, why)
    return None


def check_dispatch_defaults(defaults: DispatchDefaults, registry: ModelRegistry) -> None:
    """Raise `DispatchDefaultError`, naming the option, for the first value `dispatch_refusal` refuses."""
    refusal = dispatch_refusal(defaults.adapter, defaults.provider, defaults.model_revision, registry)
    if refusal is not None:
        raise DispatchDefaultError(FLAGS[refusal.checked], refusal.value, refusal.why)


def _provider_refusal(provider: str, adapter: Adapter) -> str | None:
    if provider == adapter.provider:
        return None
    known = sorted({a.provider for a in ADAPTERS.values()})
    if provider not in known:
        return f"no adapter's provider; use one of {', '.join(known)}"
    return f"not the provider of adapter {adapter.adapter_id!r}; use {adapter.provider}"


def _model_refusal(model_revision: str, adapter: Adapter, registry: ModelRegistry) -> str | None:
    """Why the processor would reject this model for `adapter` (UNKNOWN_MODEL), as `admit` and the
    adapters' rendering read it; None when it would not."""
    try:
        parse_model_revision(model_revision)
    except InvalidModelRevisionError:
        return "not provider/model@revision"
    info = registry.lookup(model_revision)
    if info is None:
        return "not in the model registry"
    if info.provider != adapter.provider:
        sends_to = f"adapter {adapter.adapter_id!r} sends to {adapter.provider!r}"
        return f"a model of provider {info.provider!r}, but {sends_to}"
    return None
