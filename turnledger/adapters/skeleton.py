"""The build skeleton every adapter runs; an API brings its rules table, its part renderers and
three hooks.

`build` says once what every request is made of:

1. the blocks, each call's results placed right after the assistant run that emitted
   it, cut into runs of one graph role;
2. the runs folded into the API's turns (`turns`: the API's role rules), each block
   rendered by the renderer its rules table names for the block's kind (`render_block`),
   with the scoped-input notice when the graph has scoped input;
3. the offered tools as the API defines them (`tool_definition`), or, where the layout
   says so, the tools the history uses;
4. all of it laid out in the body (`body_layout`), policy keys picked by the rules table.

`render` pauses on a kind the rules table has no renderer for, else returns the
canonical bytes of `build` and their digest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from turnledger.adapters._common import (
    Run,
    call_tool_names,
    has_scoped,
    has_tool_blocks,
    place_results,
    role_runs,
)
from turnledger.adapters.base import (
    DispatchParams,
    JsonObject,
    Rendered,
    RenderOutcome,
    RulesTable,
    UnsupportedKind,
    first_unsupported,
)
from turnledger.adapters.layout import BodyLayout, request_body
from turnledger.adapters.turns import RenderedTurns
from turnledger.model.canonical import digest_of
from turnledger.model.graph import Block, MessageSequence

R = TypeVar("R", bound=RulesTable)

PartRenderer = Callable[[Block, R], JsonObject | None]


class AdapterBase(ABC, Generic[R]):
    """Identity, digest, `build` and `render`. Holds no role rules: those are each API's table."""

    api: str
    version: int
    provider: str
    part_renderers: Mapping[str, PartRenderer[R]]  # renderer name (a rules-table value) → function

    def __init__(self, version: int, rules: R) -> None:
        self.version = version
        self.rules = rules
        self.layout = self.body_layout(rules)
        self.adapter_id = f"{self.api}@{self.version}"
        self._digest = digest_of({"api": self.api, "version": self.version, "rules": rules.as_data()})

    @property
    def digest(self) -> str:
        return self._digest

    @abstractmethod
    def body_layout(self, rules: R) -> BodyLayout:
        """Field names of this API's body (some, like the budget field, read from the rules)."""

    @abstractmethod
    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns | UnsupportedKind:
        """The API's role rules: the runs as its turns (and system parts), `notice` first if given."""

    @abstractmethod
    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        """One offered tool as the API declares it."""

    def render_block(self, block: Block) -> JsonObject | None:
        """The block as an API part, by the renderer its rules table names; None: the API omits it."""
        return self.part_renderers[self.rules.renderers[block.kind]](block, self.rules)

    def build(self, sequence: MessageSequence, params: DispatchParams) -> JsonObject | UnsupportedKind:
        """The request payload as JSON-compatible data (pure)."""
        blocks = sequence.blocks
        notice = self.rules.scoped_notice
        rendered = self.turns(
            role_runs(place_results(blocks)), notice if notice and has_scoped(blocks) else None
        )
        if isinstance(rendered, UnsupportedKind):
            return rendered
        tools = [self.tool_definition(t.name, t.description, t.input_schema) for t in params.tools]
        if not tools and self.layout.stub_tools and has_tool_blocks(blocks):
            tools = [self.tool_definition(name, "", {"type": "object"}) for name in call_tool_names(blocks)]
        return request_body(self.layout, params, rendered, tools, self.rules.policy_fields)

    def render(self, sequence: MessageSequence, params: DispatchParams) -> RenderOutcome:
        unsupported = first_unsupported(sequence.blocks, self.rules.renderers)
        if unsupported is not None:
            return unsupported
        payload = self.build(sequence, params)
        if isinstance(payload, UnsupportedKind):
            return payload
        return Rendered.of(payload)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.adapter_id} {self._digest[:19]}>"
