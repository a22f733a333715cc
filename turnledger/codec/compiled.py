"""Schema-compiled Avro binary readers and writers: the codec's fast path, fastavro its reference.

fastavro's `schemaless_reader` / `schemaless_writer` interpret the parsed schema for every
datum: one `read(1)` call on a file object per varint byte, a type dispatch on the schema
per field, and (when writing) a full validation of the datum against each union branch.
Here a parsed schema is compiled once into plain Python source (one function per named
record, every field inlined), which reads from / appends to a bytes buffer directly.

The fast path is deliberately narrow. It answers only for canonical data and exactly-typed
values, where its result is by construction the one fastavro gives, and raises (any
exception) otherwise: the caller then runs fastavro on the same input, so every error, every
non-canonical encoding and every unusual Python type gets fastavro's own answer, byte for
byte and message for message. Concretely, the reader gives up on: a varint above 64 bits, a
negative length or block count, a union branch index or enum index out of range, a boolean
byte other than 0/1, reading past the end. The writer gives up on: a value of another type
than str / int (not bool) / bool / bytes / dict / list / tuple as the schema asks, an int out
of the long range (int32 for "int"), a union value that is a tuple (fastavro's tuple
notation), a record value that is not a dict or has a "-type" key, a missing record field,
an enum value that is not one of the symbols. Schemas with float, double, fixed or logical
types are not compiled at all (`compile_reader` / `compile_writer` return None), nor, for
writing, schemas with a union other than null plus at most one other branch (fastavro picks a
branch by validating the value against each): those always go through fastavro.

The property tests (tests/unit/test_codec_compiled.py) compare both paths on generated
records of every schema, and on truncated and corrupted bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import BaseModel

from turnledger.codec.convert import JSON_ATTRIBUTE, to_json_text
from turnledger.errors import TurnledgerError
from turnledger.model.self_encoded import SelfEncoded

Reader = Callable[[bytes, int], tuple[Any, int]]
"""`reader(data, pos)` -> (datum, position after it)."""

Writer = Callable[[bytearray, Any], None]
"""`writer(out, datum)` appends the datum's Avro binary encoding to `out` (a model: `compile_writer`)."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "bytes", "string"})
_UNSUPPORTED = frozenset({"float", "double", "fixed", "error", "error_union", "request"})
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
_INT_MIN = -(1 << 31)
_INT_MAX = (1 << 31) - 1


class Unsupported(TurnledgerError):
    """The schema uses something the compiled codec does not handle: fastavro handles it."""


class Miss(TurnledgerError):
    """The datum or the bytes are outside the fast path: the caller falls back to fastavro."""


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (the multi-byte case), exactly as fastavro's `read_long` reads it."""
    n = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise Miss("varint longer than 10 bytes")
    if n >> 64:
        raise Miss("varint above 64 bits")
    return (n >> 1) ^ -(n & 1), pos


_VARINTS: dict[int, bytes] = {}
_VARINTS_MAX = 4096


def long_bytes(value: int) -> bytes:
    """Avro's encoding of a long (within 64 bits): zig-zag, then 7 bits a byte, low bits first, as
    fastavro's `write_int` writes it. Values repeat (times, revisions, lengths), so their encodings are
    memoized; the changelog's values and a manifest's block list build their lengths with it too."""
    encoded = _VARINTS.get(value)
    if encoded is None:
        n = (value << 1) ^ (value >> 63)
        buffer = bytearray()
        while n > 0x7F:
            buffer.append((n & 0x7F) | 0x80)
            n >>= 7
        buffer.append(n)
        encoded = bytes(buffer)
        if len(_VARINTS) >= _VARINTS_MAX:
            _VARINTS.clear()
        _VARINTS[value] = encoded
    return encoded


def _write_long(out: bytearray, value: Any, low: int = _LONG_MIN, high: int = _LONG_MAX) -> None:
    """A zig-zag varint of a long in range (`long_bytes`; the case of a value outside 0..63)."""
    if type(value) is not int or value < low or value > high:
        raise Miss("not a long in range")
    encoded = _VARINTS.get(value)
    out += long_bytes(value) if encoded is None else encoded


_RUNTIME: dict[str, Any] = {
    "Miss": Miss,
    "_read_long": _read_long,
    "_write_long": _write_long,
    "_LONG_MIN": _LONG_MIN,
    "_LONG_MAX": _LONG_MAX,
    "_INT_MIN": _INT_MIN,
    "_INT_MAX": _INT_MAX,
}


def _schema_type(schema: Any) -> Any:
    """The type of a schema node: a name (primitive or named reference), "union", or a complex type."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    if not isinstance(schema, dict):
        raise Unsupported(f"schema node {schema!r}")
    if "logicalType" in schema:
        raise Unsupported("logical types")
    kind = schema.get("type")
    if not isinstance(kind, str):
        raise Unsupported(f"nested type {kind!r}")
    return kind


class _Compiler:
    """Collects the generated functions of one top-level schema and their constants."""

    def __init__(self, named: dict[str, Any], prefix: str) -> None:
        self.named = named
        self.prefix = prefix
        self.functions: dict[str, str] = {}  # record full name -> function name
        self.sources: list[str] = []
        self.constants: dict[str, Any] = {}
        self.counter = 0

    def var(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def constant(self, stem: str, value: Any) -> str:
        name = self.var(f"_{stem}")
        self.constants[name] = value
        return name

    def resolve(self, schema: Any) -> tuple[Any, Any]:
        """(kind, schema) with named references replaced by the definition they name."""
        kind = _schema_type(schema)
        if kind in _UNSUPPORTED:
            raise Unsupported(kind)
        if kind in _PRIMITIVES or kind in ("union", "record", "enum", "array", "map"):
            return kind, schema
        definition = self.named.get(kind)
        if definition is None:
            raise Unsupported(f"unknown type {kind!r}")
        return self.resolve(definition)

    def build(self) -> dict[str, Any]:
        namespace = {**_RUNTIME, **self.constants}
        exec("\n\n".join(self.sources), namespace)  # source generated from the schema above
        return namespace


def _union_branches(compiler: _Compiler, schema: list[Any]) -> tuple[int | None, int | None, Any]:
    """(index of null, index of the other branch, that branch): null plus at most one other type."""
    null_index: int | None = None
    other_index: int | None = None
    other: Any = None
    for index, branch in enumerate(schema):
        kind, _ = compiler.resolve(branch)
        if kind == "null":
            if null_index is not None:
                raise Unsupported("union with two nulls")
            null_index = index
        else:
            if other_index is not None:
                raise Unsupported("union with several non-null branches")
            if kind == "union":
                raise Unsupported("nested union")
            other_index, other = index, branch
    return null_index, other_index, other


# ---------------------------------------------------------------- reading


class _ReaderCompiler(_Compiler):
    def record_function(self, schema: dict[str, Any]) -> str:
        name = str(schema["name"])
        existing = self.functions.get(name)
        if existing is not None:
            return existing
        function = f"{self.prefix}{len(self.functions)}"
        self.functions[name] = function
        lines = [f"def {function}(data, pos):", "    size = len(data)"]
        values = []
        for field in schema["fields"]:
            target = self.var("f")
            lines.extend(self.read(field["type"], target, "    "))
            values.append(f"{field['name']!r}: {target}")
        lines.append(f"    return {{{', '.join(values)}}}, pos")
        self.sources.append("\n".join(lines))
        return function

    def read_long(self, target: str, ind: str) -> list[str]:
        return [
            f"{ind}{target} = data[pos]",
            f"{ind}if {target} < 128:",
            f"{ind}    pos += 1",
            f"{ind}    {target} = ({target} >> 1) ^ -({target} & 1)",
            f"{ind}else:",
            f"{ind}    {target}, pos = _read_long(data, pos)",
        ]

    def read_bytes(self, target: str, ind: str, decode: bool) -> list[str]:
        end = self.var("end")
        return [
            *self.read_long(end, ind),
            f"{ind}if {end} < 0:",
            f"{ind}    raise Miss('negative length')",
            f"{ind}{end} += pos",
            f"{ind}if {end} > size:",
            f"{ind}    raise Miss('past the end')",
            f"{ind}{target} = data[pos:{end}]{'.decode()' if decode else ''}",
            f"{ind}pos = {end}",
        ]

    def read_blocks(self, ind: str, item: Callable[[str], list[str]]) -> list[str]:
        count = self.var("count")
        loop = self.var("_")
        return [
            *self.read_long(count, ind),
            f"{ind}while {count}:",
            f"{ind}    if {count} < 0:",
            f"{ind}        raise Miss('block with a byte size')",
            f"{ind}    for {loop} in range({count}):",
            *item(ind + "        "),
            *self.read_long(count, ind + "    "),
        ]

    def read(self, schema: Any, target: str, ind: str) -> list[str]:
        kind, schema = self.resolve(schema)
        if kind == "null":
            return [f"{ind}{target} = None"]
        if kind == "boolean":
            flags = self.constant("BOOLEANS", {0: False, 1: True})
            return [f"{ind}{target} = {flags}[data[pos]]", f"{ind}pos += 1"]
        if kind in ("int", "long"):
            return self.read_long(target, ind)
        if kind in ("string", "bytes"):
            return self.read_bytes(target, ind, decode=kind == "string")
        if kind == "enum":
            symbols = list(schema["symbols"])
            table = self.constant("SYMBOLS", symbols)
            return [
                *self.read_long(target, ind),
                f"{ind}if {target} < 0 or {target} >= {len(symbols)}:",
                f"{ind}    raise Miss('enum index')",
                f"{ind}{target} = {table}[{target}]",
            ]
        if kind == "record":
            return [f"{ind}{target}, pos = {self.record_function(schema)}(data, pos)"]
        if kind == "array":
            item = self.var("item")

            def array_item(inner: str) -> list[str]:
                return [*self.read(schema["items"], item, inner), f"{inner}{target}.append({item})"]

            return [f"{ind}{target} = []", *self.read_blocks(ind, array_item)]
        if kind == "map":
            key, value = self.var("key"), self.var("value")

            def map_item(inner: str) -> list[str]:
                return [
                    *self.read_bytes(key, inner, decode=True),
                    *self.read(schema["values"], value, inner),
                    f"{inner}{target}[{key}] = {value}",
                ]

            return [f"{ind}{target} = {{}}", *self.read_blocks(ind, map_item)]
        assert kind == "union"
        branches = list(schema)
        index = self.var("index")
        lines = self.read_long(index, ind)
        for i, branch in enumerate(branches):
            lines.append(f"{ind}{'if' if i == 0 else 'elif'} {index} == {i}:")
            lines.extend(self.read(branch, target, ind + "    "))
        lines.extend([f"{ind}else:", f"{ind}    raise Miss('union index')"])
        return lines


def compile_reader(parsed: Any) -> Reader | None:
    """A fast reader of a parsed record schema (fastavro `parse_schema` output), or None."""
    reader: Reader | None = compile_record(
        _ReaderCompiler(dict(parsed.get("__named_schemas", {})), "_read_"), parsed
    )
    return reader


def compile_record(compiler: _ReaderCompiler, parsed: Any) -> Any:
    """`compiler`'s function for the top record of `parsed`, or None when it is not a record or the
    compiler does not support something in it."""
    try:
        kind, schema = compiler.resolve(parsed)
        if kind != "record":
            return None
        top = compiler.record_function(schema)
        namespace = compiler.build()
    except Unsupported:
        return None
    return namespace[top]


# ---------------------------------------------------------------- writing


class _WriterCompiler(_Compiler):
    def __init__(
        self, named: dict[str, Any], prefix: str, models: Mapping[str, type[BaseModel]] | None
    ) -> None:
        super().__init__(named, prefix)
        self.models = models

    def record_function(self, schema: dict[str, Any]) -> str:
        name = str(schema["name"])
        existing = self.functions.get(name)
        if existing is not None:
            return existing
        function = f"{self.prefix}{len(self.functions)}"
        self.functions[name] = function
        if self.models is None:
            lines = [
                f"def {function}(out, datum):",
                "    if type(datum) is not dict or '-type' in datum:",
                "        raise Miss('record value')",
            ]
            keys = {field["name"]: field["name"] for field in schema["fields"]}
        else:
            model = self.models.get(name)
            if model is None:
                raise Unsupported(f"no model for {name}")
            keys = _dumped_attributes(model)
            lines = [
                f"def {function}(out, model):",
                f"    if type(model) is not {self.constant('MODEL', model)}:",
                "        raise Miss('model class')",
                "    datum = model.__dict__",
            ]
        for field in schema["fields"]:
            key = keys.get(field["name"])
            if key is None:
                raise Unsupported(f"{name}.{field['name']} is not a field of the model")
            value = self.var("v")
            lines.append(f"    {value} = datum[{key!r}]")
            if self.models is not None and field.get(JSON_ATTRIBUTE):
                # what `to_wire` makes of the dumped value: its canonical JSON text (a value whose
                # text could differ from its dump's, e.g. a model inside, makes orjson raise: a miss)
                lines.append(f"    {value} = {self.constant('JSON_TEXT', to_json_text)}({value})")
            lines.extend(self.write(field["type"], value, "    "))
        self.sources.append("\n".join(lines))
        return function

    def self_encoded(self, items: Any, value: str, ind: str) -> list[str]:
        """For an array of model records, the case of a `SelfEncoded` value encoded under this very
        item schema: its `avro` is written as it is (one of another schema misses: fastavro then
        writes its items)."""
        kind, schema = self.resolve(items)
        if self.models is None or kind != "record":
            return []
        items_fingerprint = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
        listed = self.constant("SELF_ENCODED", SelfEncoded)
        expected = self.constant("ITEMS_FINGERPRINT", items_fingerprint)
        return [
            f"{ind}elif type({value}) is {listed} and {value}.avro_fingerprint == {expected}:",
            f"{ind}    out += {value}.avro",
        ]

    def write_long(self, value: str, ind: str, kind: str = "long") -> list[str]:
        bounds = ", _INT_MIN, _INT_MAX" if kind == "int" else ""
        return [
            f"{ind}if type({value}) is int and 0 <= {value} < 64:",
            f"{ind}    out.append({value} << 1)",
            f"{ind}else:",
            f"{ind}    _write_long(out, {value}{bounds})",
        ]

    def write_length(self, length: str, ind: str) -> list[str]:
        """A length or position: a non-negative int, far below the long range."""
        return [
            f"{ind}if {length} < 64:",
            f"{ind}    out.append({length} << 1)",
            f"{ind}else:",
            f"{ind}    _write_long(out, {length})",
        ]

    def write_string(self, value: str, ind: str) -> list[str]:
        encoded, length = self.var("encoded"), self.var("length")
        return [
            f"{ind}if not isinstance({value}, str):",
            f"{ind}    raise Miss('not a string')",
            f"{ind}{encoded} = {value}.encode()",
            f"{ind}{length} = len({encoded})",
            *self.write_length(length, ind),
            f"{ind}out += {encoded}",
        ]

    def write(self, schema: Any, value: str, ind: str) -> list[str]:
        kind, schema = self.resolve(schema)
        if kind == "null":
            return [f"{ind}if {value} is not None:", f"{ind}    raise Miss('not null')"]
        if kind == "boolean":
            return [
                f"{ind}if {value} is True:",
                f"{ind}    out.append(1)",
                f"{ind}elif {value} is False:",
                f"{ind}    out.append(0)",
                f"{ind}else:",
                f"{ind}    raise Miss('not a boolean')",
            ]
        if kind in ("int", "long"):
            return self.write_long(value, ind, kind)
        if kind == "string":
            return self.write_string(value, ind)
        if kind == "bytes":
            return [
                f"{ind}if type({value}) is not bytes:",
                f"{ind}    raise Miss('not bytes')",
                *self.write_length(f"len({value})", ind),
                f"{ind}out += {value}",
            ]
        if kind == "enum":
            positions: dict[str, int] = {}
            for index, symbol in enumerate(schema["symbols"]):
                positions.setdefault(symbol, index)
            table = self.constant("POSITIONS", positions)
            position = self.var("position")
            # list.index(value) compares with ==: for str and str-enum values (str's __eq__ and
            # __hash__), a dict lookup by the value finds the same first position.
            return [
                f"{ind}{position} = {table}.get({value}) if isinstance({value}, str) else None",
                f"{ind}if {position} is None:",
                f"{ind}    raise Miss('not a symbol')",
                *self.write_length(position, ind),
            ]
        if kind == "record":
            return [f"{ind}{self.record_function(schema)}(out, {value})"]
        if kind == "array":
            item = self.var("item")
            items = [
                f"{ind}    if {value}:",
                *self.write_length(f"len({value})", ind + "        "),
                f"{ind}        for {item} in {value}:",
                *self.write(schema["items"], item, ind + "            "),
                f"{ind}    out.append(0)",
            ]
            return [
                f"{ind}if type({value}) is list or type({value}) is tuple:",
                *items,
                *self.self_encoded(schema["items"], value, ind),
                f"{ind}else:",
                f"{ind}    raise Miss('not an array')",
            ]
        if kind == "map":
            if self.models is not None:
                raise Unsupported("maps in a model (model_dump copies and converts their values)")
            key, item = self.var("key"), self.var("item")
            return [
                f"{ind}if type({value}) is not dict:",
                f"{ind}    raise Miss('not a map')",
                f"{ind}if {value}:",
                *self.write_length(f"len({value})", ind + "    "),
                f"{ind}    for {key}, {item} in {value}.items():",
                *self.write_string(key, ind + "        "),
                *self.write(schema["values"], item, ind + "        "),
                f"{ind}out.append(0)",
            ]
        assert kind == "union"
        null_index, other_index, other = _union_branches(self, list(schema))
        lines = [f"{ind}if {value} is None:"]
        if null_index is None:
            lines.append(f"{ind}    raise Miss('null outside the union')")
        else:
            lines.append(f"{ind}    out.append({null_index << 1})")
        lines.append(f"{ind}else:")
        if other_index is None:
            lines.append(f"{ind}    raise Miss('no branch')")
            return lines
        if self.resolve(other)[0] == "array":
            # fastavro reads a tuple as (branch name, value); every other branch refuses tuples itself
            lines.append(f"{ind}    if isinstance({value}, tuple):")
            lines.append(f"{ind}        raise Miss('tuple notation')")
        lines.extend([f"{ind}    out.append({other_index << 1})", *self.write(other, value, ind + "    ")])
        return lines


def compile_writer(parsed: Any, models: Mapping[str, type[BaseModel]] | None = None) -> Writer | None:
    """A fast writer of a parsed record schema (fastavro `parse_schema` output), or None.

    With `models` (record full name -> model class), the writer takes the model instance
    itself instead of `model.model_dump(by_alias=True)`: it reads each field off the model's
    `__dict__` (nested models likewise) and writes what the dump would have held. Only for
    models whose dump is their fields as they are: no serializers, computed or excluded
    fields, extras or maps, and each record's value must be exactly its model's class.
    """
    try:
        compiler = _WriterCompiler(dict(parsed.get("__named_schemas", {})), "_write_", models)
        kind, schema = compiler.resolve(parsed)
        if kind != "record":
            return None
        top = compiler.record_function(schema)
        namespace = compiler.build()
    except Unsupported:
        return None
    writer: Writer = namespace[top]
    return writer


def _dumped_attributes(model: type[BaseModel]) -> dict[str, str]:
    """Key in `model_dump(by_alias=True)` -> attribute, for a model whose dump is its plain fields."""
    decorators = model.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or model.__pydantic_computed_fields__:
        raise Unsupported(f"{model.__name__} customizes its serialization")
    if model.model_config.get("extra") == "allow" or model.__pydantic_root_model__:
        raise Unsupported(f"{model.__name__} has extras or is a root model")
    keys: dict[str, str] = {}
    for attribute, info in model.model_fields.items():
        if info.exclude:
            raise Unsupported(f"{model.__name__}.{attribute} is excluded from dumps")
        keys[info.serialization_alias or info.alias or attribute] = attribute
    return keys
