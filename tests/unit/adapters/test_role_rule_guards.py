"""The shared helpers behind every adapter's role rules (mutation survivors of `adapters/_common.py`
and `adapters/turns.py`): exact outputs of each helper on the edges the goldens do not reach."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.adapters.conversations import Conversation
from turnledger.adapters._common import (
    Run,
    call_tool_names,
    delimited_scoped_text,
    error_envelope,
    escape_attribute,
    has_tool_blocks,
    parse_arguments,
    place_results,
    result_text,
)
from turnledger.adapters.base import MalformedSequenceError, UnsupportedKind
from turnledger.adapters.turns import (
    RenderedTurns,
    rendered_parts,
    results_carrying_scoped,
    system_aside_turns,
)
from turnledger.model.graph import Block, BlockKind, Role


def test_an_attribute_escapes_quotes_and_markup() -> None:
    assert escape_attribute('a"b<c>&d') == "a&quot;b&lt;c&gt;&amp;d"


def test_a_scoped_block_without_text_is_an_empty_tagged_part() -> None:
    c = Conversation()
    snippet = c.next_turn().snippet("doc").model_copy(update={"text": None})
    assert delimited_scoped_text(snippet) == (
        f'<retrieved_snippet id="{snippet.id}" trust="retrieved"></retrieved_snippet>'
    )


def test_tool_blocks_are_only_calls_and_results() -> None:
    c = Conversation()
    user = c.next_turn().user("hi")
    call = c.next_turn().call("get_weather", {"city": "Oslo"})
    result = c.next_turn().result(call, "4C")
    assert not has_tool_blocks([user])
    assert has_tool_blocks([user, call]) and has_tool_blocks([result])


def test_the_error_envelope_of_a_result_without_text_has_an_empty_message() -> None:
    c = Conversation()
    call = c.next_turn().call("get_weather", {"city": "Oslo"})
    failed = c.next_turn().result(call, "boom", status="error").model_copy(update={"text": None})
    assert error_envelope(failed, "cancelled") == {"error": {"status": "error", "message": ""}}


def test_tool_names_come_only_from_calls_and_results_in_first_seen_order() -> None:
    c = Conversation()
    user = c.next_turn().user("hi").model_copy(update={"tool_name": "not_a_tool"})
    first = c.next_turn().call("search_docs", {"query": "q"})
    second = c.call("get_weather", {"city": "Oslo"})
    result = c.next_turn().result(second, "4C")
    again = c.result(first, "found")
    assert call_tool_names([user, first, second, result, again]) == ["search_docs", "get_weather"]


# -- the role folds of adapters/turns.py, with a stand-in renderer ---------------------------


def render(block: Block) -> dict[str, Any] | None:
    """One part per block, named by its id; a block whose text is "skip" is left out."""
    if block.text == "skip":
        return None
    return {"type": block.kind, "id": block.id}


def part(block: Block) -> dict[str, Any]:
    rendered = render(block)
    assert rendered is not None
    return rendered


def history() -> tuple[list[Run], dict[str, Block]]:
    c = Conversation()
    s1 = c.next_turn().system("be brief")
    u1 = c.next_turn().user("hi")
    skipped = c.next_turn().assistant("skip")
    call = c.call("get_weather", {"city": "Oslo"})
    r1 = c.next_turn().result(call, "4C")
    t1 = c.snippet("doc", role=Role.TOOL)
    u2 = c.next_turn().user("thanks")
    s2 = c.system("later rule")
    u3 = c.user("more")
    a1 = c.next_turn().assistant("done")
    runs = [
        Run(Role.SYSTEM, (s1,)),
        Run(Role.USER, (u1,)),
        Run(Role.ASSISTANT, (skipped,)),
        Run(Role.TOOL, (r1, t1)),
        Run(Role.USER, (u2,)),
        Run(Role.SYSTEM, (s2,)),
        Run(Role.USER, (u3,)),
        Run(Role.ASSISTANT, (a1,)),
    ]
    named = {"s1": s1, "u1": u1, "r1": r1, "t1": t1, "u2": u2, "s2": s2, "u3": u3, "a1": a1}
    return runs, named


def fold(**options: Any) -> RenderedTurns:
    runs, _ = history()
    defaults: dict[str, Any] = {
        "system": [{"type": "notice"}],
        "content_key": "parts",
        "assistant_role": "model",
        "other_role": "user",
        "merge_same_role": True,
    }
    return system_aside_turns(runs, render, **{**defaults, **options})


def turns_of(rendered: RenderedTurns) -> list[tuple[str, list[str]]]:
    """The turns as (role, the names of their blocks in `history`)."""
    name_of = {block.id: name for name, block in history()[1].items()}
    return [(t["role"], [name_of[p["id"]] for p in t["parts"]]) for t in rendered.turns]


def test_system_runs_go_aside_after_the_given_system_parts_and_a_run_left_out_makes_no_turn() -> None:
    rendered = fold()
    _, b = history()
    assert rendered.system == [{"type": "notice"}, part(b["s1"]), part(b["s2"])]
    assert turns_of(rendered) == [("user", ["u1", "r1", "t1", "u2", "u3"]), ("model", ["a1"])]


def test_without_merging_every_run_is_its_own_turn() -> None:
    assert turns_of(fold(merge_same_role=False)) == [
        ("user", ["u1"]),
        ("user", ["r1", "t1"]),
        ("user", ["u2"]),
        ("user", ["u3"]),
        ("model", ["a1"]),
    ]


def test_a_never_merged_role_neither_joins_nor_is_joined_but_others_still_merge() -> None:
    assert turns_of(fold(never_merged=frozenset({Role.TOOL}))) == [
        ("user", ["u1"]),
        ("user", ["r1", "t1"]),
        ("user", ["u2", "u3"]),
        ("model", ["a1"]),
    ]


def test_results_first_moves_results_ahead_keeping_both_orders() -> None:
    rendered = fold(results_first=lambda p: p["type"] == "tool_result")
    assert turns_of(rendered) == [("user", ["r1", "u1", "t1", "u2", "u3"]), ("model", ["a1"])]


def test_the_assistant_role_is_the_apis_and_other_runs_take_the_other_role() -> None:
    c = Conversation()
    a = c.next_turn().assistant("a")
    u = c.next_turn().user("u")
    runs = [Run(Role.ASSISTANT, (a,)), Run(Role.USER, (u,))]
    rendered = system_aside_turns(
        runs, render, system=[], content_key="c", assistant_role="A", other_role="O", merge_same_role=True
    )
    assert rendered == RenderedTurns(
        turns=[{"role": "A", "c": [part(a)]}, {"role": "O", "c": [part(u)]}], system=[]
    )


def test_rendered_parts_leave_out_only_the_blocks_the_api_does_not_take() -> None:
    c = Conversation()
    blocks = (c.next_turn().user("x"), c.user("skip"), c.user("y"))
    assert rendered_parts(Run(Role.USER, blocks), render) == [part(blocks[0]), part(blocks[2])]


def carry(blocks: list[Block]) -> list[dict[str, Any]] | UnsupportedKind:
    def tool_render(block: Block) -> dict[str, Any] | None:
        if block.text == "skip":
            return None
        if block.kind == BlockKind.TOOL_RESULT:
            return {"role": "tool", "id": block.id, "content": block.text}
        return {"type": "snippet", "id": block.id}

    return results_carrying_scoped(
        blocks, tool_render, body_key="content", text_type="txt", carrier="message"
    )


def test_each_result_is_its_own_message_carrying_the_tool_blocks_after_it() -> None:
    c = Conversation()
    call1 = c.next_turn().call("get_weather", {"city": "Oslo"})
    call2 = c.call("search_docs", {"query": "q"})
    r1 = c.next_turn().result(call1, "4C")
    t1 = c.snippet("a", role=Role.TOOL)
    skipped = c.snippet("skip", role=Role.TOOL)
    t2 = c.snippet("b", role=Role.TOOL)
    r2 = c.result(call2, "found")
    assert carry([r1, t1, skipped, t2, r2]) == [
        {
            "role": "tool",
            "id": r1.id,
            "content": [
                {"type": "txt", "text": "4C"},
                {"type": "snippet", "id": t1.id},
                {"type": "snippet", "id": t2.id},
            ],
        },
        {"role": "tool", "id": r2.id, "content": "found"},
    ]


def test_a_tool_block_before_any_result_has_nothing_to_ride_on() -> None:
    c = Conversation()
    skipped = c.next_turn().snippet("skip", role=Role.TOOL)
    t1 = c.snippet("a", role=Role.TOOL)
    assert carry([skipped, t1]) == UnsupportedKind(
        kind=BlockKind.RETRIEVED_SNIPPET, block_id=t1.id, detail="tool-role block with no message to carry it"
    )


# -- place_results: each call's result (and the tool blocks riding on it) after its run ----


def test_results_follow_their_run_in_call_order_with_the_tool_blocks_after_them() -> None:
    c = Conversation()
    u0 = c.next_turn().user("go")
    text = c.next_turn().assistant("calling")
    pending = c.call("send_email", {"to": "x"})
    call_a = c.call("get_weather", {"city": "Oslo"})
    call_b = c.call("search_docs", {"query": "q"})
    between = c.next_turn().user("hurry")
    result_b = c.next_turn().result(call_b, "found")
    t1 = c.snippet("doc 1", role=Role.TOOL)
    t2 = c.snippet("doc 2", role=Role.TOOL)
    result_a = c.result(call_a, "4C")
    t3 = c.snippet("doc 3", role=Role.TOOL)
    later = c.next_turn().user("and?")
    second = c.next_turn().call("get_weather", {"city": "Rome"})
    result_c = c.next_turn().result(second, "20C")
    last = c.next_turn().assistant("done")
    blocks = (
        u0,
        text,
        pending,
        call_a,
        call_b,
        between,
        result_b,
        t1,
        t2,
        result_a,
        t3,
        later,
        second,
        result_c,
        last,
    )
    assert place_results(blocks) == (
        u0, text, pending, call_a, call_b, result_a, t3, result_b, t1, t2,
        between, later, second, result_c, last,
    )  # fmt: skip


def test_parse_arguments_says_why_it_refuses() -> None:
    c = Conversation()
    bad = c.next_turn().call("get_weather", "not json")
    with pytest.raises(MalformedSequenceError, match=rf"^block {bad.id}: arguments are not JSON$"):
        parse_arguments(bad)
    listed = c.call("get_weather", "[1]")
    with pytest.raises(
        MalformedSequenceError, match=rf"^block {listed.id}: arguments are not a JSON object$"
    ):
        parse_arguments(listed)


def test_runs_that_open_the_history_or_follow_only_placed_results_still_collect_their_calls() -> None:
    c = Conversation()
    first = c.next_turn().call("get_weather", {"city": "Oslo"})
    first_result = c.next_turn().result(first, "4C")
    second = c.next_turn().call("get_weather", {"city": "Rome"})
    second_result = c.next_turn().result(second, "20C")
    blocks = (first, first_result, second, second_result)
    assert place_results(blocks) == blocks


def test_an_empty_successful_result_is_empty_text() -> None:
    c = Conversation()
    call = c.next_turn().call("get_weather", {"city": "Oslo"})
    assert result_text(c.next_turn().result(call, ""), "cancelled") == ""
