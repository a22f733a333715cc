"""Shared pydantic configuration: frozen models, camelCase JSON names as in the spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

_set = object.__setattr__


class FastCopy(BaseModel):
    """`model_copy(update=...)` without pydantic's generic `__copy__` machinery.

    Same result as `BaseModel.model_copy` for these models (no private attributes, no
    extras, shallow copy): a new instance whose `__dict__` is the old one with `update`
    applied, unvalidated, and whose fields-set adds the updated names. Anything else
    (deep copies, models with private or extra attributes) goes through pydantic.

    A frozen model's copy shares the original's fields-set when the update adds no name to it
    (the usual case: every field is set): a frozen model's fields-set is never changed in place
    (pydantic refuses an assignment before it would add to it, and every copy that adds names
    makes a new set), and this saves one GC-tracked object per copy, ~40k per bench run.
    """

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        if deep or not update or self.__pydantic_private__ is not None or self.__pydantic_extra__:
            return super().model_copy(update=update, deep=deep)
        cls = type(self)
        copied = cls.__new__(cls)
        values = self.__dict__.copy()
        values.update(update)
        _set(copied, "__dict__", values)
        _set(copied, "__pydantic_extra__", self.__pydantic_extra__)
        fields_set = self.__pydantic_fields_set__
        if not (update.keys() <= fields_set and self.model_config.get("frozen")):
            fields_set = fields_set | update.keys()
        _set(copied, "__pydantic_fields_set__", fields_set)
        _set(copied, "__pydantic_private__", None)
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
