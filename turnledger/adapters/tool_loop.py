"""Claude's thinking rule in a tool loop, for the adapters that send Claude's `thinking` (Anthropic's own
API and Bedrock's Converse).

With thinking on, Claude refuses a request whose current tool loop did not open with a thinking block
("messages.N.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When
`thinking` is enabled, a final `assistant` message must start with a thinking block ...", through
Bedrock the same words in a ValidationException), in every request of that loop. A tool loop is one
assistant turn: the assistant messages after the last user message that holds no tool result, the
request ending on one that does; Claude thinks at the start of the turn only, so it is the turn's FIRST
assistant message that must start with thinking. An adapter sends only thinking its own API signed
(`adapters/signatures.py`), so a loop another API opened, or one Claude opened without thinking, can
never meet the rule: such a request goes without the policy's thinking (the API's own advice: "To avoid
this requirement, disable `thinking`") until the next user message.

Both APIs merge consecutive same-role messages and put tool results in user messages, so the loop is
found over the blocks as placed, grouped by the side of the conversation they go in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain, groupby
from typing import Any

from turnledger.adapters._common import place_results
from turnledger.adapters.kinds import ASSISTANT, SYSTEM, TOOL_RESULT, USER
from turnledger.model.graph import Block, BlockKind

THINKING_ON = frozenset({"enabled", "adaptive"})
"""The `thinking.type`s that turn thinking on (`disabled` does not)."""


def thinking_on(thinking: Any) -> bool:
    """Does this `thinking` value (`{"type": "enabled", "budget_tokens": N}`, ...) turn thinking on?"""
    return isinstance(thinking, Mapping) and thinking.get("type") in THINKING_ON


def _side(block: Block) -> str:
    """The API role of the message a block goes in: tool and user blocks share the user's."""
    return ASSISTANT if block.role == ASSISTANT else USER


def loop_opening(sent_backward: Iterator[Block]) -> Block | None:
    """The first block of the assistant message the request's current tool loop opened with, given the
    blocks the adapter sends (system blocks set aside), last first; None: the request is not in a tool
    loop (its last message is a user message without a tool result, or an assistant message).

    The blocks are grouped into the messages the adapter merges them into; the loop runs back from the
    last message, a user message with a tool result, over assistant messages and user messages with
    tool results, and ends at a user message without one, or at the start."""
    opening: Block | None = None
    for n, (side, group) in enumerate(groupby(sent_backward, key=_side)):
        message = list(group)
        if side == USER:
            if not any(b.kind == TOOL_RESULT for b in message):
                return opening
        elif n == 0:
            return None
        else:
            opening = message[-1]
    return opening


def _backward(blocks: Sequence[Block]) -> Iterator[Block]:
    """The blocks placed as sent (`place_results`), last first; placed only when first read, so a
    loop found in the new blocks never places the rest of the history."""
    yield from reversed(place_results(blocks))


def unthought_loop(earlier: Sequence[Block], new: Sequence[Block], sent: Callable[[Block], bool]) -> bool:
    """Is the request (the history `earlier` then `new`) in a tool loop that did not open with a thinking
    block the adapter sends? `sent`: does the adapter send the block in a message?"""
    blocks = (b for b in chain(_backward(new), _backward(earlier)) if b.role != SYSTEM and sent(b))
    opening = loop_opening(blocks)
    return opening is not None and opening.kind != BlockKind.THINKING


def _at(policy: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of the policy (`a.b`: `policy["a"]["b"]`), or None."""
    node: Any = policy
    for key in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _without(policy: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The policy without the value at a dotted path; a parent object left empty goes too, a parent
    that is no object stays (the path is not there)."""
    head, _, rest = path.partition(".")
    kept = {key: value for key, value in policy.items() if key != head}
    inner = policy.get(head)
    if rest and isinstance(inner, Mapping):
        if left := _without(inner, rest):
            kept[head] = left
    elif rest and head in policy:
        kept[head] = inner
    return kept


def policy_in_loop(
    policy: Mapping[str, Any], thinking_paths: Sequence[str], unthought: Callable[[], bool]
) -> Mapping[str, Any]:
    """The dispatch policy a request sends: `policy`, less the values at `thinking_paths` (dotted paths
    to Claude's `thinking`) when one of them turns thinking on and the request is in a tool loop that did
    not open with thinking (`unthought`, asked only then)."""
    if not any(thinking_on(_at(policy, path)) for path in thinking_paths) or not unthought():
        return policy
    for path in thinking_paths:
        policy = _without(policy, path)
    return policy
