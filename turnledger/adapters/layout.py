"""Where an API's request body puts the pieces every adapter produces, and the one function that
puts them there.

Every body holds the turns, the output budget, the offered tools and the sampling policy
picked by the rules table; most hold the model and system parts too. The APIs differ only in
field names and nesting, which `BodyLayout` states as data. A layout is not a rules table:
it is not in the adapter digest (the fields that come from a rules table, such as
`max_tokens_field`, are digested there), and the goldens pin the bytes it produces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnledger.adapters.base import DispatchParams, JsonObject, parse_model_revision
from turnledger.adapters.turns import RenderedTurns

Path = tuple[str, ...]


@dataclass(frozen=True)
class BodyLayout:
    """Field names and key paths (from the body root) of one API's request body."""

    turns: str
    max_tokens: str
    model: str | None = "model"  # None: the model goes in the URL
    generation: str | None = None  # object holding the output budget and policy; None: top level
    system: Path = ()  # (): system text stays in the turns
    tools: Path = ("tools",)
    tool_group: str | None = None  # all definitions in one `[{tool_group: [...]}]` entry
    stub_tools: bool = False  # when none are offered, declare the tools the history uses
    parallel_tool_calls: str | None = None  # sent, as a bool, only when tools are offered
    root_policy: tuple[str, ...] = ()  # policy fields that go at the body's root, not in generation


def request_body(
    layout: BodyLayout,
    params: DispatchParams,
    rendered: RenderedTurns,
    tools: Sequence[JsonObject],
    policy: Mapping[str, Any],
) -> JsonObject:
    """The request body; the picked policy (API field names) is applied last, into the budget's object
    (or the body's root, for the layout's `root_policy` fields)."""
    body: JsonObject = {layout.turns: rendered.turns}
    if layout.model is not None:
        body[layout.model] = parse_model_revision(params.model_revision).model
    generation: JsonObject = body if layout.generation is None else body.setdefault(layout.generation, {})
    generation[layout.max_tokens] = params.max_output_tokens
    if rendered.system:
        _put(body, layout.system, rendered.system)
    if tools:
        _put(body, layout.tools, [{layout.tool_group: list(tools)}] if layout.tool_group else list(tools))
    picked = dict(policy)
    if layout.parallel_tool_calls and params.tools and "parallel_tool_calls" in params.policy:
        picked[layout.parallel_tool_calls] = bool(params.policy["parallel_tool_calls"])
    for name, value in picked.items():
        (body if name in layout.root_policy else generation)[name] = value
    return body


def _put(body: JsonObject, path: Path, value: Any) -> None:
    if not path:
        raise ValueError("this layout has no place for the value (an empty path)")
    *parents, last = path
    node = body
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
