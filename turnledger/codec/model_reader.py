"""Schema-compiled readers that build the pydantic models directly: `model_validate` skipped only
where it cannot refuse or change anything.

`Codec.decode` reads a record to a datum (dicts and lists) and hands it to `model_validate`. For
a record written with the current reader schema, what that validation checks is already settled
by the schema, field by field, except where this module keeps a check of its own:

- types: each Avro type has exactly one Python type as the compiled reader returns it (string →
  str, long → int, boolean → bool, bytes → bytes, array → list, record → dict), and a field is
  compiled only when its model annotation is that type (or a StrEnum for an Avro enum, a tuple
  or a list for an array, the record's model for a record, `X | None` for a union of null and X), so the
  value is one pydantic passes through unchanged, or converts exactly as done here (list →
  tuple, symbol → enum member);
- enum membership: a symbol of the schema that is not a value of the model's StrEnum is a miss
  (pydantic would refuse it), checked per value;
- required fields and extra="forbid": compiled only when the record's fields are exactly the
  model's (by alias), so every field is present and none is extra;
- JSON-marked fields (`dict[str, Any]`, canonical JSON text on the wire): parsed with the same
  `orjson.loads` as `from_wire`, and a value that is not a JSON object is a miss (pydantic would
  refuse it: nothing in Avro says the text holds an object);
- validators, constraints, post-init hooks, private attributes: a model with any of them (on
  itself or on a nested model) is not compiled, nor is a field with metadata (e.g. max_length).
  The models have none today; `tests/unit/test_codec_model_reader.py` pins that list.

A miss is any exception: the caller then decodes the same bytes the general way (compiled reader
or fastavro, then `model_validate`), so every refusal keeps its exact type and message. The
instance built is the one `model_validate` would build: the same `__dict__` (fields in declaration
order, the same values of the same types), every field in its fields-set, no extras, no private
state. Nothing outside the shipped models' subset is guessed at: `compile_model_reader` returns
None and the general path decodes.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from pydantic import BaseModel

from turnledger.codec.compiled import Unsupported, _ReaderCompiler, compile_record
from turnledger.codec.convert import JSON_ATTRIBUTE
from turnledger.model.base import (
    SET_DICT,
    SET_EXTRA,
    SET_FIELDS,
    SET_PRIVATE,
    SHARING,
    FastCopy,
    shared_fields_set,
)

ModelReader = Callable[[bytes, int], tuple[BaseModel, int]]
"""`reader(data, pos)` -> (model instance, position after it); raises on anything off its path."""

_PYTHON_TYPE_OF: Mapping[str, type] = {
    "string": str,
    "long": int,
    "int": int,
    "boolean": bool,
    "bytes": bytes,
}


# A record's instance is built as `model_validate` leaves it: `object.__new__(model)`, the values
# as its `__dict__`, a fields-set of every field, no extras, no private state (each slot set through
# its descriptor, `model.base.SET_DICT` and the others). The instances of a frozen model share one
# fields-set (one GC-tracked object fewer per record): the one `FastCopy.model_post_init` would give
# it (`shared_fields_set`), which is all that hook does, so a model whose only post-init hook is
# that one is still built directly.


def _check_model(model: type[BaseModel]) -> dict[str, list[Callable[[Any], Any]]]:
    """Unsupported unless validating the model is only its fields' types (nothing of its own) and
    its sharing validators (`model.base.SHARING`: after-validators that swap a value for an equal
    one), which are returned per field for the reader to apply itself."""
    decorators = model.__pydantic_decorators__
    if decorators.validators or decorators.root_validators or decorators.model_validators:
        raise Unsupported(f"{model.__name__} has validators")
    shares: dict[str, list[Callable[[Any], Any]]] = {}
    for decorator in decorators.field_validators.values():
        function = getattr(decorator.func, "__func__", decorator.func)
        if decorator.info.mode != "after" or function not in SHARING:
            raise Unsupported(f"{model.__name__} has validators")
        for name in decorator.info.fields:
            shares.setdefault(name, []).append(decorator.func)
    own_post_init = (
        model.__pydantic_post_init__ is not None and model.model_post_init is not FastCopy.model_post_init
    )
    if own_post_init or model.__private_attributes__:
        raise Unsupported(f"{model.__name__} has a post-init hook or private attributes")
    if model.__pydantic_root_model__ or model.model_config.get("extra") == "allow":
        raise Unsupported(f"{model.__name__} is a root model or allows extras")
    for name, info in model.model_fields.items():
        if info.metadata or not isinstance(info.validation_alias or info.alias or name, str):
            raise Unsupported(f"{model.__name__}.{name} has constraints or an alias path")
    return shares


class _ModelReaderCompiler(_ReaderCompiler):
    def __init__(self, named: dict[str, Any], models: Mapping[str, type[BaseModel]]) -> None:
        super().__init__(named, "_build_")
        self.models = models
        self.constants["_new"] = object.__new__
        self.constants["_set_dict"] = SET_DICT
        self.constants["_set_fields"] = SET_FIELDS
        self.constants["_set_extra"] = SET_EXTRA
        self.constants["_set_private"] = SET_PRIVATE
        self.constants["_loads"] = orjson.loads

    def record_function(self, schema: dict[str, Any]) -> str:
        name = str(schema["name"])
        existing = self.functions.get(name)
        if existing is not None:
            return existing
        model = self.models.get(name)
        if model is None:
            raise Unsupported(f"no model for {name}")
        shares = _check_model(model)
        function = f"{self.prefix}{len(self.functions)}"
        self.functions[name] = function
        by_alias = {
            str(info.validation_alias or info.alias or attribute): attribute
            for attribute, info in model.model_fields.items()
        }
        if sorted(by_alias) != sorted(field["name"] for field in schema["fields"]):
            raise Unsupported(f"{name}: the schema's fields are not the model's")
        lines = [f"def {function}(data, pos):", "    size = len(data)"]
        targets: dict[str, str] = {}
        for field in schema["fields"]:
            attribute = by_alias[field["name"]]
            annotation = model.model_fields[attribute].annotation
            target = self.var("f")
            if field.get(JSON_ATTRIBUTE):
                lines.extend(self.read_json(field["type"], annotation, target, "    "))
            else:
                lines.extend(self.read_as(field["type"], annotation, target, "    "))
            for share in shares.get(attribute, ()):
                lines.append(f"    {target} = {self.constant('SHARE', share)}({target})")
            targets[attribute] = target
        values = ", ".join(f"{attribute!r}: {targets[attribute]}" for attribute in model.model_fields)
        model_name = self.constant("MODEL", model)
        fields = self.constant("FIELDS", shared_fields_set(set(model.model_fields)))
        # a frozen model's fields-set is never changed in place (pydantic's `__setattr__` refuses
        # before it would add to it; every copy makes its own set): its instances share one
        fields_set = fields if model.model_config.get("frozen") else f"{fields}.copy()"
        instance = self.var("instance")
        lines.extend(
            [
                f"    {instance} = _new({model_name})",
                f"    _set_dict({instance}, {{{values}}})",
                f"    _set_fields({instance}, {fields_set})",
                f"    _set_extra({instance}, None)",
                f"    _set_private({instance}, None)",
                f"    return {instance}, pos",
            ]
        )
        self.sources.append("\n".join(lines))
        return function

    def read_json(self, schema: Any, annotation: Any, target: str, ind: str) -> list[str]:
        """A JSON-marked string field read as the JSON object it holds (else a miss)."""
        if self.resolve(schema)[0] != "string" or annotation != dict[str, Any]:
            raise Unsupported(f"JSON-marked field of type {schema!r} as {annotation!r}")
        return [
            *self.read(schema, target, ind),
            f"{ind}{target} = _loads({target})",
            f"{ind}if type({target}) is not dict:",
            f"{ind}    raise Miss('not a JSON object')",
        ]

    def read_as(self, schema: Any, annotation: Any, target: str, ind: str) -> list[str]:
        """Read a value of `schema` as the model annotation types it (Unsupported if they differ)."""
        kind, schema = self.resolve(schema)
        if kind in _PYTHON_TYPE_OF:
            if annotation is not _PYTHON_TYPE_OF[kind]:
                raise Unsupported(f"{kind} as {annotation!r}")
            return self.read(schema, target, ind)
        if kind == "enum":
            return self.read_enum(schema, annotation, target, ind)
        if kind == "record":
            if annotation is not self.models.get(str(schema["name"])):
                raise Unsupported(f"record {schema['name']} as {annotation!r}")
            return [f"{ind}{target}, pos = {self.record_function(schema)}(data, pos)"]
        if kind == "array":
            args = typing.get_args(annotation)
            origin = typing.get_origin(annotation)
            as_tuple = origin is tuple and len(args) == 2 and args[1] is Ellipsis
            if not (as_tuple or (origin is list and len(args) == 1)):
                raise Unsupported(f"array as {annotation!r}")
            item = self.var("item")

            def array_item(inner: str) -> list[str]:
                return [
                    *self.read_as(schema["items"], args[0], item, inner),
                    f"{inner}{target}.append({item})",
                ]

            return [
                f"{ind}{target} = []",
                *self.read_blocks(ind, array_item),
                *([f"{ind}{target} = tuple({target})"] if as_tuple else []),
            ]
        if kind == "union":
            return self.read_optional(list(schema), annotation, target, ind)
        raise Unsupported(f"{kind} in a model")

    def read_enum(self, schema: dict[str, Any], annotation: Any, target: str, ind: str) -> list[str]:
        if annotation is str:
            return self.read(schema, target, ind)
        if not (isinstance(annotation, type) and issubclass(annotation, enum.StrEnum)):
            raise Unsupported(f"enum as {annotation!r}")
        values = {member.value: member for member in annotation}
        # a symbol the StrEnum lacks is None here: a miss (pydantic refuses it)
        members = self.constant("MEMBERS", [values.get(symbol) for symbol in schema["symbols"]])
        return [
            *self.read_long(target, ind),
            f"{ind}if {target} < 0:",
            f"{ind}    raise Miss('enum index')",
            f"{ind}{target} = {members}[{target}]",
            f"{ind}if {target} is None:",
            f"{ind}    raise Miss('not a member of the model enum')",
        ]

    def read_optional(self, branches: list[Any], annotation: Any, target: str, ind: str) -> list[str]:
        """A union of null and one other type, as `X | None`."""
        args = typing.get_args(annotation)
        if typing.get_origin(annotation) not in (types.UnionType, typing.Union) or len(args) != 2:
            raise Unsupported(f"union as {annotation!r}")
        if type(None) not in args:
            raise Unsupported(f"union as {annotation!r}")
        other = args[0] if args[1] is type(None) else args[1]
        kinds = [self.resolve(branch)[0] for branch in branches]
        if len(branches) != 2 or kinds.count("null") != 1:
            raise Unsupported("a union other than null and one type")
        # the branch index is one byte, 0x00 or 0x02 (zig-zag 0 and 1); any other encoding of it is a
        # miss (the general path reads what fastavro reads)
        index = self.var("index")
        lines = [f"{ind}{index} = data[pos]"]
        for i, branch in enumerate(branches):
            lines.extend([f"{ind}{'if' if i == 0 else 'elif'} {index} == {i << 1}:", f"{ind}    pos += 1"])
            if kinds[i] == "null":
                lines.append(f"{ind}    {target} = None")
            else:
                lines.extend(self.read_as(branch, other, target, ind + "    "))
        lines.extend([f"{ind}else:", f"{ind}    raise Miss('union index')"])
        return lines


def compile_model_reader(parsed: Any, models: Mapping[str, type[BaseModel]]) -> ModelReader | None:
    """A reader of a parsed record schema that returns its model instance, or None (module docstring)."""
    reader: ModelReader | None = compile_record(
        _ModelReaderCompiler(dict(parsed.get("__named_schemas", {})), models), parsed
    )
    return reader
