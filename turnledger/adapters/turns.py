"""Folding role runs into an API's turns, for the shapes several APIs share.

Which fold an adapter uses, and with which of its rules, is the adapter's call; these
functions hold no defaults of any API. Anthropic, Bedrock and Gemini set system text
aside and merge same-role turns (`system_aside_turns`; Anthropic and Bedrock also put
results first). OpenAI Chat and Responses keep system text in place and answer each
call with its own message or item, on which the tool-scoped blocks after it ride
(`results_carrying_scoped`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from turnledger.adapters._common import Run
from turnledger.adapters.base import JsonObject, UnsupportedKind
from turnledger.adapters.kinds import ASSISTANT, SYSTEM, TOOL_RESULT
from turnledger.model.graph import Block

Part = JsonObject
RenderBlock = Callable[[Block], Part | None]


@dataclass(frozen=True)
class RenderedTurns:
    """The rendered turns, and the system parts for APIs that carry them outside the turns."""

    turns: list[JsonObject]
    system: list[Part] = field(default_factory=list)


def rendered_parts(run: Run, render: RenderBlock) -> list[Part]:
    """The run's parts in order; blocks the API does not take (render → None) are left out."""
    return [p for p in (render(b) for b in run.blocks) if p is not None]


def system_aside_turns(
    runs: Iterable[Run],
    render: RenderBlock,
    *,
    system: Sequence[Part],
    content_key: str,
    assistant_role: str,
    other_role: str,
    merge_same_role: bool,
    never_merged: frozenset[str] = frozenset(),
    results_first: Callable[[Part], bool] | None = None,
) -> RenderedTurns:
    """System runs' parts go after `system`; every other run becomes a `{role, content_key}` turn.

    An assistant run takes `assistant_role`, any other run `other_role`. A run whose
    parts are all left out makes no turn. With `merge_same_role`, a run joins the
    previous turn when both have the same API role, unless the graph role of either
    (the one that opened the previous turn) is in `never_merged`. With `results_first`,
    the parts it calls results come first in each turn, both groups in their order.
    """
    aside = list(system)
    turns: list[JsonObject] = []
    opened_by: list[str] = []
    for run in runs:
        parts = rendered_parts(run, render)
        if not parts:
            continue
        if run.role == SYSTEM:
            aside.extend(parts)
            continue
        role = assistant_role if run.role == ASSISTANT else other_role
        if (
            merge_same_role
            and turns
            and turns[-1]["role"] == role
            and never_merged.isdisjoint((opened_by[-1], run.role))
        ):
            turns[-1][content_key].extend(parts)
        else:
            turns.append({"role": role, content_key: parts})
            opened_by.append(run.role)
    if results_first is not None:
        for turn in turns:
            content = turn[content_key]
            turn[content_key] = [p for p in content if results_first(p)] + [
                p for p in content if not results_first(p)
            ]
    return RenderedTurns(turns=turns, system=aside)


def results_carrying_scoped(
    blocks: Iterable[Block], render: RenderBlock, *, body_key: str, text_type: str, carrier: str
) -> list[JsonObject] | UnsupportedKind:
    """One rendered message or item per tool result; each other tool-role block becomes an extra
    part of the result before it (of its `body_key`, turned from a string into one `text_type` part).

    A tool-role block with no result before it in the run has nothing to ride on: UnsupportedKind.
    """
    out: list[JsonObject] = []
    for block in blocks:
        rendered = render(block)
        if rendered is None:
            continue
        if block.kind == TOOL_RESULT:
            out.append(rendered)
            continue
        if not out:
            return UnsupportedKind(
                kind=block.kind, block_id=block.id, detail=f"tool-role block with no {carrier} to carry it"
            )
        last = out[-1]
        if isinstance(last[body_key], str):
            last[body_key] = [{"type": text_type, "text": last[body_key]}]
        last[body_key].append(rendered)
    return out
