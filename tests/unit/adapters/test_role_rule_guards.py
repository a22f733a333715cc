"""The shared helpers behind every adapter's role rules (mutation survivors of `adapters/_common.py`
and `adapters/turns.py`): exact outputs of each helper on the edges the goldens do not reach."""

from __future__ import annotations

from tests.unit.adapters.conversations import Conversation
from turnledger.adapters._common import (
    call_tool_names,
    delimited_scoped_text,
    error_envelope,
    escape_attribute,
    has_tool_blocks,
)


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
