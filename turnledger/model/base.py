"""Shared pydantic configuration: frozen models, camelCase JSON names as in the spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

_new = object.__new__
SET_DICT = BaseModel.__dict__["__dict__"].__set__
SET_FIELDS = BaseModel.__dict__["__pydantic_fields_set__"].__set__
SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__
"""The slots of a model instance, set through their descriptors: what `object.__setattr__` ends up
calling, without looking the name up on the class each time (`FastCopy.model_copy`, ~37k copies a
bench run)."""
K = TypeVar("K")
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])

_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
MAX_FIELDS_SETS = 4096
"""Distinct fields-sets shared (`shared_fields_set`); past this many a new one is left unshared."""


_EVERY_FIELD: dict[type[BaseModel], set[str]] = {}
"""Per model class, the shared set of all its field names (a fields-set is a subset of them)."""


def _kept(table: dict[K, V], key: K, value: V, bound: int) -> V:
    """The value kept in `table` under `key`, keeping `value` there first if there is none yet and
    the table holds fewer than `bound`."""
    kept = table.get(key)
    if kept is not None:
        return kept
    if len(table) < bound:
        table[key] = value
    return value


def shared_fields_set(fields: set[str]) -> set[str]:
    """The one `set` object kept for this set of names (`fields` itself when none is kept yet).

    pydantic gives every instance its own `__pydantic_fields_set__` (216 to 2,264 bytes), though a
    model class has only a handful of distinct ones: a block, a graph and a request each paid ~730
    bytes for theirs, ~3.5 KB of every cached conversation (issue 20). These models are frozen, so
    nothing adds to an instance's set in place (pydantic's own copies copy it first, `model_copy`
    here builds a new one); sharing it changes nothing but the memory. Bounded, so that models
    built with arbitrary subsets of their fields cannot grow the table without end.
    """
    return _kept(_FIELDS_SETS, frozenset(fields), fields, MAX_FIELDS_SETS)


_NAMES: dict[str, str] = {}
MAX_NAMES = 4096
"""Distinct names shared (`shared_name`); past this many a new one is left unshared."""


SHARING: set[Callable[..., Any]] = set()
"""Validators that only swap a value for an equal, shared one (memory only): they can refuse and
change nothing, so a reader that builds models without validation applies them itself
(`codec/model_reader.py`) instead of falling back to `model_validate`."""


def sharing(validator: F) -> F:
    """Register `validator` in `SHARING`; returns it unchanged."""
    SHARING.add(validator)
    return validator


@sharing
def shared_name(value: str) -> str:
    """The one kept `str` equal to `value`: for fields that take a few distinct values over and
    over (a block's role, kind, trust label and status, a request's adapter, provider and model),
    which decoding gives a string of its own per record, ~55 bytes each per cached block or
    request (issue 20). Bounded, so that arbitrary values cannot grow the table without end."""
    return _kept(_NAMES, value, value, MAX_NAMES)


def every_field(cls: type[BaseModel]) -> set[str]:
    """The shared set of all the field names of `cls` (`_EVERY_FIELD`)."""
    every = _EVERY_FIELD.get(cls)
    if every is None:
        every = _EVERY_FIELD[cls] = shared_fields_set(set(cls.model_fields))
    return every


class FastCopy(BaseModel):
    """`model_copy(update=...)` without pydantic's generic `__copy__` machinery.

    Same result as `BaseModel.model_copy` for these models (no private attributes, extra
    attributes refused or ignored, shallow copy): a new instance whose `__dict__` is the old one
    with `update` applied, unvalidated, and whose fields-set adds the updated names (a shared set,
    `shared_fields_set`). Anything else (deep copies, models with private attributes or that allow
    extra ones, whose extras are a dict even when empty) goes through pydantic.

    A frozen model's copy shares the original's fields-set when the update adds no name to it
    (the usual case: every field is set): a frozen model's fields-set is never changed in place
    (pydantic refuses an assignment before it would add to it, and every copy that adds names
    makes a new set), and this saves one GC-tracked object per copy, ~40k per bench run.
    """

    def model_post_init(self, context: Any, /) -> None:
        """After validation: the instance's fields-set is the shared one (`shared_fields_set`); a
        record decoded or read back sets every field, so that one is found without hashing."""
        fields = self.__pydantic_fields_set__
        every = every_field(type(self))
        SET_FIELDS(self, every if len(fields) == len(every) else shared_fields_set(fields))

    @classmethod
    def of_validated(cls, values: dict[str, Any]) -> Self:
        """`cls(**values)` without validating again: for `values` that are every field of `cls`, in
        declaration order, each taken from a field of a validated model with the same annotation
        (so validation could neither refuse nor change one). The instance is the one `cls(**values)`
        builds: that `__dict__`, the shared fields-set of every field, no extras, no private state."""
        instance = _new(cls)
        SET_DICT(instance, values)
        SET_FIELDS(instance, every_field(cls))
        SET_EXTRA(instance, None)
        SET_PRIVATE(instance, None)
        return instance

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        if deep or not update or self.__pydantic_private__ is not None or self.__pydantic_extra__ is not None:
            return super().model_copy(update=update, deep=deep)
        copied = _new(type(self))
        values = self.__dict__.copy()
        values.update(update)
        SET_DICT(copied, values)
        SET_EXTRA(copied, None)
        fields = self.__pydantic_fields_set__
        if not update.keys() <= fields:  # else the copy shares the original's set
            fields = shared_fields_set(fields | update.keys())
        SET_FIELDS(copied, fields)
        SET_PRIVATE(copied, None)
        return copied


class Frozen(FastCopy):
    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The wire/JSON form: spec field names, absent optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
