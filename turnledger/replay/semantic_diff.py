"""A semantic diff of two provider requests: what a reviewer needs to know, not every byte.

Rollout step one of the spec compares the requests the legacy gateway sent with the
manifests turnledger would send. Byte equality answers "identical?"; this module
answers "if not, why": role order, merged or split messages, tool results split
across messages or missing, extra or missing fields, changed values. It is pure
(JSON in, findings out) and knows the message layouts of the Anthropic Messages,
OpenAI Chat, OpenAI Responses and Gemini APIs well enough to find messages, tool
calls and tool results; anything else is compared as plain JSON.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import groupby
from typing import Any

from turnledger.model.canonical import canonical_json

MESSAGE_LIST_FIELDS = ("messages", "contents", "input")
ONE_RESULT_PER_MESSAGE = frozenset({"tool", "function_call_output"})


class DiffKind(StrEnum):
    EXTRA_FIELD = "extra field"  # the legacy request has a field ours lacks
    MISSING_FIELD = "missing field"  # ours has a field the legacy request lacks
    VALUE_CHANGED = "value changed"
    ROLE_ORDER = "role order"
    MERGED_MESSAGES = "merged messages"
    SPLIT_TOOL_RESULTS = "split tool results"
    MISSING_TOOL_RESULTS = "missing tool results"
    REORDERED_TOOL_RESULTS = "reordered tool results"
    MESSAGE_CONTENT = "message content"


class Side(StrEnum):
    LEGACY = "legacy"
    OURS = "ours"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Difference:
    kind: DiffKind
    path: str
    detail: str
    side: Side = Side.BOTH


@dataclass(frozen=True, slots=True)
class Message:
    index: int
    role: str
    parts: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ToolLayout:
    """Where the calls and results of one request sit: call id -> message index."""

    calls: dict[str, int]
    call_groups: tuple[tuple[str, ...], ...]  # call ids emitted together by one assistant message
    results: dict[str, list[int]]
    result_order: tuple[str, ...]


def semantic_diff(legacy: Any, ours: Any) -> list[Difference]:
    """Findings, in a stable order; empty when the two requests mean the same."""
    if not isinstance(legacy, dict) or not isinstance(ours, dict):
        return list(_json_diff(legacy, ours, "$"))
    found = _message_lists(legacy, ours)
    field = found[0] if found is not None else None
    scalars_l = {k: v for k, v in legacy.items() if k != field}
    scalars_o = {k: v for k, v in ours.items() if k != field}
    out = list(_json_diff(scalars_l, scalars_o, "$"))
    if found is not None:
        out.extend(_messages_diff(*found))
    return out


def _message_lists(legacy: dict[str, Any], ours: dict[str, Any]) -> tuple[str, list[Any], list[Any]] | None:
    """The first message field either request has, with each side's messages; None when neither has
    one, or when one side's value is not a message list (the field is then compared as plain JSON)."""
    field = next((f for f in MESSAGE_LIST_FIELDS if f in legacy or f in ours), None)
    if field is None:
        return None
    left, right = _items(legacy.get(field)), _items(ours.get(field))
    if left is None or right is None:
        return None
    return field, left, right


def _items(value: Any) -> list[Any] | None:
    """The messages a request's message field holds: absent or null is none, a string is one user
    message (OpenAI Responses' `input` may be one), anything else but a list is not a message list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return value if isinstance(value, list) else None


# ------------------------------------------------------------------ plain JSON


def _json_diff(left: Any, right: Any, path: str) -> Iterator[Difference]:
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right)):
            sub = f"{path}.{key}"
            if key not in right:
                yield Difference(DiffKind.EXTRA_FIELD, sub, f"legacy has {_short(left[key])}", Side.LEGACY)
            elif key not in left:
                yield Difference(DiffKind.MISSING_FIELD, sub, f"ours has {_short(right[key])}", Side.OURS)
            else:
                yield from _json_diff(left[key], right[key], sub)
    elif isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for i, (a, b) in enumerate(zip(left, right, strict=True)):
            yield from _json_diff(a, b, f"{path}[{i}]")
    elif canonical_json(left) != canonical_json(right):
        yield Difference(DiffKind.VALUE_CHANGED, path, f"legacy {_short(left)} != ours {_short(right)}")


def _short(value: Any, limit: int = 60) -> str:
    text = canonical_json(value).decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------ messages


def messages_of(items: Sequence[Any]) -> list[Message]:
    """Normalize every API's message shape to (role, parts).

    An OpenAI Responses item with a type and no role, content or parts (`function_call`,
    `function_call_output`, `reasoning`) is one part of its own, named by its type, so its
    `call_id` reads as a call or a result as the other APIs' blocks do. (An OpenAI Chat message
    may leave out `content` beside its `tool_calls`: it has a role.)"""
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            out.append(Message(i, "?", (item,)))
            continue
        role = str(item.get("role") or item.get("type") or "?")
        if "type" in item and not {"role", "content", "parts"} & item.keys():
            out.append(Message(i, role, (item,)))
            continue
        content = item.get("content", item.get("parts"))
        if isinstance(content, str):
            parts: tuple[Any, ...] = ({"type": "text", "text": content},)
        elif isinstance(content, list):
            parts = tuple(content)
        else:
            parts = ()
        extras = {k: v for k, v in item.items() if k not in ("role", "content", "parts")}
        if extras:  # tool_calls, tool_call_id, name...: part of what the message says
            parts = (*parts, {"_fields": extras})
        out.append(Message(i, role, parts))
    return out


RESPONSES_CALL = "function_call"
"""The type of an OpenAI Responses call item: parallel calls are a run of such items, one call each."""


def tool_layout(messages: Sequence[Message]) -> ToolLayout:
    calls: dict[str, int] = {}
    groups: list[tuple[str, ...]] = []
    results: dict[str, list[int]] = {}
    order: list[str] = []
    previous_role = None
    for m in messages:
        group: list[str] = []
        for part in m.parts:
            for call_id in _call_ids(part):
                calls.setdefault(call_id, m.index)
                group.append(call_id)
            for call_id in _result_ids(part):
                results.setdefault(call_id, []).append(m.index)
                order.append(call_id)
        if group and m.role == previous_role == RESPONSES_CALL:
            groups[-1] = (*groups[-1], *group)
        elif group:
            groups.append(tuple(group))
        previous_role = m.role
    return ToolLayout(calls, tuple(groups), results, tuple(order))


def _call_ids(part: Any) -> Iterator[str]:
    if not isinstance(part, dict):
        return
    if part.get("type") == "tool_use" and "id" in part:  # anthropic
        yield str(part["id"])
    if part.get("type") == "function_call" and "call_id" in part:  # openai responses
        yield str(part["call_id"])
    if "functionCall" in part:  # gemini: ids are optional, fall back to the name
        call = part["functionCall"]
        yield str(call.get("id") or call.get("name"))
    for call in (part.get("_fields") or {}).get("tool_calls") or ():  # openai chat
        if isinstance(call, dict) and "id" in call:
            yield str(call["id"])


def _result_ids(part: Any) -> Iterator[str]:
    if not isinstance(part, dict):
        return
    if part.get("type") == "tool_result" and "tool_use_id" in part:
        yield str(part["tool_use_id"])
    if part.get("type") == "function_call_output" and "call_id" in part:
        yield str(part["call_id"])
    if "functionResponse" in part:
        response = part["functionResponse"]
        yield str(response.get("id") or response.get("name"))
    fields = part.get("_fields") or {}
    if "tool_call_id" in fields:
        yield str(fields["tool_call_id"])


def _messages_diff(field: str, legacy_items: list[Any], our_items: list[Any]) -> list[Difference]:
    legacy, ours = messages_of(legacy_items), messages_of(our_items)
    out: list[Difference] = []
    split_sides = set()
    for side, messages in ((Side.LEGACY, legacy), (Side.OURS, ours)):
        layout = tool_layout(messages)
        for diff in _tool_findings(field, messages, layout, side):
            out.append(diff)
            if diff.kind is DiffKind.SPLIT_TOOL_RESULTS:
                split_sides.add(side)
    out.extend(_reordered_results(field, tool_layout(legacy), tool_layout(ours)))
    roles_l, roles_o = [m.role for m in legacy], [m.role for m in ours]
    if roles_l != roles_o:
        collapsed_l, collapsed_o = _collapse(legacy), _collapse(ours)
        if [r for r, _ in collapsed_l] == [r for r, _ in collapsed_o]:
            if not split_sides:
                merged = _fewer_messages(len(legacy), len(ours))
                out.append(
                    Difference(
                        DiffKind.MERGED_MESSAGES,
                        f"$.{field}",
                        f"same-role messages merged by {merged}: legacy roles {roles_l}, ours {roles_o}",
                        merged,
                    )
                )
            out.extend(_content_diff(field, collapsed_l, collapsed_o))
        else:
            out.append(
                Difference(DiffKind.ROLE_ORDER, f"$.{field}", f"legacy roles {roles_l} != ours {roles_o}")
            )
        return out
    for a, b in zip(legacy, ours, strict=True):
        if _canon(a.parts) != _canon(b.parts):
            out.append(_content_difference(field, a.index, a.parts, b.parts))
    return out


def _fewer_messages(legacy: int, ours: int) -> Side:
    """The side that merged same-role messages: the one with fewer; both when each merged a different run."""
    if legacy == ours:
        return Side.BOTH
    return Side.OURS if ours < legacy else Side.LEGACY


def _tool_findings(
    field: str, messages: Sequence[Message], layout: ToolLayout, side: Side
) -> Iterator[Difference]:
    missing = [c for c in layout.calls if c not in layout.results]
    if missing:
        yield Difference(
            DiffKind.MISSING_TOOL_RESULTS, f"$.{field}", f"{side} has no result for calls {missing}", side
        )
    for group in layout.call_groups:
        holders = sorted({i for c in group for i in layout.results.get(c, [])})
        if len(holders) < 2:
            continue
        # OpenAI Chat (role "tool") and Responses (function_call_output items) carry one result per item
        one_message_per_result = {messages[i].role for i in holders} <= ONE_RESULT_PER_MESSAGE
        contiguous = holders == list(range(holders[0], holders[0] + len(holders)))
        if one_message_per_result and contiguous:
            continue  # OpenAI-style: one tool message per result, side by side, is the API's layout
        yield Difference(
            DiffKind.SPLIT_TOOL_RESULTS,
            f"$.{field}",
            f"{side} puts the results of parallel calls {list(group)} in messages {holders}",
            side,
        )


def _reordered_results(field: str, legacy: ToolLayout, ours: ToolLayout) -> Iterator[Difference]:
    if set(legacy.result_order) == set(ours.result_order) and legacy.result_order != ours.result_order:
        yield Difference(
            DiffKind.REORDERED_TOOL_RESULTS,
            f"$.{field}",
            f"legacy results {list(legacy.result_order)} != ours {list(ours.result_order)}",
        )


def _collapse(messages: Sequence[Message]) -> list[tuple[str, tuple[Any, ...]]]:
    return [
        (role, tuple(p for m in group for p in m.parts))
        for role, group in groupby(messages, key=lambda m: m.role)
    ]


def _content_diff(
    field: str, left: list[tuple[str, tuple[Any, ...]]], right: list[tuple[str, tuple[Any, ...]]]
) -> Iterator[Difference]:
    for i, ((_, a), (_, b)) in enumerate(zip(left, right, strict=True)):
        if _canon(a) != _canon(b) and sorted(map(_canon1, a)) != sorted(map(_canon1, b)):
            yield _content_difference(field, i, a, b, merged=True)


def _content_difference(
    field: str, index: int, a: tuple[Any, ...], b: tuple[Any, ...], merged: bool = False
) -> Difference:
    where = f"$.{field}[{index}]" + (" (after merging same-role runs)" if merged else "")
    for j, (x, y) in enumerate(zip(a, b, strict=False)):
        if _canon1(x) != _canon1(y):
            return Difference(
                DiffKind.MESSAGE_CONTENT, where, f"part {j}: legacy {_short(x)} != ours {_short(y)}"
            )
    return Difference(DiffKind.MESSAGE_CONTENT, where, f"legacy has {len(a)} parts, ours {len(b)}")


def _canon(parts: tuple[Any, ...]) -> bytes:
    return canonical_json(list(parts))


def _canon1(part: Any) -> bytes:
    return canonical_json(part)
