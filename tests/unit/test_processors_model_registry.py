"""The model registry a processor admits requests with (`processors/model_registry.py`): the built-in
one, or merged with the override file a flag or $TURNLEDGER_MODEL_REGISTRY names, read once per path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnledger.adapters.admission import ModelRegistryError, builtin_registry
from turnledger.processors.model_registry import REGISTRY_ENV, load_model_registry

MODEL = "openai/gpt-4o"


def _override(tmp_path: Path, window: int = 1234) -> Path:
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": {MODEL: {"context_window": window}}}), "utf-8")
    return path


def test_the_variable_is_named() -> None:
    assert REGISTRY_ENV == "TURNLEDGER_MODEL_REGISTRY"


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_without_a_path_the_built_in_registry_is_used(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(REGISTRY_ENV, raising=False)
    else:
        monkeypatch.setenv(REGISTRY_ENV, value)
    assert load_model_registry() is builtin_registry()


def test_a_path_given_wins_over_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "absent.json"))
    info = load_model_registry(_override(tmp_path)).lookup(f"{MODEL}@2024-11")
    assert info is not None and info.context_window == 1234


def test_the_variable_names_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REGISTRY_ENV, str(_override(tmp_path, 4321)))
    info = load_model_registry().lookup(f"{MODEL}@2024-11")
    assert info is not None and info.context_window == 4321


def test_each_path_is_read_once(tmp_path: Path) -> None:
    path = _override(tmp_path)
    first = load_model_registry(path)
    path.write_text("not JSON any more", "utf-8")
    assert load_model_registry(str(path)) is first


def test_a_missing_file_is_a_registry_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.json"
    with pytest.raises(ModelRegistryError) as caught:
        load_model_registry(path)
    assert str(caught.value) == (
        f"model registry override {str(path)!r}: [Errno 2] No such file or directory: {str(path)!r}"
    )
    assert isinstance(caught.value.__cause__, FileNotFoundError)


def test_a_file_that_is_not_json_is_a_registry_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{models", "utf-8")
    with pytest.raises(ModelRegistryError) as caught:
        load_model_registry(path)
    assert str(caught.value).startswith(f"model registry override {str(path)!r}: Expecting property name")
    assert isinstance(caught.value.__cause__, ValueError)


def test_a_file_that_is_not_utf8_is_a_registry_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"models": {"caf\xe9": {}}}')
    with pytest.raises(ModelRegistryError) as caught:
        load_model_registry(path)
    assert str(caught.value).startswith(f"model registry override {str(path)!r}: 'utf-8' codec can't decode")
