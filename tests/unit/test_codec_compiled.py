"""The compiled Avro readers and writers (codec.compiled) against fastavro alone, the reference.

The codec with compiled schemas must be indistinguishable from the fastavro-only codec: the
same bytes for every datum it encodes, the same datum (same values of the same types) for
every body it decodes, and the same exception type and message whenever either fails, on
valid records, on datums with values of the wrong type or range, and on truncated or
corrupted bytes.
"""

from __future__ import annotations

import copy
import enum
import functools
import random
import warnings
from collections.abc import Callable
from io import BytesIO
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer, model_serializer

from tests.strategies import model_strategy
from turnledger.codec import Codec, SchemaRegistry
from turnledger.codec.compiled import Miss, compile_reader, compile_writer
from turnledger.codec.models import NAMESPACE, RECORD_MODELS
from turnledger.codec.registry import HEADER_SIZE, SchemaEntry, entry_for
from turnledger.model import events
from turnledger.model.deltas import DeltaType
from turnledger.model.events import CancelRequested, DispatchSent

FAST = Codec(SchemaRegistry.from_files())
REFERENCE = Codec(SchemaRegistry.from_files(compiled=False))


def _name(model: type[BaseModel]) -> str:
    return f"{NAMESPACE}.{model.__name__}"


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", _typed(call()))
    except Exception as exc:
        return ("error", type(exc), str(exc))


def _typed(value: Any) -> Any:
    """A value with the type of every part spelled out, so that True != 1 and 'a' != StrEnum('a')."""
    if isinstance(value, dict):
        return (dict, [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [_typed(v) for v in value])
    return (type(value), value)


def _encode_both(model: type[BaseModel], datum: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    fast_entry = FAST.registry.reader(_name(model))
    reference_entry = REFERENCE.registry.reader(_name(model))
    assert fast_entry is not None and reference_entry is not None
    fast = _outcome(lambda: FAST.encode_datum(fast_entry, copy.deepcopy(datum)))
    reference = _outcome(lambda: REFERENCE.encode_datum(reference_entry, copy.deepcopy(datum)))
    return fast, reference


def _decode_both(data: bytes) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return _outcome(lambda: FAST.decode_datum(data)), _outcome(lambda: REFERENCE.decode_datum(data))


def test_every_shipped_schema_is_compiled() -> None:
    for name in FAST.registry.names():
        entry = FAST.registry.reader(name)
        assert entry is not None
        assert entry.fast_reader is not None, name
        assert entry.fast_writer is not None, name
    assert all(REFERENCE.registry.reader(n).fast_writer is None for n in REFERENCE.registry.names())  # type: ignore[union-attr]


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_valid_records_encode_and_decode_exactly_as_fastavro(model: type[BaseModel]) -> None:
    entry = FAST.registry.reader(_name(model))
    assert entry is not None and entry.fast_writer is not None and entry.fast_reader is not None
    fast_writer, fast_reader = entry.fast_writer, entry.fast_reader

    @settings(max_examples=40)
    @given(model_strategy(model))
    def same(record: BaseModel) -> None:
        datum = record.model_dump(by_alias=True)
        fast, reference = _encode_both(model, datum)
        assert fast == reference
        assert fast[0] == "ok"
        data = REFERENCE.encode(record)
        # the compiled paths themselves answered (no silent fallback on valid records)
        wire = copy.deepcopy(datum) if entry.to_wire is None else entry.to_wire(copy.deepcopy(datum))
        out = bytearray(entry.header)
        fast_writer(out, wire)
        assert bytes(out) == data
        decoded, end = fast_reader(data, HEADER_SIZE)
        assert end == len(data)
        assert _typed(decoded) == _typed(schemaless_reader(BytesIO(data[HEADER_SIZE:]), entry.parsed))
        fast_datum, reference_datum = _decode_both(data)
        assert fast_datum == reference_datum
        assert fast_datum[0] == "ok"
        assert FAST.decode(data) == REFERENCE.decode(data) == record

    same()


class _Flavour(enum.StrEnum):
    A = "a"
    TEXT_DELTA = "text_delta"


class _Int(int):
    pass


ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    63,
    64,
    -65,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    _Int(5),
    1.5,
    "",
    "x",
    "é\u2603",
    "\ud800",
    _Flavour.A,
    _Flavour.TEXT_DELTA,
    DeltaType.TEXT_DELTA,
    "text_delta",
    "COMMITTED",
    "FROM_THE_FUTURE",
    b"",
    b"x",
    bytearray(b"x"),
    (),
    [],
    ("a", "b"),
    ["a"],
    {},
    {"a": 1},
    {"-type": "x"},
]


def _places(datum: dict[str, Any]) -> list[dict[str, Any]]:
    """The datum and every record inside it (nested records and records in arrays)."""
    found = [datum]
    for value in datum.values():
        if isinstance(value, dict) and value:
            found.extend(_places(value))
        elif isinstance(value, list | tuple):
            found.extend(p for item in value if isinstance(item, dict) for p in _places(item))
    return found


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_datums_off_the_fast_path_get_fastavros_answer(model: type[BaseModel]) -> None:
    """Every field of every record in the datum replaced by every odd value, deleted, or joined by
    an unexpected one: the same bytes, or the same error, as fastavro alone."""

    @settings(max_examples=4)
    @given(model_strategy(model))
    def same(record: BaseModel) -> None:
        datum = record.model_dump(by_alias=True)
        for place_index, place in enumerate(_places(datum)):
            for key in [*place, None]:
                for value in [*ODD_VALUES, "delete"]:
                    changed = copy.deepcopy(datum)
                    target = _places(changed)[place_index]
                    if key is None:
                        target["unexpected"] = value
                    elif value == "delete":
                        del target[key]
                    else:
                        target[key] = value
                    fast, reference = _encode_both(model, changed)
                    assert fast == reference, (key, value)

    same()


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_truncated_and_corrupted_bodies_decode_or_fail_exactly_as_fastavro(model: type[BaseModel]) -> None:
    """Every truncation, every byte of the body replaced by each of a few telling values, and random
    multi-byte corruptions: the same datum, or the same error, as fastavro alone."""

    @settings(max_examples=5)
    @given(model_strategy(model), st.randoms(use_true_random=False))
    def same(record: BaseModel, rng: random.Random) -> None:
        data = REFERENCE.encode(record)
        variants = [data[:cut] for cut in range(HEADER_SIZE, len(data))]
        variants.append(data + b"\x00")
        for position in range(HEADER_SIZE, len(data)):
            for byte in (0x00, 0x01, 0x02, 0x03, 0x04, 0x7F, 0x80, 0x81, 0xFF):
                variants.append(data[:position] + bytes([byte]) + data[position + 1 :])
        for _ in range(50):
            raw = bytearray(data)
            for _ in range(rng.randint(2, 4)):
                raw[rng.randrange(HEADER_SIZE, len(raw))] = rng.randrange(256)
            variants.append(bytes(raw))
        for variant in variants:
            fast, reference = _decode_both(variant)
            assert fast == reference, variant

    same()


def _both_codecs(schema: dict[str, Any]) -> tuple[Codec, SchemaEntry, Codec, SchemaEntry]:
    """A compiled codec and the fastavro-only reference, each holding only `schema` (no models)."""
    fast = Codec(SchemaRegistry(), models={})
    reference = Codec(SchemaRegistry(compiled=False), models={})
    return fast, fast.registry.add(schema), reference, reference.registry.add(schema)


def test_varints_at_the_edges_of_64_bits() -> None:
    schema = {
        "type": "record",
        "name": "Edge",
        "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}],
    }
    fast, fast_entry, reference, reference_entry = _both_codecs(schema)
    tails = [b"\x00", b"\x02a", b"\x01", b"\x7f", b"\x80"]
    bodies = [
        b"\xff" * 9 + b"\x01",  # the largest zig-zag value
        b"\xfe" + b"\xff" * 8 + b"\x01",
        b"\xff" * 9 + b"\x02",  # a bit beyond 64
        b"\xff" * 9 + b"\x7f",
        b"\xff" * 10 + b"\x01",  # eleven bytes
        b"\x80\x00",  # zero, not minimal
        b"\x80\x80\x80\x00",
        b"\x81\x01",
    ]
    for body in bodies:
        for tail in tails:
            data = fast_entry.header + body + tail
            assert _outcome(lambda d=data: fast.decode_datum(d)) == _outcome(  # type: ignore[misc]
                lambda d=data: reference.decode_datum(d)
            )
    for n in [0, 1, -1, 63, 64, -64, -65, 2**62, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**70]:
        for s in ["", "x" * 63, "x" * 64, "é" * 40]:
            datum = {"n": n, "s": s}
            assert _outcome(lambda d=datum: fast.encode_datum(fast_entry, d)) == _outcome(  # type: ignore[misc]
                lambda d=datum: reference.encode_datum(reference_entry, d)
            )


def test_ints_and_nulls_are_compiled_and_an_int_out_of_32_bits_is_left_to_fastavro() -> None:
    """The shipped schemas have no "int" and no bare "null" field: a record made of both."""
    schema = {
        "type": "record",
        "name": "Narrow",
        "fields": [{"name": "n", "type": "int"}, {"name": "nothing", "type": "null"}],
    }
    fast, fast_entry, reference, reference_entry = _both_codecs(schema)
    writer, reader = fast_entry.fast_writer, fast_entry.fast_reader
    assert writer is not None and reader is not None
    for n in (0, 63, 64, -1, -64, -65, 2**31 - 1, -(2**31)):
        out = bytearray()
        writer(out, {"n": n, "nothing": None})
        assert bytes(out) == reference.encode_datum(reference_entry, {"n": n, "nothing": None})[HEADER_SIZE:]
        assert reader(bytes(out), 0) == ({"n": n, "nothing": None}, len(out))
    for datum in (
        {"n": 2**31, "nothing": None},
        {"n": -(2**31) - 1, "nothing": None},
        {"n": 1, "nothing": 0},
    ):
        with pytest.raises(Miss):
            writer(bytearray(), datum)
        fast_outcome = _outcome(functools.partial(fast.encode_datum, fast_entry, dict(datum)))
        assert fast_outcome == _outcome(
            functools.partial(reference.encode_datum, reference_entry, dict(datum))
        )


def test_maps_are_compiled_and_write_and_read_as_fastavro() -> None:
    """No shipped schema has a map: one of longs and one of records, at every length class."""
    point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "long"}]}
    schema = {
        "type": "record",
        "name": "Maps",
        "fields": [
            {"name": "counts", "type": {"type": "map", "values": "long"}},
            {"name": "points", "type": {"type": "map", "values": point}},
        ],
    }
    fast, fast_entry, reference, reference_entry = _both_codecs(schema)
    writer, reader = fast_entry.fast_writer, fast_entry.fast_reader
    assert writer is not None and reader is not None
    for size in (0, 1, 63, 64, 200):
        datum = {
            "counts": {f"k{i}": i * 1000 for i in range(size)},
            "points": {"é" * (i % 70): {"x": -i} for i in range(size)},
        }
        out = bytearray()
        writer(out, copy.deepcopy(datum))
        assert bytes(out) == reference.encode_datum(reference_entry, copy.deepcopy(datum))[HEADER_SIZE:]
        assert reader(bytes(out), 0) == (datum, len(out))
    for odd in ({"counts": {1: 1}, "points": {}}, {"counts": [("a", 1)], "points": {}}):
        with pytest.raises(Miss):
            writer(bytearray(), odd)
        fast_outcome = _outcome(functools.partial(fast.encode_datum, fast_entry, copy.deepcopy(odd)))
        assert fast_outcome == _outcome(
            functools.partial(reference.encode_datum, reference_entry, copy.deepcopy(odd))
        )


def test_the_compiled_paths_give_up_rather_than_guess() -> None:
    schema = entry_for(
        {
            "type": "record",
            "name": "Edge",
            "fields": [
                {"name": "flag", "type": "boolean"},
                {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
                {"name": "maybe", "type": ["null", "long"]},
            ],
        }
    ).parsed
    reader, writer = compile_reader(schema), compile_writer(schema)
    assert reader is not None and writer is not None
    compiled_entry = entry_for({"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]})
    assert compiled_entry.fast_reader is not None and compiled_entry.fast_writer is not None  # the default
    for body in (b"\x02\x00\x00", b"\x00\x04\x00", b"\x00\x00\x04", b"\x00\x01\x00", b"\x00\x00"):
        with pytest.raises((Miss, IndexError, KeyError)):
            reader(body, 0)
    for datum in (
        {"flag": 1, "kind": "A", "maybe": None},
        {"flag": True, "kind": "C", "maybe": None},
        {"flag": True, "kind": "A", "maybe": True},
        {"flag": True, "kind": "A", "maybe": (1,)},
        {"flag": True, "kind": "A"},
        {"-type": "Edge", "flag": True, "kind": "A", "maybe": None},  # fastavro's record type notation
        [True, "A", None],
    ):
        with pytest.raises((Miss, KeyError)):
            writer(bytearray(), datum)


def test_a_model_writer_takes_only_its_own_class() -> None:
    class LaterSent(DispatchSent):
        pass

    compiled = FAST.record_writer(DispatchSent)
    assert compiled is not None
    _, writer = compiled
    fields = {"conversation_id": "c", "event_id": "e", "occurred_at_ms": 5, "operation_id": "o"}
    out = bytearray()
    writer(out, DispatchSent(**fields, attempt_generation=1))
    assert bytes(out) == REFERENCE.encode(DispatchSent(**fields, attempt_generation=1))[HEADER_SIZE:]
    for other in (LaterSent(**fields, attempt_generation=1), CancelRequested(**fields, reason="user")):
        with pytest.raises(Miss):
            writer(bytearray(), other)


def test_schemas_outside_the_compiled_subset_are_left_to_fastavro() -> None:
    for field_type in (
        "double",
        "float",
        {"type": "fixed", "name": "F", "size": 4},
        {"type": "long", "logicalType": "timestamp-millis"},
    ):
        schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": field_type}]}
        parsed = entry_for(schema).parsed
        assert compile_reader(parsed) is None
        assert compile_writer(parsed) is None
    parsed = entry_for(
        {"type": "record", "name": "R", "fields": [{"name": "x", "type": ["null", "string", "long"]}]}
    ).parsed
    assert compile_reader(parsed) is not None
    assert compile_writer(parsed) is None
    # the writer takes null plus at most one other branch, and no union inside a union
    for union in (["null", ["null", "string"]], ["null", "null"], ["string", "long"]):
        parsed = entry_for({"type": "record", "name": "R", "fields": [{"name": "x", "type": union}]}).parsed
        assert compile_reader(parsed) is not None, union
        assert compile_writer(parsed) is None, union


def test_a_record_that_refers_to_itself_is_compiled_once_and_reads_and_writes_as_fastavro() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "value", "type": "long"}, {"name": "next", "type": ["null", "Node"]}],
    }
    entry = entry_for(node)
    reader, writer = compile_reader(entry.parsed), compile_writer(entry.parsed)
    assert reader is not None and writer is not None
    chain: dict[str, Any] = {"value": 3, "next": None}
    for value in (2, 1):
        chain = {"value": value, "next": chain}
    out = bytearray()
    writer(out, copy.deepcopy(chain))
    reference = BytesIO()
    schemaless_writer(reference, entry.parsed, chain)
    assert bytes(out) == reference.getvalue() == b"\x02\x02\x04\x02\x06\x00"
    assert reader(bytes(out), 0) == (chain, len(out))


def test_unions_of_one_branch_and_arrays_in_unions_write_as_fastavro() -> None:
    cases: list[tuple[Any, list[Any]]] = [
        (["null"], [None, 1]),
        (["long"], [None, 1, "x"]),
        ([{"type": "array", "items": "long"}, "null"], [None, [], [1, 2], (1,), ("long", [1])]),
    ]
    for union, values in cases:
        schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": union}]}
        fast, fast_entry, reference, reference_entry = _both_codecs(schema)
        assert fast_entry.fast_writer is not None
        for value in values:
            fast_outcome = _outcome(
                functools.partial(fast.encode_datum, fast_entry, {"x": copy.deepcopy(value)})
            )
            reference_outcome = _outcome(
                functools.partial(reference.encode_datum, reference_entry, {"x": copy.deepcopy(value)})
            )
            assert fast_outcome == reference_outcome, (union, value)


# ---------------------------------------------------------------- writing models without model_dump


def test_model_writers_are_compiled_for_records_with_and_without_json_fields() -> None:
    compiled = {
        name
        for name in FAST.registry.names()
        if FAST._model_writer(FAST.registry.reader(name)) is not None  # type: ignore[arg-type]
    }
    assert f"{NAMESPACE}.DispatchDecision" in compiled
    assert f"{NAMESPACE}.CommittedTurn" in compiled
    assert f"{NAMESPACE}.ManifestIssued" in compiled  # its manifest's policy is a JSON-marked field
    assert f"{NAMESPACE}.DispatchRequested" in compiled  # its policy, its tools' input schemas


class _Plain(BaseModel):
    x: int


class _SerializedField(BaseModel):
    x: int

    @field_serializer("x")
    def doubled(self, value: int) -> int:
        return value * 2


class _SerializedModel(BaseModel):
    x: int

    @model_serializer
    def whole(self) -> dict[str, Any]:
        return {"x": self.x + 1}


class _Computed(BaseModel):
    x: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def y(self) -> int:
        return self.x


class _Extras(BaseModel):
    model_config = ConfigDict(extra="allow")
    x: int


class _Excluded(BaseModel):
    x: int = Field(exclude=True)


class _Aliased(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    w: int = Field(alias="x")


class _SerializationAliased(BaseModel):
    w: int = Field(serialization_alias="x")


def test_a_model_writer_is_compiled_only_where_the_dump_is_the_plain_fields() -> None:
    parsed = entry_for({"type": "record", "name": "One", "fields": [{"name": "x", "type": "long"}]}).parsed
    for model in (_SerializedField, _SerializedModel, _Computed, _Extras, _Excluded):
        assert compile_writer(parsed, {"One": model}) is None, model.__name__
    for instance in (_Plain(x=70), _Aliased(w=70), _SerializationAliased(w=70)):
        writer = compile_writer(parsed, {"One": type(instance)})
        assert writer is not None, type(instance).__name__
        out = bytearray()
        writer(out, instance)
        assert bytes(out) == b"\x8c\x01" and instance.model_dump(by_alias=True) == {"x": 70}


def test_a_record_writer_is_offered_only_for_the_shipped_class_and_a_compiled_writer() -> None:
    class DispatchSent(BaseModel):  # the name of a shipped record, not its class
        conversation_id: str

    assert FAST.record_writer(DispatchSent) is None
    assert REFERENCE.record_writer(events.DispatchSent) is None
    shipped = FAST.record_writer(events.DispatchSent)
    entry = FAST.registry.reader(_name(events.DispatchSent))
    assert shipped is not None and entry is not None and shipped[0] == entry.fingerprint


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_models_encode_exactly_as_their_dump(model: type[BaseModel]) -> None:
    entry = FAST.registry.reader(_name(model))
    assert entry is not None
    writer = FAST._model_writer(entry)

    @settings(max_examples=40)
    @given(model_strategy(model))
    def same(record: BaseModel) -> None:
        expected = REFERENCE.encode(record)
        assert FAST.encode(record) == expected
        if writer is not None:  # the compiled path itself answered
            out = bytearray(entry.header)
            writer(out, record)
            assert bytes(out) == expected

    same()


def _replaced(record: BaseModel, path: tuple[Any, ...], value: Any) -> BaseModel:
    """`record` with the attribute at `path` (names, and indexes into tuples) set to `value`,
    unvalidated (model_copy), so that any value can reach the encoder."""
    head, rest = path[0], path[1:]
    if not rest:
        return record.model_copy(update={head: value})
    inner = getattr(record, head)
    if isinstance(rest[0], int):
        items = list(inner)
        items[rest[0]] = _replaced(items[rest[0]], rest[1:], value)
        return record.model_copy(update={head: tuple(items)})
    return record.model_copy(update={head: _replaced(inner, rest, value)})


def _attribute_paths(record: BaseModel) -> list[tuple[Any, ...]]:
    paths: list[tuple[Any, ...]] = []
    for name in type(record).model_fields:
        paths.append((name,))
        value = getattr(record, name)
        if isinstance(value, BaseModel):
            paths.extend((name, *p) for p in _attribute_paths(value))
        elif isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
            paths.extend((name, 0, *p) for p in _attribute_paths(value[0]))
    return paths


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_models_with_odd_values_encode_or_fail_exactly_as_their_dump(model: type[BaseModel]) -> None:
    """Every attribute (nested ones too) set, unvalidated, to every odd value, to a model of another
    class, to a dict or a list: the same bytes, or the same error, as model_dump + fastavro."""
    strangers: list[Any] = [*ODD_VALUES, DeltaType.TEXT_DELTA, [], ["x"]]

    @settings(max_examples=3)
    @given(model_strategy(model), st.data())
    def same(record: BaseModel, data: st.DataObject) -> None:
        other = data.draw(model_strategy(data.draw(st.sampled_from(RECORD_MODELS))))
        for path in _attribute_paths(record):
            for value in [*strangers, other, other.model_dump(by_alias=True)]:
                changed = _replaced(record, path, value)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fast = _outcome(lambda c=changed: FAST.encode(c))  # type: ignore[misc]
                    reference = _outcome(lambda c=changed: REFERENCE.encode(c))  # type: ignore[misc]
                assert fast == reference, (path, value)

    same()
