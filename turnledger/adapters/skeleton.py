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
4. all of it laid out in the body (`body_layout`), policy keys picked by the rules table from the
   request's policy (`request_policy`: an API may leave some of it out for the history at hand).

`render` pauses on a kind the rules table has no renderer for, else returns the
canonical bytes of `build` and their digest.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson

from turnledger.adapters._common import (
    Run,
    call_tool_names,
    has_scoped,
    has_tool_blocks,
    pick_policy,
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
from turnledger.adapters.kinds import ASSISTANT, TOOL, USER
from turnledger.adapters.layout import BodyLayout, request_body
from turnledger.adapters.policy_rules import PolicyRule, policy_refusal
from turnledger.adapters.prefix import EMPTY, BlockFacts, RenderCache, RenderedPrefix, facts_of
from turnledger.adapters.turns import RenderedTurns
from turnledger.model.canonical import canonical_json, digest_of
from turnledger.model.graph import Block, MessageSequence

if TYPE_CHECKING:
    from hashlib import _Hash

R = TypeVar("R", bound=RulesTable)

PartRenderer = Callable[[Block, R], JsonObject | None]


class AdapterBase(ABC, Generic[R]):
    """Identity, digest, `build` and `render`. Holds no role rules: those are each API's table."""

    api: str
    version: int
    provider: str
    part_renderers: Mapping[str, PartRenderer[R]]  # renderer name (a rules-table value) → function

    def __init__(self, version: int, rules: R, policy_rules: tuple[PolicyRule, ...] = ()) -> None:
        self.version = version
        self.rules = rules
        self.policy_rules = policy_rules
        """The rows of `adapters/policy_rules.py` that judge the policy this version sends: a check, not
        rendering, so not in the digest."""
        self.layout = self.body_layout(rules)
        self.adapter_id = f"{self.api}@{self.version}"
        self.render_key = self.adapter_id
        """Whose renders of a conversation `render`'s cache holds: this adapter's, by default."""
        self._digest = digest_of({"api": self.api, "version": self.version, "rules": rules.as_data()})

    @property
    def digest(self) -> str:
        return self._digest

    def policy_refusal(self, max_output_tokens: int, policy: Mapping[str, Any]) -> str | None:
        """Why the provider is sure to refuse a request with this policy and output budget, or None."""
        return policy_refusal(self.policy_rules, max_output_tokens, policy)

    @abstractmethod
    def body_layout(self, rules: R) -> BodyLayout:
        """Field names of this API's body (some, like the budget field, read from the rules)."""

    @abstractmethod
    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns | UnsupportedKind:
        """The API's role rules: the runs as its turns (and system parts), `notice` first if given."""

    @abstractmethod
    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        """One offered tool as the API declares it."""

    def request_policy(
        self, earlier: Sequence[Block], new: Sequence[Block], params: DispatchParams
    ) -> Mapping[str, Any]:
        """The dispatch policy this request's fields are picked from: the request's. The history is
        `earlier` then `new`, each cut where placing results never crosses (`build` passes it all as
        `new`); an API whose rules leave some of the policy out for some histories overrides this."""
        return params.policy

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
        policy = pick_policy(self.request_policy((), blocks, params), self.rules.policy_fields)
        return request_body(self.layout, params, rendered, tools, policy)

    def render(
        self, sequence: MessageSequence, params: DispatchParams, cache: RenderCache | None = None
    ) -> RenderOutcome:
        """The canonical bytes of `build` and their digest, or the kind the rules table cannot render.

        With `cache`, the conversation's last render with this adapter is continued where it may be
        (adapters/prefix.py): only the new blocks are rendered and only the new bytes hashed.
        """
        key = (self.render_key, sequence.conversation_id)
        blocks = sequence.blocks
        prefix = (cache.get(key) if cache is not None else None) or EMPTY
        if len(prefix.blocks) > len(blocks) or blocks[: len(prefix.blocks)] != prefix.blocks:
            prefix = EMPTY
        new = blocks[len(prefix.blocks) :]
        unsupported = first_unsupported(new, self.rules.renderers)  # the prefix rendered already
        if unsupported is not None:
            return unsupported
        facts = facts_of(new)
        if prefix.blocks and new and not self._continues(prefix, new, facts.call_ids):
            prefix, new, facts = EMPTY, blocks, facts_of(blocks)
        outcome = self._render_after(prefix, new, facts, params, keep=cache is not None)
        if isinstance(outcome, UnsupportedKind):
            return outcome
        rendered, next_prefix = outcome
        if cache is not None and next_prefix is not None:
            cache.put(key, next_prefix)
        return rendered

    def _continues(self, prefix: RenderedPrefix, new: tuple[Block, ...], call_ids: frozenset[str]) -> bool:
        """May `new` be rendered after `prefix` on its own? (prefix.py says why these conditions.)"""
        first = new[0]
        return (
            prefix.open_end
            and first.role == ASSISTANT
            and self.render_block(first) is not None
            and prefix.call_ids.isdisjoint(call_ids)
        )

    def _render_after(
        self,
        prefix: RenderedPrefix,
        new: tuple[Block, ...],
        facts: BlockFacts,
        params: DispatchParams,
        *,
        keep: bool,
    ) -> tuple[Rendered, RenderedPrefix | None] | UnsupportedKind:
        """`render` of the prefix's blocks then `new`, given the prefix; and, if `keep`, the prefix it
        leaves."""
        placed = place_results(new)
        rendered = self.turns(role_runs(placed), None)
        if isinstance(rendered, UnsupportedKind):
            return rendered
        scoped = prefix.scoped or facts.scoped
        tool_blocks = prefix.tool_blocks or facts.tool_blocks
        tool_names = prefix.tool_names
        if self.layout.stub_tools and facts.tool_blocks:
            tool_names += tuple(n for n in call_tool_names(new) if n not in prefix.tool_names)
        notice = self.rules.scoped_notice
        lead = self.turns([], notice) if notice and scoped else RenderedTurns(turns=[])
        assert not isinstance(lead, UnsupportedKind)  # no runs: nothing to refuse
        turns = _comma_joined((prefix.turns, canonical_json(rendered.turns)[1:-1]))
        notice_turns = canonical_json(lead.turns)[1:-1]
        inner = (notice_turns, b",", *turns) if notice_turns and turns else (notice_turns, *turns)
        system = [*lead.system, *prefix.system, *rendered.system]
        tools = [self.tool_definition(t.name, t.description, t.input_schema) for t in params.tools]
        if not tools and self.layout.stub_tools and tool_blocks:
            tools = [self.tool_definition(name, "", {"type": "object"}) for name in tool_names]
        policy = pick_policy(self.request_policy(prefix.blocks, new, params), self.rules.policy_fields)
        body = request_body(self.layout, params, RenderedTurns([], system), tools, policy)
        body[self.layout.turns] = _HOLE
        head, tail = canonical_json(body).split(_HOLE_BYTES)  # the one raw NUL is the hole
        hashed = b"".join((head, b"[", *inner))  # the one copy of the history's bytes
        digest = _continued_sha256(prefix, hashed)
        state = digest.copy() if keep else None
        closing = b"]" + tail
        digest.update(closing)
        rendered_body = Rendered(body=hashed + closing, request_digest="sha256:" + digest.hexdigest())
        if not keep:
            return rendered_body, None
        last = placed[-1] if placed else None
        next_prefix = RenderedPrefix(
            blocks=prefix.blocks + new,
            open_end=prefix.open_end
            if last is None
            else (
                prefix.open_end
                and new[-1].role != ASSISTANT
                and last.role in _OPEN_END_ROLES
                and facts.tool_role_results
                and self.render_block(last) is not None
            ),
            call_ids=prefix.call_ids | facts.call_ids if facts.call_ids else prefix.call_ids,
            hashed=hashed,
            turns_at=len(hashed) - sum(len(piece) for piece in turns),
            hash_state=state,
            system=(*prefix.system, *rendered.system),
            scoped=scoped,
            tool_blocks=tool_blocks,
            tool_names=tool_names,
        )
        return rendered_body, next_prefix

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.adapter_id} {self._digest[:19]}>"


_HOLE_BYTES = b"\x00"
_HOLE = orjson.Fragment(_HOLE_BYTES)
"""Where the turns go: canonical JSON never holds a raw NUL (orjson writes it as \\u0000 in strings)."""

_OPEN_END_ROLES = frozenset({USER, TOOL})


def _comma_joined(pieces: tuple[bytes | memoryview, ...]) -> tuple[bytes | memoryview, ...]:
    """JSON array bodies (each maybe empty) as the pieces of one, commas between: joined later, once."""
    kept = [piece for piece in pieces if len(piece)]
    return tuple(part for i, piece in enumerate(kept) for part in ((b",", piece) if i else (piece,)))


def _continued_sha256(prefix: RenderedPrefix, hashed: bytes) -> _Hash:
    """SHA-256 over `hashed`, continued from the prefix's state when `hashed` starts with its bytes."""
    if prefix.hash_state is not None and hashed.startswith(prefix.hashed):
        state = prefix.hash_state.copy()
        state.update(memoryview(hashed)[len(prefix.hashed) :])
        return state
    return hashlib.sha256(hashed)
