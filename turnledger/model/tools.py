"""Tool definitions and the toolset offered to the model."""

from __future__ import annotations

import weakref
from typing import Any

from pydantic import Field, TypeAdapter

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


_TOOL_LIST = TypeAdapter(tuple[ToolDefinition, ...])
_TOOLSET_JSON: dict[tuple[int, ...], tuple[tuple[ToolDefinition, ...], bytes]] = {}


def toolset_json(tools: tuple[ToolDefinition, ...]) -> bytes:
    """The JSON array of the definitions, as a request's JSON holds its `tools`, kept per sequence of
    definition objects as `toolset_digest` keeps its digest (and for the same reason: the changelog
    cuts it out of every request that names it, `dispatch/state_json.py` `request_part`)."""
    key = tuple(map(id, tools))
    kept = _TOOLSET_JSON.get(key)
    if kept is not None:
        return kept[1]
    json = _TOOL_LIST.dump_json(tools)
    if len(_TOOLSET_JSON) >= MAX_TOOLSET_DIGESTS:
        _TOOLSET_JSON.clear()
    _TOOLSET_JSON[key] = (tools, json)
    return json


_TOOLSETS_READ: dict[str, tuple[bytes, tuple[ToolDefinition, ...]]] = {}
MAX_TOOLSETS_READ = 256
"""Toolsets kept parsed by `toolset_of_json`; past this many the table starts over."""


def toolset_of_json(key: str, json: bytes) -> tuple[ToolDefinition, ...]:
    """The definitions of a toolset's JSON array, the shared live ones (`shared_tools`), as validating
    a request with that array would give them, parsed once per distinct JSON: the conversations of a
    partition read back the same agent toolset again and again (`dispatch/state_layout.py`). `key`
    names the JSON (its digest); an entry is used only for the very same bytes, so a key that names
    other JSON costs a parse, never a wrong answer. Raises pydantic's ValidationError (a ValueError)."""
    kept = _TOOLSETS_READ.get(key)
    if kept is not None and kept[0] == json:
        return kept[1]
    tools = shared_tools(_TOOL_LIST.validate_json(json))
    if len(_TOOLSETS_READ) >= MAX_TOOLSETS_READ:
        _TOOLSETS_READ.clear()
    _TOOLSETS_READ[key] = (json, tools)
    return tools


class Toolset(Frozen):
    tools: tuple[ToolDefinition, ...] = ()

    @property
    def digest(self) -> str:
        return toolset_digest(self.tools)

    def get(self, name: str) -> ToolDefinition | None:
        return next((t for t in self.tools if t.name == name), None)
