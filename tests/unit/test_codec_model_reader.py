"""The compiled model readers (codec.model_reader) against `model_validate`, the reference.

`Codec.decode` builds a record's model directly when the record was written with the current
schema. That may skip nothing `model_validate` checks: for every record it must give the very
instance `model_validate` gives (the same values of the same types, the same fields-set), and for
every input `model_validate` refuses, the same refusal (type, message, and so the same Rejected
record from the engine). What pydantic checks beyond what the schema guarantees, and where each is
kept, is listed in the module docstring; each has a test here.
"""

from __future__ import annotations

import random
import warnings
from io import BytesIO
from typing import Any

import pytest
from fastavro import schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator, validator

from tests.strategies import model_strategy
from turnledger.codec import Codec, CorruptRecord, SchemaRegistry
from turnledger.codec.loader import expand, load_schema_files
from turnledger.codec.model_reader import compile_model_reader
from turnledger.codec.models import MODELS_BY_NAME, NAMESPACE, RECORD_MODELS
from turnledger.codec.registry import HEADER_SIZE, SchemaEntry
from turnledger.dispatch.engine import BatchEngine
from turnledger.model.base import Frozen
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.events import DispatchRequested, Rejected, StreamDeltas
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition
from turnledger.records import SourceRecord

FAST = Codec(SchemaRegistry.from_files())
REFERENCE = Codec(SchemaRegistry.from_files(compiled=False))
"""fastavro alone, then `model_validate`: no compiled reader, so no model reader either."""


def _typed(value: Any) -> Any:
    """Everything `==` glosses over spelled out: the type of every value (a StrEnum member is not its
    string, a tuple not a list), each model's fields-set, extras and private state."""
    if isinstance(value, BaseModel):
        return (
            type(value),
            sorted(value.__pydantic_fields_set__),
            value.__pydantic_extra__,
            value.__pydantic_private__,
            [(k, _typed(v)) for k, v in value.__dict__.items()],
        )
    if isinstance(value, dict):
        return (dict, [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_typed(v) for v in value])
    return (type(value), value)


def _outcome(codec: Codec, data: bytes) -> tuple[Any, ...]:
    try:
        return ("ok", _typed(codec.decode(data)))
    except Exception as exc:
        return ("error", type(exc), str(exc))


def _entry(codec: Codec, name: str) -> SchemaEntry:
    entry = codec.registry.reader(f"{NAMESPACE}.{name}")
    assert entry is not None
    return entry


SENT_WIRE: dict[str, Any] = {
    "conversationId": "c",
    "eventId": "e",
    "occurredAtMs": 1,
    "operationId": "o",
    "attemptGeneration": 1,
}
"""A DispatchSent's wire datum, which the tests of one field or one model change from."""


def _wire_bytes(entry: SchemaEntry, wire: dict[str, Any]) -> bytes:
    """A record of exactly this wire datum (JSON-marked fields already text), written by fastavro."""
    out = BytesIO()
    out.write(entry.header)
    schemaless_writer(out, entry.parsed, wire)
    return out.getvalue()


def test_every_shipped_record_has_a_model_reader() -> None:
    for name in FAST.registry.names():
        entry = FAST.registry.reader(name)
        assert entry is not None
        assert FAST._compile_model_reader(entry.fingerprint) is not None, name
    for name in REFERENCE.registry.names():
        entry = REFERENCE.registry.reader(name)
        assert entry is not None
        assert REFERENCE._compile_model_reader(entry.fingerprint) is None, name


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_valid_records_build_exactly_the_validated_model(model: type[BaseModel]) -> None:
    entry = _entry(FAST, model.__name__)
    reader = compile_model_reader(entry.parsed, MODELS_BY_NAME)
    assert reader is not None

    @settings(max_examples=40)
    @given(model_strategy(model))
    def same(record: BaseModel) -> None:
        data = REFERENCE.encode(record)
        built, end = reader(data, HEADER_SIZE)  # the model reader itself answered
        assert end == len(data)
        validated = REFERENCE.decode(data)
        assert _typed(built) == _typed(validated) == _typed(FAST.decode(data))

    same()


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_truncated_and_corrupted_records_are_refused_with_the_same_words(model: type[BaseModel]) -> None:
    @settings(max_examples=4)
    @given(model_strategy(model), st.randoms(use_true_random=False))
    def same(record: BaseModel, rng: random.Random) -> None:
        data = REFERENCE.encode(record)
        variants = [data[:cut] for cut in range(HEADER_SIZE, len(data))]
        variants.append(data + b"\x00")
        for position in range(HEADER_SIZE, len(data)):
            for byte in (0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0xFF):
                variants.append(data[:position] + bytes([byte]) + data[position + 1 :])
        for _ in range(30):
            raw = bytearray(data)
            for _ in range(rng.randint(2, 4)):
                raw[rng.randrange(HEADER_SIZE, len(raw))] = rng.randrange(256)
            variants.append(bytes(raw))
        for variant in variants:
            assert _outcome(FAST, variant) == _outcome(REFERENCE, variant), variant

    same()


# ---------------------------------------------------------------- what pydantic refuses, refused alike

_REQUEST = DispatchRequested(
    conversation_id="c",
    event_id="e",
    occurred_at_ms=1,
    operation_id="o",
    adapter="anthropic-messages@1",
    provider="p",
    model_revision="m",
    tools=(ToolDefinition(name="clock"),),
    max_output_tokens=16,
)


@pytest.mark.parametrize("text", ["[1]", "1", "null", '"x"', "true", "[]"])
@pytest.mark.parametrize("field", ["policy", "inputSchema"])
def test_a_json_field_that_is_not_an_object_is_refused_as_before(field: str, text: str) -> None:
    """Avro and orjson accept any JSON text; the model's `dict[str, Any]` refuses all but an object."""
    entry = _entry(FAST, "DispatchRequested")
    assert entry.to_wire is not None
    wire = entry.to_wire(_REQUEST.model_dump(by_alias=True))
    if field == "policy":
        wire["policy"] = text
    else:
        wire["tools"][0]["inputSchema"] = text
    data = _wire_bytes(entry, wire)
    fast = _outcome(FAST, data)
    assert fast == _outcome(REFERENCE, data)
    assert fast[:2] == ("error", CorruptRecord)
    assert fast[2].startswith("turnledger.v1.DispatchRequested: 1 validation error for DispatchRequested\n")
    assert "Input should be a valid dictionary [type=dict_type" in fast[2]
    # the engine's rejection: the same reason and detail as the general path gives
    outputs = BatchEngine().process_batch([SourceRecord("turnledger.ingress", 0, 7, b"c", data)], {})  # type: ignore[arg-type]
    assert [type(o.record) for o in outputs] == [Rejected]
    rejected = outputs[0].record
    assert isinstance(rejected, Rejected)
    assert (rejected.reason, rejected.detail, rejected.source_offset) == (
        ReasonCode.UNDECODABLE_RECORD,
        fast[2],
        7,
    )


def _registry_with(name: str, change: Any, *, compiled: bool = True) -> tuple[Codec, SchemaEntry]:
    """A codec whose current `name` schema is the shipped one changed by `change(schema)`."""
    schema = expand(f"{NAMESPACE}.{name}", load_schema_files())
    change(schema)
    registry = SchemaRegistry(compiled=compiled)
    entry = registry.add(schema)
    return Codec(registry), entry


def _delta_schema_with_symbol(schema: dict[str, Any]) -> None:
    deltas = next(f for f in schema["fields"] if f["name"] == "deltas")
    delta_type = next(f for f in deltas["type"]["items"]["fields"] if f["name"] == "type")
    delta_type["type"] = {
        **delta_type["type"],
        "symbols": [*delta_type["type"]["symbols"], "from_the_future"],
    }


def test_an_enum_symbol_the_model_lacks_is_refused_as_before() -> None:
    fast, fast_entry = _registry_with("StreamDeltas", _delta_schema_with_symbol)
    reference, _ = _registry_with("StreamDeltas", _delta_schema_with_symbol, compiled=False)
    assert fast._compile_model_reader(fast_entry.fingerprint) is not None  # the symbol is checked per value
    delta = NormalizedDelta(
        response_handle="h",
        generation=1,
        block_index=0,
        delta_sequence=0,
        type=DeltaType.TEXT_DELTA,
        text="x",
    )
    event = StreamDeltas(
        conversation_id="c",
        event_id="e",
        occurred_at_ms=1,
        operation_id="o",
        attempt_generation=1,
        deltas=(delta,),
    )
    wire = event.model_dump(by_alias=True)
    good = _wire_bytes(fast_entry, wire)
    assert _outcome(fast, good) == _outcome(reference, good)
    assert fast.decode(good) == event
    wire["deltas"][0]["type"] = "from_the_future"
    bad = _wire_bytes(fast_entry, wire)
    outcome = _outcome(fast, bad)
    assert outcome == _outcome(reference, bad)
    assert outcome[:2] == ("error", CorruptRecord)
    assert "Input should be 'message_start'" in outcome[2] and "[type=enum" in outcome[2]


def test_a_schema_whose_fields_are_not_the_models_is_left_to_model_validate() -> None:
    def extra(schema: dict[str, Any]) -> None:
        schema["fields"].append({"name": "note", "type": "string", "default": ""})

    def missing(schema: dict[str, Any]) -> None:
        schema["fields"] = [f for f in schema["fields"] if f["name"] != "attemptGeneration"]

    def retyped(schema: dict[str, Any]) -> None:
        field = next(f for f in schema["fields"] if f["name"] == "attemptGeneration")
        field["type"] = "string"

    for change, refusal in ((extra, "extra_forbidden"), (missing, "type=missing"), (retyped, "int_parsing")):
        fast, fast_entry = _registry_with("DispatchSent", change)
        reference, _ = _registry_with("DispatchSent", change, compiled=False)
        assert fast._compile_model_reader(fast_entry.fingerprint) is None, change.__name__
        wire = {"conversationId": "c", "eventId": "e", "occurredAtMs": 1, "operationId": "o"}
        wire |= {"note": "x"} if change is extra else {"attemptGeneration": "x"} if change is retyped else {}
        if change is extra:
            wire["attemptGeneration"] = 1
        data = _wire_bytes(fast_entry, wire)
        outcome = _outcome(fast, data)
        assert outcome == _outcome(reference, data)
        assert outcome[:2] == ("error", CorruptRecord) and refusal in outcome[2], change.__name__


class _Checked(Frozen):
    """A model with a check of its own: never built without `model_validate`."""

    conversation_id: str
    event_id: str
    occurred_at_ms: int
    operation_id: str
    attempt_generation: int


class _FieldValidated(_Checked):
    @field_validator("operation_id")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("empty operation id")
        return value


class _ModelValidated(_Checked):
    @model_validator(mode="after")
    def _positive(self) -> _ModelValidated:
        if self.attempt_generation < 1:
            raise ValueError("generation below 1")
        return self


class _Constrained(_Checked):
    operation_id: str = Field(max_length=3)


class _PostInit(_Checked):
    def model_post_init(self, context: Any, /) -> None:
        object.__setattr__(self, "operation_id", self.operation_id.upper())


class _Private(_Checked):
    _seen: int = PrivateAttr(default=0)


class _Extras(_Checked):
    model_config = ConfigDict(extra="allow")


class _OldValidated(_Checked):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        @validator("operation_id")
        @classmethod
        def _old(cls, value: str) -> str:
            return value


@pytest.mark.parametrize("model", [_PostInit, _Private, _Extras, _OldValidated], ids=lambda m: m.__name__)
def test_models_with_a_hook_private_state_extras_or_an_old_validator_get_no_model_reader(
    model: type[BaseModel],
) -> None:
    """Built without `model_validate`, each would skip what it adds: the hook, the private state's
    default, the extras' handling, the validator."""
    name = f"{NAMESPACE}.DispatchSent"
    fast = Codec(SchemaRegistry.from_files(), models={**MODELS_BY_NAME, name: model})
    assert fast._compile_model_reader(_entry(fast, "DispatchSent").fingerprint) is None


@pytest.mark.parametrize("model", [_FieldValidated, _ModelValidated, _Constrained], ids=lambda m: m.__name__)
def test_models_with_validators_or_constraints_are_left_to_model_validate(model: type[BaseModel]) -> None:
    name = f"{NAMESPACE}.DispatchSent"
    fast = Codec(SchemaRegistry.from_files(), models={**MODELS_BY_NAME, name: model})
    entry = _entry(fast, "DispatchSent")
    assert fast._compile_model_reader(entry.fingerprint) is None
    wire = {**SENT_WIRE, "operationId": "", "attemptGeneration": 0}
    wire["operationId"] = "" if model is _FieldValidated else "toolong" if model is _Constrained else "o"
    data = _wire_bytes(entry, wire)
    with pytest.raises(CorruptRecord) as refused:
        fast.decode(data)
    expected = {_FieldValidated: "empty operation id", _ModelValidated: "generation below 1"}
    assert expected.get(model, "at most 3 characters") in str(refused.value)


def test_frozen_records_share_a_fields_set_that_nothing_changes_in_place() -> None:
    """Built instances of a frozen model share one fields-set, and so do their copies that add no
    name to it (`FastCopy`): assignment is refused before pydantic would add to it, and pydantic's
    own copies (shallow and deep) take a set of their own, so the shared set never changes."""
    entry = _entry(FAST, "DispatchSent")
    wire = dict(SENT_WIRE)
    first, second = FAST.decode(_wire_bytes(entry, wire)), FAST.decode(_wire_bytes(entry, wire))
    shared = first.__pydantic_fields_set__
    assert second.__pydantic_fields_set__ is shared
    expected = set(shared)
    with pytest.raises(ValueError, match="frozen"):
        first.operation_id = "x"  # type: ignore[misc]
    ours = first.model_copy(update={"operation_id": "x"})  # FastCopy: adds no name, shares the set
    assert ours.__pydantic_fields_set__ is shared and ours.operation_id == "x"
    pydantics = [
        BaseModel.model_copy(first, update={"operation_id": "x"}),
        BaseModel.model_copy(first, update={"operation_id": "x"}, deep=True),
    ]
    assert all(c.__pydantic_fields_set__ is not shared for c in pydantics)
    assert shared == expected == set(type(first).model_fields)


class _Mutable(BaseModel):
    """Not frozen: assignment adds to the fields-set, so each instance has its own."""

    conversationId: str  # the schema's names (no alias generator)
    eventId: str
    occurredAtMs: int
    operationId: str
    attemptGeneration: int


def test_records_of_a_mutable_model_each_get_their_own_fields_set() -> None:
    codec = Codec(
        SchemaRegistry.from_files(), models={**MODELS_BY_NAME, f"{NAMESPACE}.DispatchSent": _Mutable}
    )
    entry = _entry(codec, "DispatchSent")
    assert codec._compile_model_reader(entry.fingerprint) is not None
    wire = dict(SENT_WIRE)
    first, second = codec.decode(_wire_bytes(entry, wire)), codec.decode(_wire_bytes(entry, wire))
    assert first.__pydantic_fields_set__ is not second.__pydantic_fields_set__
    assert _typed(first) == _typed(_Mutable.model_validate(wire))


class _WithJson(_Checked):
    meta: dict[str, Any]


class _WithJsonAsText(_Checked):
    meta: str


@pytest.mark.parametrize("field_type", ["string", {"type": "string"}], ids=["name", "object"])
def test_a_json_marked_field_is_read_as_an_object_into_a_dict_annotation_only(field_type: Any) -> None:
    name = f"{NAMESPACE}.DispatchSent"
    schema = expand(name, load_schema_files())
    schema["fields"].append({"name": "meta", "type": field_type, "turnledger.json": True})
    wire = {"conversationId": "c", "eventId": "e", "occurredAtMs": 1, "operationId": "o"}
    wire |= {"attemptGeneration": 2, "meta": '{"a":[1]}'}
    for model, compiled in ((_WithJson, True), (_WithJsonAsText, False)):
        registry = SchemaRegistry()
        entry = registry.add(schema)
        codec = Codec(registry, models={**MODELS_BY_NAME, name: model})
        reader = codec._compile_model_reader(entry.fingerprint)
        assert (reader is not None) is compiled, model.__name__
        if compiled:
            decoded = codec.decode(_wire_bytes(entry, wire))
            assert type(decoded) is _WithJson and decoded.meta == {"a": [1]}


class _Kinds(_Checked):
    """Field annotations the shipped models do not use, each on a field of the test's own schema."""

    kind: str
    maybe: None | int  # noqa: RUF036 (None first is what is tested)


class _KindsAsInt(_Checked):
    kind: int
    maybe: int | None


class _ThreeWays(_Checked):
    kind: str
    maybe: str | int | None


def _kinds_codec(model: type[BaseModel], maybe: list[Any]) -> tuple[Codec, SchemaEntry]:
    name = f"{NAMESPACE}.DispatchSent"
    schema = expand(name, load_schema_files())
    schema["fields"].append({"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}})
    schema["fields"].append({"name": "maybe", "type": maybe})
    registry = SchemaRegistry()
    entry = registry.add(schema)
    return Codec(registry, models={**MODELS_BY_NAME, name: model}), entry


def test_an_enum_read_as_str_and_a_none_first_optional_are_compiled() -> None:
    wire = {**SENT_WIRE, "attemptGeneration": 2}
    for maybe in (["null", "long"], [{"type": "null"}, "long"], ["long", "null"]):
        codec, entry = _kinds_codec(_Kinds, maybe)
        assert codec._compile_model_reader(entry.fingerprint) is not None, maybe
        for kind, value in (("B", 7), ("A", None)):
            decoded = codec.decode(_wire_bytes(entry, {**wire, "kind": kind, "maybe": value}))
            assert _typed(decoded) == _typed(_Kinds(**{**wire, "kind": kind, "maybe": value}))


def test_unions_and_enums_outside_the_subset_are_left_to_model_validate() -> None:
    cases = [
        (_KindsAsInt, ["null", "long"]),  # an enum as an int
        (_ThreeWays, ["null", "long"]),  # an annotation of three types
        (_Kinds, ["null", "long", "string"]),  # a union of three branches
    ]
    for model, maybe in cases:
        codec, entry = _kinds_codec(model, maybe)
        assert codec._compile_model_reader(entry.fingerprint) is None, (model.__name__, maybe)


class _FixedPair(_Checked):
    kind: str
    maybe: tuple[int, int] | None


class _SetOf(_Checked):
    kind: str
    maybe: frozenset[int] | None


class _RecordAsDict(_Checked):
    kind: str
    maybe: dict[str, Any] | None


def test_arrays_and_records_into_annotations_of_another_shape_are_left_to_model_validate() -> None:
    """A fixed-length tuple or a set is no array the reader builds, and a record is read only into its own
    model: `model_validate` converts or refuses each."""
    array = {"type": "array", "items": "long"}
    inner = {"type": "record", "name": "Inner", "fields": [{"name": "a", "type": "long"}]}
    for model, maybe in (
        (_FixedPair, ["null", array]),
        (_SetOf, ["null", array]),
        (_RecordAsDict, ["null", inner]),
    ):
        codec, entry = _kinds_codec(model, maybe)
        assert codec._compile_model_reader(entry.fingerprint) is None, model.__name__


class _Renamed(_Checked):
    kind: str
    value: int | None = Field(validation_alias="maybe")


def test_a_field_is_read_under_its_validation_alias() -> None:
    """`value` is validated from `maybe` (its serialization alias stays `value`): the reader takes the
    schema's `maybe` for it, as `model_validate` does."""
    codec, entry = _kinds_codec(_Renamed, ["null", "long"])
    assert codec._compile_model_reader(entry.fingerprint) is not None
    wire = {**SENT_WIRE, "attemptGeneration": 2}
    decoded = codec.decode(_wire_bytes(entry, {**wire, "kind": "A", "maybe": 7}))
    assert isinstance(decoded, _Renamed) and decoded.value == 7
    assert _typed(decoded) == _typed(_Renamed.model_validate({**wire, "kind": "A", "maybe": 7}))
