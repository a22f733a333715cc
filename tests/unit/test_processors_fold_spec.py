"""`--fold module:attr` (`processors/fold_spec.py`): the named callable, or a `FoldSpecError` that says
which part of the spec is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnledger.errors import ProcessorError
from turnledger.processors.dispatch_partition import DispatchPartitionFold
from turnledger.processors.fold_spec import DEFAULT_FOLD_SPEC, FoldSpecError, load_fold_factory


def test_the_default_spec_names_the_dispatch_fold() -> None:
    assert DEFAULT_FOLD_SPEC == "turnledger.processors.dispatch_partition:DispatchPartitionFold"
    assert load_fold_factory(DEFAULT_FOLD_SPEC) is DispatchPartitionFold


def test_any_importable_callable_is_a_factory() -> None:
    assert load_fold_factory("json:dumps") is json.dumps


def test_a_spec_error_is_a_processor_error_and_a_value_error() -> None:
    assert issubclass(FoldSpecError, ProcessorError)
    assert issubclass(FoldSpecError, ValueError)


@pytest.mark.parametrize("spec", ["json", "json:", ":dumps", ":", ""])
def test_a_spec_without_both_module_and_attribute_is_refused(spec: str) -> None:
    with pytest.raises(FoldSpecError) as caught:
        load_fold_factory(spec)
    assert str(caught.value) == f"expected module:attr, got {spec!r}"


def test_a_module_that_cannot_be_imported_is_named_with_the_import_error() -> None:
    with pytest.raises(FoldSpecError) as caught:
        load_fold_factory("no_such_fold:make")
    assert str(caught.value) == "cannot load 'no_such_fold:make': No module named 'no_such_fold'"
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_a_missing_attribute_is_named_with_the_attribute_error() -> None:
    with pytest.raises(FoldSpecError) as caught:
        load_fold_factory("json:no_factory")
    assert str(caught.value) == "cannot load 'json:no_factory': module 'json' has no attribute 'no_factory'"
    assert isinstance(caught.value.__cause__, AttributeError)


@pytest.mark.parametrize(
    ("module", "source", "raised"),
    [
        ("raising_fold", "raise ValueError('no config')", "ValueError: no config"),
        ("unparsable_fold", "def broken(:", "SyntaxError: invalid syntax (unparsable_fold.py, line 1)"),
    ],
)
def test_a_module_whose_import_fails_is_named_with_what_it_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, raised: str
) -> None:
    (tmp_path / f"{module}.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FoldSpecError) as caught:
        load_fold_factory(f"{module}:make")
    assert str(caught.value) == f"cannot load '{module}:make': importing {module} raised {raised}"
    assert type(caught.value.__cause__).__name__ == raised.split(":")[0]


def test_an_attribute_after_a_second_colon_is_looked_up_whole() -> None:
    with pytest.raises(FoldSpecError) as caught:
        load_fold_factory("json:dumps:x")
    assert str(caught.value) == "cannot load 'json:dumps:x': module 'json' has no attribute 'dumps:x'"


def test_an_attribute_that_is_not_callable_is_refused() -> None:
    spec = "turnledger.processors.fold_spec:DEFAULT_FOLD_SPEC"
    with pytest.raises(FoldSpecError) as caught:
        load_fold_factory(spec)
    assert str(caught.value) == f"{spec!r} is not callable"
    assert caught.value.__cause__ is None
