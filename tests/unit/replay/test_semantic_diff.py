from __future__ import annotations

from typing import Any

from turnledger.replay.semantic_diff import DiffKind, Side, semantic_diff


def _anthropic(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 256, "messages": messages, **extra}


USER = {"role": "user", "content": [{"type": "text", "text": "weather in Paris and Rome?"}]}
CALLS = {
    "role": "assistant",
    "content": [
        {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "c2", "name": "weather", "input": {"city": "Rome"}},
    ],
}
R1 = {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"}
R2 = {"type": "tool_result", "tool_use_id": "c2", "content": "rain"}


def kinds(diffs: list[Any]) -> set[DiffKind]:
    return {d.kind for d in diffs}


def test_identical_requests_have_no_differences() -> None:
    request = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    assert semantic_diff(request, request) == []


def test_legacy_split_of_parallel_anthropic_tool_results_is_flagged() -> None:
    ours = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    legacy = _anthropic([USER, CALLS, {"role": "user", "content": [R1]}, {"role": "user", "content": [R2]}])
    diffs = semantic_diff(legacy, ours)
    split = [d for d in diffs if d.kind is DiffKind.SPLIT_TOOL_RESULTS]
    assert len(split) == 1 and split[0].side is Side.LEGACY
    assert "c1" in split[0].detail and "[2, 3]" in split[0].detail
    # the extra message is explained by the split, not reported as a separate merge
    assert DiffKind.MERGED_MESSAGES not in kinds(diffs)
    assert DiffKind.MESSAGE_CONTENT not in kinds(diffs)


def test_missing_tool_result_is_flagged_on_its_side() -> None:
    ours = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    legacy = _anthropic([USER, CALLS, {"role": "user", "content": [R1]}])
    missing = [d for d in semantic_diff(legacy, ours) if d.kind is DiffKind.MISSING_TOOL_RESULTS]
    assert len(missing) == 1 and missing[0].side is Side.LEGACY and "c2" in missing[0].detail


def test_merged_same_role_messages_are_named() -> None:
    a = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    b = {"role": "user", "content": [{"type": "text", "text": "b"}]}
    merged = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    diffs = semantic_diff(_anthropic([a, b]), _anthropic([merged]))
    assert kinds(diffs) == {DiffKind.MERGED_MESSAGES}
    assert diffs[0].side is Side.OURS


def test_role_order_difference() -> None:
    sys_first = {"role": "system", "content": "be brief"}
    user = {"role": "user", "content": "hi"}
    diffs = semantic_diff({"messages": [user, sys_first]}, {"messages": [sys_first, user]})
    assert kinds(diffs) == {DiffKind.ROLE_ORDER}


def test_extra_missing_and_changed_fields() -> None:
    legacy = _anthropic([USER], temperature=0.7, metadata={"user_id": "u"})
    ours = _anthropic([USER], temperature=0.2, stop_sequences=["x"])
    by_kind = {d.kind: d for d in semantic_diff(legacy, ours)}
    assert by_kind[DiffKind.EXTRA_FIELD].path == "$.metadata"
    assert by_kind[DiffKind.MISSING_FIELD].path == "$.stop_sequences"
    assert by_kind[DiffKind.VALUE_CHANGED].path == "$.temperature"


def test_reordered_tool_results() -> None:
    ours = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    legacy = _anthropic([USER, CALLS, {"role": "user", "content": [R2, R1]}])
    assert DiffKind.REORDERED_TOOL_RESULTS in kinds(semantic_diff(legacy, ours))


def test_openai_chat_one_tool_message_per_result_is_not_a_split() -> None:
    calls = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "w", "arguments": "{}"}},
        ],
    }
    t1 = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    t2 = {"role": "tool", "tool_call_id": "c2", "content": "rain"}
    request = {"model": "gpt", "messages": [{"role": "user", "content": "q"}, calls, t1, t2]}
    assert semantic_diff(request, request) == []
    interleaved = {"model": "gpt", "messages": [{"role": "user", "content": "q"}, calls, t1, USER, t2]}
    assert DiffKind.SPLIT_TOOL_RESULTS in kinds(semantic_diff(interleaved, request))


def test_changed_message_text_is_located() -> None:
    legacy = _anthropic([{"role": "user", "content": "hello"}])
    ours = _anthropic([{"role": "user", "content": [{"type": "text", "text": "hullo"}]}])
    diffs = semantic_diff(legacy, ours)
    assert [(d.kind, d.path) for d in diffs] == [(DiffKind.MESSAGE_CONTENT, "$.messages[0]")]
