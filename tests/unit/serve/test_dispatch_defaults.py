"""`turnledger serve --adapter/--provider/--model-revision` (`serve/dispatch_defaults.py`): checked at
start against the adapter and model registries the processor prepares a dispatch with; a value it would
reject is one line naming the option and what it knows, exit 2, before anything connects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnledger.adapters.admission import ModelInfo, ModelRegistry, builtin_registry
from turnledger.adapters.registry import ADAPTERS as REGISTERED
from turnledger.adapters.registry import LATEST
from turnledger.cli import _register, app
from turnledger.errors import DispatchDefaultError, ServeError
from turnledger.serve.dispatch_defaults import DispatchDefaults, check_dispatch_defaults

ADAPTERS = (
    "anthropic-messages@0, anthropic-messages@1, anthropic-messages@2, anthropic-messages@3, "
    "bedrock-converse@1, bedrock-converse@2, gemini@1, gemini@2, gemini@3, openai-chat@1, openai-chat@2, "
    "openai-responses@1, openai-responses@2, openai-responses@3, openai-responses@4"
)
ANTHROPIC_MODELS = (
    "the registry's anthropic models: anthropic/claude-3-5-haiku, anthropic/claude-3-7-sonnet, "
    "anthropic/claude-opus-4, anthropic/claude-sonnet-4 (as provider/model@revision)"
)


def refused(**given: str) -> str:
    with pytest.raises(DispatchDefaultError) as caught:
        check_dispatch_defaults(DispatchDefaults(**given), builtin_registry())  # type: ignore[arg-type]
    assert isinstance(caught.value, ServeError)
    return str(caught.value)


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"adapter": "openai-chat@2", "provider": "openai", "model_revision": "openai/gpt-4o@2024-08-06"},
        {"adapter": "anthropic-messages@0", "model_revision": "anthropic/claude-opus-4@any text"},
        {"adapter": "gemini@1", "provider": "google", "model_revision": "google/gemini-2.5-pro@1"},
        {
            "adapter": "bedrock-converse@1",
            "provider": "bedrock",
            "model_revision": "bedrock/amazon.nova-pro@v1",
        },
    ],
    ids=["the defaults", "openai", "a retired adapter, free revision text", "google", "bedrock"],
)
def test_what_the_processor_would_prepare_is_taken(given: dict[str, str]) -> None:
    check_dispatch_defaults(DispatchDefaults(**given), builtin_registry())  # type: ignore[arg-type]


def test_the_default_adapter_is_the_registrys_latest_anthropic_messages_its_provider_that_adapters() -> None:
    """It was `anthropic-messages@2`, written here, and stayed so after `@3` was registered as the latest
    (session 48): the page's dispatches named a version the registry no longer calls current. It is the
    registry's latest now, the highest version registered, and the provider is that adapter's."""
    defaults = DispatchDefaults()
    assert (defaults.adapter, defaults.provider) == (LATEST["anthropic-messages"], "anthropic")
    versions = [a.version for a in REGISTERED.values() if a.api == "anthropic-messages"]
    assert defaults.adapter == f"anthropic-messages@{max(versions)}" == "anthropic-messages@3"
    assert REGISTERED[defaults.adapter].provider == defaults.provider


def test_serve_help_names_the_default_adapter() -> None:
    _register()
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    words = " ".join(result.output.replace("│", " ").split())  # the option table's lines and borders
    assert (
        "--adapter <str> Adapter of the dispatches the page requests (a registered api@version; the default "
        "is the registry's latest anthropic-messages). [default: anthropic-messages@3] --provider"
    ) in words


def test_an_adapter_not_registered_is_refused_listing_those_that_are() -> None:
    assert refused(adapter="anthropic-messages@9") == (
        f"--adapter 'anthropic-messages@9': not a registered adapter; use one of {ADAPTERS}"
    )


def test_a_provider_no_adapter_has_is_refused_listing_those_they_have() -> None:
    assert refused(provider="azure") == (
        "--provider 'azure': no adapter's provider; use one of anthropic, bedrock, google, openai"
    )


def test_a_provider_other_than_the_adapters_is_refused_naming_the_adapters() -> None:
    assert refused(provider="openai") == (
        "--provider 'openai': not the provider of adapter 'anthropic-messages@3'; use anthropic"
    )


@pytest.mark.parametrize(
    ("model_revision", "why"),
    [
        ("anthropic/claude-sonnet-4", "not provider/model@revision"),
        ("claude-sonnet-4@2025-05", "not provider/model@revision"),
        ("anthropic/claude-sonnet-4@", "not provider/model@revision"),
        ("anthropic/claude-9@2025-05", "not in the model registry"),
        (
            "openai/gpt-4o@2024-08-06",
            "a model of provider 'openai', but adapter 'anthropic-messages@3' sends to 'anthropic'",
        ),
    ],
)
def test_a_model_the_processor_would_find_unknown_is_refused_listing_the_adapters_providers(
    model_revision: str, why: str
) -> None:
    assert refused(model_revision=model_revision) == (
        f"--model-revision {model_revision!r}: {why}; {ANTHROPIC_MODELS}"
    )


def test_the_model_registry_given_is_the_one_read() -> None:
    registry = ModelRegistry({"anthropic/house-model@7": ModelInfo(1000, provider="anthropic")})
    check_dispatch_defaults(DispatchDefaults(model_revision="anthropic/house-model@7"), registry)
    with pytest.raises(DispatchDefaultError) as caught:
        check_dispatch_defaults(DispatchDefaults(), registry)
    assert str(caught.value) == (
        "--model-revision 'anthropic/claude-sonnet-4@2025-05': not in the model registry; the registry's "
        "anthropic models: anthropic/house-model@7 (as provider/model@revision)"
    )


SERVE = ["serve", "--redis-url", "redis://127.0.0.1:1/0", "--bootstrap", "127.0.0.1:1", "--max-outage", "0"]
"""Serve waits for Redis at start; `--max-outage 0` makes the first refusal the answer (exit 2)."""


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    if not app.registered_groups:
        _register()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--adapter", "nope@1"], f"--adapter 'nope@1': not a registered adapter; use one of {ADAPTERS}"),
        (
            ["--provider", "azure"],
            "--provider 'azure': no adapter's provider; use one of anthropic, bedrock, google, openai",
        ),
        (
            ["--model-revision", "anthropic/claude-9@1"],
            f"--model-revision 'anthropic/claude-9@1': not in the model registry; {ANTHROPIC_MODELS}",
        ),
    ],
    ids=["adapter", "provider", "model revision"],
)
def test_serve_refuses_it_in_one_line_exit_2_before_connecting(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, [*SERVE, *args], env={"COLUMNS": "80"})
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"turnledger serve: {line}\n")


def test_serve_reads_the_processors_model_registry_override(tmp_path: Path) -> None:
    override = tmp_path / "models.json"
    override.write_text(json.dumps({"models": {"anthropic/house-model": {"context_window": 1000}}}))
    args = [*SERVE, "--model-revision", "anthropic/house-model@7"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400", "TURNLEDGER_MODEL_REGISTRY": str(override)})
    assert result.exit_code == 2
    assert result.stderr.startswith("turnledger serve: Redis is not reachable at 'redis://127.0.0.1:1/0'"), (
        "past the check"
    )
