"""Tool definitions and the toolset offered to the model."""

from __future__ import annotations

import weakref
from typing import Any

from pydantic import Field

from turnledger.model.base import Frozen, sharing
from turnledger.model.canonical import digest_of


class ToolDefinition(Frozen):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @property
    def schema_digest(self) -> str:
        return digest_of(self.input_schema)


_LIVE: weakref.WeakValueDictionary[bytes, ToolDefinition] = weakref.WeakValueDictionary()


@sharing
def shared_tools(tools: tuple[ToolDefinition, ...]) -> tuple[ToolDefinition, ...]:
    """`tools` with each definition replaced by the live one of the same JSON, if any.

    Every DispatchRequested carries its tool definitions, and an operation keeps them in its
    conversation's cached state until it is final (`dispatch/state.py` `settled_request`): ~1.8 KB
    per definition (its schema is nested dicts), the same few definitions over and over across
    conversations (issue 20). Definitions are frozen and equal JSON means equal fields, so one
    object serves them all; the table holds them weakly, so a definition no live request names is
    not kept.
    """
    if not tools:
        return tools
    return tuple(_LIVE.setdefault(tool.__pydantic_serializer__.to_json(tool), tool) for tool in tools)


_TOOLSET_DIGESTS: dict[tuple[int, ...], tuple[tuple[ToolDefinition, ...], str]] = {}
MAX_TOOLSET_DIGESTS = 256
"""Toolsets whose digest is kept (`toolset_digest`); past this many the table starts over."""


def toolset_digest(tools: tuple[ToolDefinition, ...]) -> str:
    """The digest of the toolset's JSON (`digest_of` of each definition's `to_json_dict()`), kept per
    sequence of definition objects: a request's definitions are the shared live ones
    (`shared_tools`), so every dispatch of a toolset asks about the same objects, and dumping them
    was ~1% of the engine's CPU (issue 20). An entry holds its definitions, so the ids in its key
    are theirs for as long as it is kept: a key found is those very objects (frozen: the same JSON)."""
    key = tuple(map(id, tools))
    kept = _TOOLSET_DIGESTS.get(key)
    if kept is not None:
        return kept[1]
    digest = digest_of([t.to_json_dict() for t in tools])
    if len(_TOOLSET_DIGESTS) >= MAX_TOOLSET_DIGESTS:
        _TOOLSET_DIGESTS.clear()
    _TOOLSET_DIGESTS[key] = (tools, digest)
    return digest


class Toolset(Frozen):
    tools: tuple[ToolDefinition, ...] = ()

    @property
    def digest(self) -> str:
        return toolset_digest(self.tools)

    def get(self, name: str) -> ToolDefinition | None:
        return next((t for t in self.tools if t.name == name), None)
