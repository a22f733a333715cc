"""Shared pydantic configuration: frozen models, camelCase JSON names as in the spec."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Frozen(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The wire/JSON form: spec field names, absent optionals left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
