"""The semantic diff's findings whole (kind, path, words, side) for each layout it knows: the rollout's
first step reads them, so a finding that names the wrong message or side misleads a reviewer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.replay.test_semantic_diff import CALLS, R1, R2, USER, _anthropic
from turnledger.replay.semantic_diff import (
    Difference,
    DiffKind,
    Message,
    Side,
    ToolLayout,
    messages_of,
    semantic_diff,
    tool_layout,
)

LEGACY, OURS, BOTH = Side.LEGACY, Side.OURS, Side.BOTH


def canon(value: Any) -> str:
    """Canonical JSON of the plain values these tests use, written independently of the module."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_two_requests_that_are_not_objects_are_compared_as_plain_json() -> None:
    assert semantic_diff([1, 2], [1, 3]) == [Difference(DiffKind.VALUE_CHANGED, "$[1]", "legacy 2 != ours 3")]
    assert semantic_diff([1], [1, 2]) == [Difference(DiffKind.VALUE_CHANGED, "$", "legacy [1] != ours [1,2]")]
    assert semantic_diff("a", {"x": 1}) == [
        Difference(DiffKind.VALUE_CHANGED, "$", 'legacy "a" != ours {"x":1}')
    ]
    assert semantic_diff({"x": 1}, None) == [
        Difference(DiffKind.VALUE_CHANGED, "$", 'legacy {"x":1} != ours null')
    ]
    assert semantic_diff([{"a": 1}], [{"a": 1}]) == []


def test_fields_are_reported_in_key_order_with_their_side_and_value() -> None:
    legacy = _anthropic([USER], temperature=0.7, metadata={"user_id": "u"})
    ours = _anthropic([USER], temperature=0.2, stop_sequences=["x"])
    assert semantic_diff(legacy, ours) == [
        Difference(DiffKind.EXTRA_FIELD, "$.metadata", 'legacy has {"user_id":"u"}', LEGACY),
        Difference(DiffKind.MISSING_FIELD, "$.stop_sequences", 'ours has ["x"]', OURS),
        Difference(DiffKind.VALUE_CHANGED, "$.temperature", "legacy 0.7 != ours 0.2", BOTH),
    ]


def test_a_nested_change_is_located_by_its_path() -> None:
    legacy = {"model": "m", "tool_choice": {"a": {"b": [1, {"c": 2}]}}}
    ours = {"model": "m", "tool_choice": {"a": {"b": [1, {"c": 3}]}}}
    assert semantic_diff(legacy, ours) == [
        Difference(DiffKind.VALUE_CHANGED, "$.tool_choice.a.b[1].c", "legacy 2 != ours 3")
    ]


def test_a_long_value_is_cut_to_sixty_characters() -> None:
    long, longer = "x" * 100, "y" * 58
    [diff] = semantic_diff({"s": longer}, {"s": longer + "z"})  # 60 characters with its quotes, then 61
    assert diff == Difference(DiffKind.VALUE_CHANGED, "$.s", f'legacy "{longer}" != ours "{longer}…')
    [diff] = semantic_diff({"system": long}, {"system": "short"})
    assert diff.detail == f'legacy "{"x" * 58}… != ours "short"'


def test_the_message_list_of_each_api_is_found_even_when_one_side_lacks_it() -> None:
    user = {"role": "user", "parts": [{"text": "hi"}]}
    assert semantic_diff({"model": "g"}, {"model": "g", "contents": [user]}) == [
        Difference(DiffKind.ROLE_ORDER, "$.contents", "legacy roles [] != ours ['user']")
    ]
    assert semantic_diff({"messages": [user], "input": [1]}, {"messages": [user], "input": [2]}) == [
        Difference(DiffKind.VALUE_CHANGED, "$.input[0]", "legacy 1 != ours 2")  # the first field is the list
    ]


def test_a_string_input_is_one_user_message_and_a_value_that_is_no_list_is_plain_json() -> None:
    assert semantic_diff({"input": "hi"}, {"input": [{"role": "user", "content": "hi"}]}) == []
    assert semantic_diff({"input": "hi"}, {"input": [{"role": "user", "content": "ho"}]}) == [
        Difference(
            DiffKind.MESSAGE_CONTENT,
            "$.input[0]",
            'part 0: legacy {"text":"hi","type":"text"} != ours {"text":"ho","type":"text"}',
        )
    ]
    assert semantic_diff({"messages": 1}, {"messages": 2}) == [
        Difference(DiffKind.VALUE_CHANGED, "$.messages", "legacy 1 != ours 2")
    ]
    assert semantic_diff({"messages": 1}, {"messages": [{"role": "user", "content": "hi"}]}) == [
        Difference(DiffKind.VALUE_CHANGED, "$.messages", 'legacy 1 != ours [{"content":"hi","role":"user"}]')
    ]
    assert semantic_diff({"messages": None}, {"messages": [], "model": "m"}) == [
        Difference(DiffKind.MISSING_FIELD, "$.model", 'ours has "m"', OURS)
    ]


def test_messages_of_every_shape() -> None:
    chat_call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}
    responses_call = {"type": "function_call", "call_id": "c2"}
    assert messages_of(["loose", {"role": "user", "content": "hi"}, chat_call, responses_call]) == [
        Message(0, "?", ("loose",)),
        Message(1, "user", ({"type": "text", "text": "hi"},)),
        Message(2, "assistant", ({"_fields": {"tool_calls": [{"id": "c1"}]}},)),
        Message(3, "function_call", ({"type": "function_call", "call_id": "c2"},)),
    ]  # fmt: skip
    gemini = {"role": "model", "parts": [{"text": "a"}], "name": "n"}
    assert messages_of([gemini, {"content": 5}]) == [
        Message(0, "model", ({"text": "a"}, {"_fields": {"name": "n"}})),
        Message(1, "?", ()),
    ]


def test_the_tool_layout_of_each_api() -> None:
    anthropic = messages_of([USER, CALLS, {"role": "user", "content": [R2, R1]}])
    assert tool_layout(anthropic) == ToolLayout(
        {"c1": 1, "c2": 1}, (("c1", "c2"),), {"c2": [2], "c1": [2]}, ("c2", "c1")
    )
    chat = messages_of([
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}, {"id": "c2"}, "bad"]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c1", "content": "again"},
    ])  # fmt: skip
    assert tool_layout(chat) == ToolLayout({"c1": 0, "c2": 0}, (("c1", "c2"),), {"c1": [1, 2]}, ("c1", "c1"))
    responses = messages_of([
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "b"},
        {"type": "function_call", "call_id": "c3", "name": "w", "arguments": "{}"},
    ])  # fmt: skip
    assert tool_layout(responses) == ToolLayout(
        {"c1": 1, "c2": 2, "c3": 4}, (("c1", "c2"), ("c3",)), {"c2": [3]}, ("c2",)
    )
    gemini = messages_of([
        {"role": "model", "parts": [{"functionCall": {"name": "w", "id": "g1"}},
                                    {"functionCall": {"name": "v"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "v"}},
                                   {"functionResponse": {"id": "g1", "name": "w"}}]},
    ])  # fmt: skip
    assert tool_layout(gemini) == ToolLayout(
        {"g1": 0, "v": 0}, (("g1", "v"),), {"v": [1], "g1": [1]}, ("v", "g1")
    )


def test_a_legacy_split_of_parallel_results_is_one_finding() -> None:
    ours = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    legacy = _anthropic([USER, CALLS, {"role": "user", "content": [R1]}, {"role": "user", "content": [R2]}])
    assert semantic_diff(legacy, ours) == [
        Difference(
            DiffKind.SPLIT_TOOL_RESULTS,
            "$.messages",
            "legacy puts the results of parallel calls ['c1', 'c2'] in messages [2, 3]",
            LEGACY,
        )
    ]
    [split] = semantic_diff(ours, legacy)
    assert (split.side, split.detail) == (
        OURS,
        "ours puts the results of parallel calls ['c1', 'c2'] in messages [2, 3]",
    )


def test_a_missing_result_and_the_message_it_leaves_short() -> None:
    ours = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    legacy = _anthropic([USER, CALLS, {"role": "user", "content": [R1]}])
    assert semantic_diff(legacy, ours) == [
        Difference(
            DiffKind.MISSING_TOOL_RESULTS, "$.messages", "legacy has no result for calls ['c2']", LEGACY
        ),
        Difference(DiffKind.MESSAGE_CONTENT, "$.messages[2]", "legacy has 1 parts, ours 2"),
    ]


def test_a_responses_request_missing_a_result_is_flagged() -> None:
    """Responses calls and results are items of their own (no content), paired by call_id."""
    call = {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    user = {"role": "user", "content": "q"}
    ours = {"model": "o", "input": [user, call, output]}
    legacy = {"model": "o", "input": [user, call]}
    assert semantic_diff(ours, ours) == []
    assert semantic_diff(legacy, ours) == [
        Difference(DiffKind.MISSING_TOOL_RESULTS, "$.input", "legacy has no result for calls ['c1']", LEGACY),
        Difference(
            DiffKind.ROLE_ORDER,
            "$.input",
            "legacy roles ['user', 'function_call']"
            " != ours ['user', 'function_call', 'function_call_output']",
        ),
    ]  # fmt: skip


def test_responses_results_side_by_side_are_its_layout_and_apart_are_a_split() -> None:
    user = {"role": "user", "content": "q"}
    calls = [{"type": "function_call", "call_id": c, "name": "w", "arguments": "{}"} for c in ("c1", "c2")]
    outputs = [{"type": "function_call_output", "call_id": c, "output": "x"} for c in ("c1", "c2")]
    ours = {"input": [user, *calls, *outputs]}
    assert semantic_diff(ours, ours) == []
    apart = {"input": [user, *calls, outputs[0], user, outputs[1]]}
    assert semantic_diff(apart, ours)[0] == Difference(
        DiffKind.SPLIT_TOOL_RESULTS,
        "$.input",
        "legacy puts the results of parallel calls ['c1', 'c2'] in messages [3, 5]",
        LEGACY,
    )


def test_chat_results_interleaved_with_another_message_are_a_split() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}, {"id": "c2"}]}
    t1 = {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    t2 = {"role": "tool", "tool_call_id": "c2", "content": "rain"}
    q = {"role": "user", "content": "q"}
    ours = {"messages": [q, calls, t1, t2]}
    assert semantic_diff({"messages": [q, calls, t1, q, t2]}, ours) == [
        Difference(
            DiffKind.SPLIT_TOOL_RESULTS,
            "$.messages",
            "legacy puts the results of parallel calls ['c1', 'c2'] in messages [2, 4]",
            LEGACY,
        ),
        Difference(
            DiffKind.ROLE_ORDER,
            "$.messages",
            "legacy roles ['user', 'assistant', 'tool', 'user', 'tool']"
            " != ours ['user', 'assistant', 'tool', 'tool']",
        ),
    ]
    mixed = {"role": "user", "content": [{"type": "text", "text": "t"}], "tool_call_id": "c2"}
    [split, *_] = semantic_diff({"messages": [q, calls, t1, mixed]}, ours)
    assert split.kind is DiffKind.SPLIT_TOOL_RESULTS  # one holder is not a tool message: not the API's layout


def test_merged_messages_name_the_side_that_merged() -> None:
    a = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    b = {"role": "user", "content": [{"type": "text", "text": "b"}]}
    merged = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert semantic_diff(_anthropic([a, b]), _anthropic([merged])) == [
        Difference(
            DiffKind.MERGED_MESSAGES,
            "$.messages",
            "same-role messages merged by ours: legacy roles ['user', 'user'], ours ['user']",
            OURS,
        )
    ]
    [diff] = semantic_diff(_anthropic([merged]), _anthropic([a, b]))
    assert (diff.side, diff.detail) == (
        LEGACY, "same-role messages merged by legacy: legacy roles ['user'], ours ['user', 'user']",
    )  # fmt: skip


def test_merged_messages_with_other_content_are_located_after_merging() -> None:
    a = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    b = {"role": "user", "content": [{"type": "text", "text": "b"}]}
    other = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "c"}]}
    diffs = semantic_diff(_anthropic([a, b]), _anthropic([other]))
    assert diffs[1:] == [
        Difference(
            DiffKind.MESSAGE_CONTENT,
            "$.messages[0] (after merging same-role runs)",
            f"part 1: legacy {canon(b['content'][0])} != ours {canon(other['content'][1])}",
        )
    ]
    swapped = {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "a"}]}
    assert [d.kind for d in semantic_diff(_anthropic([a, b]), _anthropic([swapped]))] == [
        DiffKind.MERGED_MESSAGES
    ]


def test_reordered_results_and_the_message_that_holds_them() -> None:
    ours = _anthropic([USER, CALLS, {"role": "user", "content": [R1, R2]}])
    legacy = _anthropic([USER, CALLS, {"role": "user", "content": [R2, R1]}])
    assert semantic_diff(legacy, ours) == [
        Difference(
            DiffKind.REORDERED_TOOL_RESULTS, "$.messages", "legacy results ['c2', 'c1'] != ours ['c1', 'c2']"
        ),
        Difference(
            DiffKind.MESSAGE_CONTENT, "$.messages[2]", f"part 0: legacy {canon(R2)} != ours {canon(R1)}"
        ),
    ]


def test_role_order_names_both_orders() -> None:
    sys_first = {"role": "system", "content": "be brief"}
    user = {"role": "user", "content": "hi"}
    assert semantic_diff({"messages": [user, sys_first]}, {"messages": [sys_first, user]}) == [
        Difference(
            DiffKind.ROLE_ORDER, "$.messages", "legacy roles ['user', 'system'] != ours ['system', 'user']"
        )
    ]


@pytest.mark.parametrize(
    ("legacy_content", "detail"),
    [
        ("hello", 'part 0: legacy {"text":"hello","type":"text"} != ours {"text":"hullo","type":"text"}'),
        ([{"type": "text", "text": "hullo"}, {"type": "text", "text": "more"}], "legacy has 2 parts, ours 1"),
    ],
)
def test_changed_message_content_names_the_part(legacy_content: Any, detail: str) -> None:
    legacy = _anthropic([{"role": "user", "content": legacy_content}])
    ours = _anthropic([{"role": "user", "content": [{"type": "text", "text": "hullo"}]}])
    assert semantic_diff(legacy, ours) == [Difference(DiffKind.MESSAGE_CONTENT, "$.messages[0]", detail)]


def test_calls_results_and_ids_that_are_not_what_they_seem() -> None:
    """A Chat message may leave `content` out beside its calls; a Responses call's `id` is not its
    `call_id`; a malformed call or result is skipped, not a crash."""
    chat = messages_of([
        {"role": "assistant", "tool_calls": [{"id": "c1"}, "invalid", {"function": {}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
    ])  # fmt: skip
    assert tool_layout(chat) == ToolLayout({"c1": 0}, (("c1",),), {"c1": [1]}, ("c1",))
    responses = messages_of([
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "id": "fco_1", "call_id": "c1", "output": "x"},
    ])  # fmt: skip
    assert tool_layout(responses) == ToolLayout({"c1": 0}, (("c1",),), {"c1": [2]}, ("c1",))
    anthropic = messages_of([
        {"role": "assistant", "content": [{"type": "text", "id": "t1"}, {"type": "tool_use", "name": "w"}]},
        {"role": "user", "content": [{"type": "tool_result"}, {"type": "text", "tool_use_id": "c9"}]},
    ])  # fmt: skip
    assert tool_layout(anthropic) == ToolLayout({}, (), {}, ())


def test_each_group_of_parallel_calls_is_judged_on_its_own() -> None:
    """A group whose results share one message, or sit side by side as the API lays them out, does not
    end the search: a later group's split is still found."""
    calls_2 = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "c3", "name": "w", "input": {}},
        {"type": "tool_use", "id": "c4", "name": "w", "input": {}},
    ]}  # fmt: skip
    r3, r4 = ({"type": "tool_result", "tool_use_id": c, "content": "x"} for c in ("c3", "c4"))
    together = {"role": "user", "content": [R1, R2]}
    split = [{"role": "user", "content": [r3]}, {"role": "user", "content": [r4]}]
    ours = _anthropic([USER, CALLS, together, calls_2, {"role": "user", "content": [r3, r4]}])
    assert semantic_diff(_anthropic([USER, CALLS, together, calls_2, *split]), ours) == [
        Difference(
            DiffKind.SPLIT_TOOL_RESULTS,
            "$.messages",
            "legacy puts the results of parallel calls ['c3', 'c4'] in messages [4, 5]",
            LEGACY,
        )
    ]
    q = {"role": "user", "content": "q"}
    group_1 = {"role": "assistant", "tool_calls": [{"id": "c1"}, {"id": "c2"}]}
    group_2 = {"role": "assistant", "tool_calls": [{"id": "c3"}, {"id": "c4"}]}
    t1, t2, t3, t4 = ({"role": "tool", "tool_call_id": c, "content": "x"} for c in ("c1", "c2", "c3", "c4"))
    apart = {"messages": [q, group_1, t1, t2, group_2, t3, q, t4]}
    findings = semantic_diff(apart, {"messages": [q, group_1, t1, t2, group_2, t3, t4]})
    assert [(d.kind, d.detail) for d in findings if d.kind is DiffKind.SPLIT_TOOL_RESULTS] == [
        (
            DiffKind.SPLIT_TOOL_RESULTS,
            "legacy puts the results of parallel calls ['c3', 'c4'] in messages [5, 7]",
        )
    ]


def test_one_result_per_item_side_by_side_is_a_layout_whichever_item_carries_it() -> None:
    calls = {"role": "assistant", "tool_calls": [{"id": "c1"}, {"id": "c2"}]}
    mixed = [
        calls,
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"type": "function_call_output", "call_id": "c2", "output": "y"},
    ]
    assert semantic_diff({"messages": mixed}, {"messages": mixed}) == []


def test_when_each_side_merged_a_different_run_both_merged() -> None:
    u, a = ({"role": r, "content": [{"type": "text", "text": "t"}]} for r in ("user", "assistant"))
    uu = {"role": "user", "content": [{"type": "text", "text": "t"}, {"type": "text", "text": "t"}]}
    aa = {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "text", "text": "t"}]}
    assert semantic_diff(_anthropic([u, u, aa]), _anthropic([uu, a, a])) == [
        Difference(
            DiffKind.MERGED_MESSAGES,
            "$.messages",
            "same-role messages merged by both: legacy roles ['user', 'user', 'assistant'],"
            " ours ['user', 'assistant', 'assistant']",
            BOTH,
        )
    ]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"type": "message", "role": "user", "content": "hi"},
         Message(0, "user", ({"type": "text", "text": "hi"}, {"_fields": {"type": "message"}}))),
        ({"type": "x", "role": "user"}, Message(0, "user", ({"_fields": {"type": "x"}},))),
        ({"type": "message", "content": "hi"},
         Message(0, "message", ({"type": "text", "text": "hi"}, {"_fields": {"type": "message"}}))),
        ({"type": "x", "parts": [{"text": "a"}]},
         Message(0, "x", ({"text": "a"}, {"_fields": {"type": "x"}}))),
        ({"type": "function_call_output", "call_id": "c1"},
         Message(0, "function_call_output", ({"type": "function_call_output", "call_id": "c1"},))),
    ],
)  # fmt: skip
def test_only_an_item_with_a_type_and_no_role_content_or_parts_is_its_own_part(
    item: dict[str, Any], message: Message
) -> None:
    assert messages_of([item]) == [message]
