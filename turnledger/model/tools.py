"""Tool definitions and the toolset offered to the model."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from turnledger.model.base import Frozen
from turnledger.model.canonical import digest_of


class ToolDefinition(Frozen):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @property
    def schema_digest(self) -> str:
        return digest_of(self.input_schema)


class Toolset(Frozen):
    tools: tuple[ToolDefinition, ...] = ()

    @property
    def digest(self) -> str:
        return digest_of([t.to_json_dict() for t in self.tools])

    def get(self, name: str) -> ToolDefinition | None:
        return next((t for t in self.tools if t.name == name), None)
