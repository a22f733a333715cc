"""The .avsc contracts and the pydantic models describe the same records."""

from __future__ import annotations

import enum
import json
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from fastavro import parse_schema
from pydantic import BaseModel

from turnledger.codec import SchemaRegistry
from turnledger.codec.loader import expand, load_schema_files
from turnledger.codec.models import NAMESPACE, RECORD_MODELS
from turnledger.model.deltas import DeltaType, StopReason
from turnledger.model.events import INGRESS_EVENT_TYPES, OUTPUT_RECORD_TYPES, DispatchState, StreamOutcome
from turnledger.model.reasons import ReasonCode

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
FILES = load_schema_files()
ENUMS: dict[str, type[enum.Enum]] = {
    "ReasonCode": ReasonCode,
    "DispatchState": DispatchState,
    "DeltaType": DeltaType,
    "StopReason": StopReason,
    "StreamOutcome": StreamOutcome,
}


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    return FILES[f"{NAMESPACE}.{model.__name__}"]


def test_every_event_and_output_record_has_a_schema() -> None:
    for model in (*INGRESS_EVENT_TYPES, *OUTPUT_RECORD_TYPES):
        assert model in RECORD_MODELS
    records = {name for name, schema in FILES.items() if schema["type"] == "record"}
    assert records == {f"{NAMESPACE}.{m.__name__}" for m in RECORD_MODELS}
    assert {name for name, s in FILES.items() if s["type"] == "enum"} == {f"{NAMESPACE}.{n}" for n in ENUMS}


def test_files_are_named_after_their_type() -> None:
    for path in SCHEMA_DIR.glob("*.avsc"):
        assert json.loads(path.read_text())["name"] == path.stem


def test_the_package_sees_the_repository_schemas() -> None:
    assert len(FILES) == len(list(SCHEMA_DIR.glob("*.avsc")))


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_record_fields_match_the_model(model: type[BaseModel]) -> None:
    schema = schema_of(model)
    assert schema["doc"]
    fields = {f["name"]: f for f in schema["fields"]}
    aliases = {info.alias or name: info for name, info in model.model_fields.items()}
    assert list(fields) == list(aliases)
    for alias, info in aliases.items():
        field = fields[alias]
        assert field["doc"], alias
        assert field["type"] == expected_type(info.annotation), alias
        assert bool(field.get("turnledger.json")) == (get_origin(info.annotation) is dict), alias
        if info.is_required():
            assert "default" not in field, alias
        else:
            assert field["default"] == expected_default(info.get_default(call_default_factory=True)), alias


def expected_type(annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        (inner,) = (a for a in get_args(annotation) if a is not type(None))
        return ["null", expected_type(inner)]
    if origin in (tuple, list):
        return {"type": "array", "items": expected_type(get_args(annotation)[0])}
    if origin is dict:
        return "string"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum | BaseModel):
        return f"{NAMESPACE}.{annotation.__name__}"
    return {str: "string", int: "long", bool: "boolean", bytes: "bytes"}[annotation]


def expected_default(value: Any) -> Any:
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, enum.Enum):
        return value.value
    return value


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enums_match_and_have_an_evolution_default(name: str) -> None:
    schema = FILES[f"{NAMESPACE}.{name}"]
    assert schema["symbols"] == [m.value for m in ENUMS[name]]
    assert schema["default"] in schema["symbols"]
    assert schema["doc"]


def test_reason_code_default_is_unspecified() -> None:
    assert FILES[f"{NAMESPACE}.ReasonCode"]["default"] == "UNSPECIFIED"


def test_named_types_are_defined_once_and_expand_to_self_contained_schemas() -> None:
    for name, _schema in FILES.items():
        expanded = expand(name, FILES)
        parse_schema(expanded, named_schemas={})  # raises on an undefined or doubly defined name
        text = json.dumps(expanded)
        for other in FILES:
            short = other.rsplit(".", 1)[1]
            assert text.count(f'"name": "{short}"') <= 1, (name, other)


def test_registry_parses_every_record_once() -> None:
    registry = SchemaRegistry.from_files()
    assert set(registry.names()) == {f"{NAMESPACE}.{m.__name__}" for m in RECORD_MODELS}
