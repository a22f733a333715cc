"""The codec answers shipped records on its compiled paths, and compiles each once.

The compiled readers and writers fall back to fastavro on any exception, so a compiled path that
broke would still give the right bytes, only slower (issue 20): the other codec tests cannot see
it. Here fastavro is refused while the codec encodes and decodes every shipped record type, and the
compilations are counted."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from fastavro import parse_schema
from hypothesis import given, settings
from pydantic import BaseModel, validator

from tests.strategies import model_strategy
from turnledger.codec import Codec, SchemaRegistry
from turnledger.codec import codec as codec_module
from turnledger.codec.errors import CorruptRecord, NotSingleObjectEncoded, UnencodableRecord
from turnledger.codec.model_reader import compile_model_reader
from turnledger.codec.models import NAMESPACE, RECORD_MODELS
from turnledger.model.events import CancelRequested, DispatchRequested, DispatchSent
from turnledger.model.tools import ToolDefinition

REFERENCE = Codec(SchemaRegistry.from_files(compiled=False))


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("fastavro was asked")


@pytest.mark.parametrize("model", RECORD_MODELS, ids=lambda m: m.__name__)
def test_shipped_records_never_reach_fastavro(
    model: type[BaseModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    codec = Codec(SchemaRegistry.from_files())
    entry = codec.registry.reader(f"{NAMESPACE}.{model.__name__}")
    assert entry is not None

    @settings(max_examples=10)
    @given(model_strategy(model))
    def same(record: BaseModel) -> None:
        expected = REFERENCE.encode(record)
        name, datum = REFERENCE.decode_datum(expected)
        with monkeypatch.context() as patched:
            patched.setattr(codec_module, "schemaless_writer", _refused)
            patched.setattr(codec_module, "schemaless_reader", _refused)
            assert codec.encode(record) == expected
            assert codec.encode_datum(entry, record.model_dump(by_alias=True)) == expected
            assert codec.decode_datum(expected) == (name, datum)
            patched.setattr(codec, "decode_datum", _refused)
            assert codec.decode(expected) == record  # by the compiled model reader alone

    same()


def _count_compiled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the record schemas `compile_writer` is asked to compile from now on, in order."""
    compiled: list[str] = []
    real = codec_module.compile_writer

    def counted(parsed: Any, models: Any) -> Any:
        compiled.append(parsed["name"])
        return real(parsed, models)

    monkeypatch.setattr(codec_module, "compile_writer", counted)
    return compiled


def test_each_model_writer_is_compiled_once_and_again_after_the_registry_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    codec = Codec(SchemaRegistry.from_files())
    compiled = _count_compiled(monkeypatch)
    looked_up: list[type[BaseModel]] = []
    writing = codec._writing

    def counted_writing(model: type[BaseModel]) -> Any:
        looked_up.append(model)
        return writing(model)

    monkeypatch.setattr(codec, "_writing", counted_writing)
    first, second = DispatchSent, CancelRequested
    sent = {"conversation_id": "c", "operation_id": "o", "attempt_generation": 1}
    records = [
        DispatchSent(**sent, event_id="e1", occurred_at_ms=1),
        DispatchSent(**sent, event_id="e2", occurred_at_ms=2),
        CancelRequested(conversation_id="c", event_id="e3", occurred_at_ms=3),
        DispatchSent(**sent, event_id="e4", occurred_at_ms=4),
    ]
    encoded = [codec.encode(record) for record in records]
    assert encoded == [REFERENCE.encode(record) for record in records]
    assert looked_up == [first, second]
    assert compiled == [f"{NAMESPACE}.{first.__name__}", f"{NAMESPACE}.{second.__name__}"]
    current = codec.registry.reader(f"{NAMESPACE}.{first.__name__}")
    assert current is not None
    codec.registry.add(current.schema)  # the same schema as the current reader again: a new generation
    assert codec.encode(records[0]) == encoded[0]
    assert looked_up == [first, second, first]
    assert compiled == [
        f"{NAMESPACE}.{first.__name__}",
        f"{NAMESPACE}.{second.__name__}",
        f"{NAMESPACE}.{first.__name__}",
    ]


def test_a_model_writer_is_kept_while_its_schema_stays_the_current_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another record's schema changing moves the registry's generation: the writing is looked up again,
    and the model writer of the schema that did not change is the one compiled before."""
    codec = Codec(SchemaRegistry.from_files())
    compiled = _count_compiled(monkeypatch)
    record = DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=1, operation_id="o", attempt_generation=1
    )
    first = codec.encode(record)
    other = codec.registry.reader(f"{NAMESPACE}.CancelRequested")
    assert other is not None
    codec.registry.add(other.schema)
    assert codec.encode(record) == first
    assert compiled == [f"{NAMESPACE}.DispatchSent"]


def test_the_codecs_own_refusals_in_their_words() -> None:
    codec = Codec(SchemaRegistry.from_files())
    record = DispatchSent(
        conversation_id="c", event_id="e", occurred_at_ms=1, operation_id="o", attempt_generation=1
    )
    data = codec.encode(record)
    for cut in (data[:10], data[:12], data[:-1]):  # the header alone, then cut bodies
        with pytest.raises(CorruptRecord) as corrupt:
            codec.decode(cut)
        assert str(corrupt.value) == f"{NAMESPACE}.DispatchSent: EOFError: "
    with pytest.raises(CorruptRecord) as trailing:
        codec.decode(data + b"x")
    assert str(trailing.value) == f"{NAMESPACE}.DispatchSent: 1 trailing bytes"

    class DispatchSent2(DispatchSent):
        pass

    DispatchSent2.__name__ = "DispatchSent"  # the name of a shipped record, not its class
    with pytest.raises(UnencodableRecord) as lookalike:
        codec.encode(DispatchSent2(**record.model_dump()))
    assert str(lookalike.value) == "no schema for DispatchSent"
    entry = codec.registry.reader(f"{NAMESPACE}.DispatchSent")
    assert entry is not None
    with pytest.raises(UnencodableRecord) as unencodable:
        codec.encode_datum(entry, {"conversation_id": "c"})
    assert str(unencodable.value).startswith(f"{NAMESPACE}.DispatchSent: ")


def test_the_model_reader_shares_what_validation_would_share() -> None:
    """A DispatchRequested read by the compiled model reader holds the live tool definitions and the
    interned names, as `model_validate` would give it (`model.base.SHARING`)."""
    codec = Codec(SchemaRegistry.from_files())
    tool = ToolDefinition(name="weather", description="d", input_schema={"type": "object"})
    request = DispatchRequested(
        conversation_id="c", event_id="e", occurred_at_ms=1, operation_id="o", adapter="openai-chat@2",
        provider="openai", model_revision="openai/gpt-4o@2024-08", tools=(tool,), max_output_tokens=5,
    )  # fmt: skip
    data = codec.encode(request)
    first, second = codec.decode(data), codec.decode(data)
    assert isinstance(first, DispatchRequested) and isinstance(second, DispatchRequested)
    assert first == request and first.tools[0] is second.tools[0]
    assert first.adapter is second.adapter


class _WithAValidator(BaseModel):
    x: int

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        @validator("x")
        @classmethod
        def _positive(cls, value: int) -> int:
            return value


def test_a_model_with_a_validator_of_its_own_gets_no_model_reader() -> None:
    """Reading it without `model_validate` would skip the validator."""
    schema = {
        "type": "record",
        "name": "_WithAValidator",
        "namespace": NAMESPACE,
        "fields": [{"name": "x", "type": "long"}],
    }
    parsed = parse_schema(schema, named_schemas={})
    assert compile_model_reader(parsed, {f"{NAMESPACE}._WithAValidator": _WithAValidator}) is None


def test_addresses_are_cut_from_details() -> None:
    error = ValueError("bad read from <_io.BytesIO object at 0x7f3a2c1b9e40> at 3")
    assert codec_module._without_addresses(error) == "bad read at 3"
    with pytest.raises(NotSingleObjectEncoded) as refused:
        Codec(SchemaRegistry.from_files()).decode("text")  # type: ignore[arg-type]
    assert str(refused.value) == "expected bytes, got str"
