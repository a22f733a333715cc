"""anthropic-messages@3: the policy's `thinking` goes, except in a tool loop that did not open with
thinking the adapter sends.

With thinking on, Anthropic refuses a request whose current tool loop's first assistant message does
not start with a thinking block (400 "messages.N.content.0.type: Expected `thinking` or
`redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` message must
start with a thinking block ..."; OpenRouterTeam/ai-sdk-provider#162, n8n-io/n8n#15715, and on Bedrock
anomalyco/opencode#8010). The adapter sends only Anthropic's own signatures, so a loop another API
opened, or one Claude opened without thinking, can never meet the rule: version 3 sends that request
without `thinking` (the API's own advice), and every other request with it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.adapters.conversations import Conversation, params_for
from turnledger.adapters.anthropic_messages import (
    RULES_V2,
    RULES_V3,
    SENT,
    AnthropicMessagesAdapter,
)
from turnledger.adapters.base import DispatchParams, Rendered
from turnledger.adapters.prefix import RenderCache
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.adapters.tool_loop import loop_opening, thinking_on
from turnledger.model.graph import Block, BlockKind, MessageSequence, Role

V3 = ADAPTERS["anthropic-messages@3"]
ENABLED = {"type": "enabled", "budget_tokens": 1024}
SIGNED = {"signature": "c2lnLTE=", "signed_by": "anthropic-messages"}


def params(thinking: Any = ENABLED, **policy: Any) -> DispatchParams:
    base = params_for("anthropic")
    return DispatchParams(
        model_revision=base.model_revision,
        tools=base.tools,
        max_output_tokens=base.max_output_tokens,
        policy={"stop_sequences": ["END"], "thinking": thinking, **policy},
    )


def body(sequence: MessageSequence, p: DispatchParams | None = None, adapter: Any = V3) -> dict[str, Any]:
    rendered = adapter.render(sequence, p or params())
    assert isinstance(rendered, Rendered), rendered
    result: dict[str, Any] = json.loads(rendered.body)
    return result


def loop(opening: str | None, signed_by: str | None = "anthropic-messages") -> Conversation:
    """A user question, an assistant message opening with `opening` (thinking text, or None: no
    thinking) and a call, and its result last."""
    c = Conversation("loop")
    c.next_turn().user("Weather in Oslo?")
    c.next_turn()
    if opening is not None:
        c.thinking(opening, signature="c2lnLTE=", signed_by=signed_by, block_id="th_1")
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(x, '{"temp_c": 4}')
    return c


def test_anthropic_messages_3_is_the_latest_anthropic_adapter() -> None:
    assert LATEST["anthropic-messages"] == "anthropic-messages@3"
    assert V3.rules.policy_fields == {
        "stop_sequences": "stop_sequences",
        "stream": "stream",
        "thinking": "thinking",
    }
    assert V3.rules.as_data()["policy_without_loop_thinking"] == ("thinking",)


def test_versions_before_3_neither_send_thinking_nor_name_the_rule() -> None:
    """Their rules tables (and digests) are as they were: the field is not in them."""
    assert "policy_without_loop_thinking" not in RULES_V2.as_data()
    assert RULES_V2.policy_without_loop_thinking == ()
    for version in (1, 2):
        sent = body(loop("Oslo.").build(), adapter=ADAPTERS[f"anthropic-messages@{version}"])
        assert "thinking" not in sent and sent["stop_sequences"] == ["END"]


def test_a_loop_claude_opened_with_thinking_keeps_thinking_on() -> None:
    sent = body(loop("Oslo.").build())
    assert sent["thinking"] == ENABLED
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Oslo.",
        "signature": "c2lnLTE=",
    }


@pytest.mark.parametrize("signed_by", ["gemini", "bedrock-converse", "openai-responses"])
def test_a_loop_another_api_opened_goes_without_thinking(signed_by: str) -> None:
    """Its thinking is not sent (not Anthropic's signature), so the loop opens with the call."""
    sent = body(loop("Oslo.", signed_by=signed_by).build())
    assert "thinking" not in sent
    assert sent["stop_sequences"] == ["END"]
    assert [part["type"] for part in sent["messages"][1]["content"]] == ["tool_use"]


def test_a_loop_claude_opened_without_thinking_goes_without_thinking() -> None:
    sent = body(loop(None).build())
    assert "thinking" not in sent and sent["stop_sequences"] == ["END"]


def test_thinking_without_a_signature_is_not_sent_so_it_opens_nothing() -> None:
    c = Conversation("unsigned")
    c.next_turn().user("q")
    c.next_turn().thinking("musing")
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(x, "4")
    assert "thinking" not in body(c.build())


def test_thinking_signed_by_no_one_known_is_sent_so_it_opens_the_loop() -> None:
    """An older log's block (no `signed_by`) is sent as it always was."""
    assert body(loop("Oslo.", signed_by=None).build())["thinking"] == ENABLED


def test_adaptive_thinking_is_left_out_too_and_disabled_is_sent_as_it_is() -> None:
    assert "thinking" not in body(loop(None).build(), params({"type": "adaptive"}))
    disabled = {"type": "disabled"}
    assert body(loop(None).build(), params(disabled))["thinking"] == disabled
    assert body(loop("Oslo.").build(), params({"type": "adaptive"}))["thinking"] == {"type": "adaptive"}


def test_only_the_thinking_dependent_fields_are_left_out() -> None:
    sent = body(loop(None).build(), params(stream=True, temperature=0.5))
    assert {k: v for k, v in sent.items() if k not in ("messages", "tools", "model")} == {
        "max_tokens": 1600,
        "stop_sequences": ["END"],
        "stream": True,
    }


def test_a_second_step_without_thinking_stays_in_a_loop_that_opened_with_it() -> None:
    """Claude thinks once a turn: the loop's FIRST assistant message is the one that must start with
    thinking, not the last."""
    c = loop("Oslo first.")
    c.next_turn().assistant("Now Lima.")
    y = c.call("get_weather", {"city": "Lima"})
    c.next_turn().result(y, "19")
    assert body(c.build())["thinking"] == ENABLED


def test_a_second_step_with_thinking_does_not_open_a_loop_that_opened_without() -> None:
    c = loop(None)
    c.next_turn().thinking("Now Lima.", signature="c2lnLTI=", signed_by="anthropic-messages")
    y = c.call("get_weather", {"city": "Lima"})
    c.next_turn().result(y, "19")
    assert "thinking" not in body(c.build())


def test_a_user_message_without_a_result_ends_the_loop_before_it() -> None:
    """A loop opened without thinking, a new question, a loop opened with it: thinking on; and the
    other way round: off."""
    c = loop(None)
    c.next_turn().assistant("4C.")
    c.next_turn().user("And Lima?")
    c.next_turn().thinking("Lima now.", **SIGNED)
    y = c.call("get_weather", {"city": "Lima"})
    c.next_turn().result(y, "19")
    assert body(c.build())["thinking"] == ENABLED
    d = loop("Oslo.")
    d.next_turn().assistant("4C.")
    d.next_turn().user("And Lima?")
    d.next_turn()
    z = d.call("get_weather", {"city": "Lima"})
    d.next_turn().result(z, "19")
    assert "thinking" not in body(d.build())


def test_a_request_whose_last_user_message_is_plain_text_keeps_thinking() -> None:
    """Not in a loop: the turn Claude is asked for opens with its own thinking."""
    c = loop(None)
    c.next_turn().assistant("4C.")
    c.next_turn().user("Thanks.")
    assert body(c.build())["thinking"] == ENABLED


def test_text_after_the_results_in_the_same_user_message_keeps_the_loop() -> None:
    """Results and the text after them go in one user message (results first): it holds a result, so
    the loop goes on (the safe reading: the API may count it as a loop; thinking off is never refused)."""
    c = loop(None)
    c.user("Hurry.")
    sent = body(c.build())
    assert [p["type"] for p in sent["messages"][-1]["content"]] == ["tool_result", "text"]
    assert "thinking" not in sent


def test_a_request_ending_on_an_assistant_message_is_not_a_loop() -> None:
    c = loop(None)
    c.next_turn().assistant("So far")
    assert body(c.build())["thinking"] == ENABLED


def test_results_with_no_assistant_message_before_them_open_nothing() -> None:
    c = Conversation("orphan")
    c.next_turn().user("q")
    c.next_turn().result(c.call("get_weather", {"city": "Oslo"}), "4")
    blocks = [b for b in c.blocks if b.kind != BlockKind.TOOL_CALL]
    assert loop_opening(reversed(blocks)) is None


def test_blocks_that_are_not_sent_neither_open_the_loop_nor_split_its_messages() -> None:
    """A system block goes in `system`; blank assistant text and unsigned thinking render to nothing:
    the message starts with what is sent."""
    c = Conversation("hidden")
    c.next_turn().user("q")
    c.next_turn().assistant("  ")
    c.thinking("unsigned")
    c.thinking("signed", **SIGNED)
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(x, "4")
    c.next_turn().system("Be brief.")
    assert body(c.build())["thinking"] == ENABLED
    d = Conversation("hidden-2")
    d.next_turn().user("q")
    d.next_turn().thinking("signed", **SIGNED)
    x = d.call("get_weather", {"city": "Oslo"})
    d.next_turn().result(x, "4")
    d.next_turn().assistant("")
    d.next_turn().system("Be brief.")
    d.next_turn().user("and then")
    sent = body(d.build())
    assert sent["thinking"] == ENABLED
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]


def test_the_user_side_of_a_loop_is_tool_and_user_blocks_merged() -> None:
    """A user block between a call and its result lands after the result, in the same message."""
    c = Conversation("between")
    c.next_turn().user("q")
    c.next_turn().thinking("t", **SIGNED)
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().user("still there?")
    c.next_turn().result(x, "4")
    sent = body(c.build())
    assert [p["type"] for p in sent["messages"][-1]["content"]] == ["tool_result", "text"]
    assert sent["thinking"] == ENABLED


def test_thinking_on_reads_the_type() -> None:
    assert [thinking_on(t) for t in (ENABLED, {"type": "adaptive"})] == [True, True]
    off = [{"type": "disabled"}, {}, "enabled", None, {"type": "ENABLED"}]
    assert [thinking_on(t) for t in off] == [False] * 5


def test_a_continued_render_decides_as_a_render_from_nothing() -> None:
    """The loop opened in the cached prefix, the new blocks a step and its result; and a render of the
    same history again (no new blocks): the bytes of a render without a cache, thinking kept or not."""
    for opening in ("Oslo.", None):
        first = loop(opening)
        cut = len(first.blocks)
        first.next_turn().assistant("Now Lima.")
        y = first.call("get_weather", {"city": "Lima"})
        first.next_turn().result(y, "19")
        whole = first.build()
        prefix = MessageSequence(
            conversation_id=whole.conversation_id,
            conversation_revision=whole.conversation_revision,
            sequence_digest=whole.sequence_digest,
            blocks=whole.blocks[:cut],
            tool_edges=(),
        )
        cache = RenderCache()
        V3.render(prefix, params(), cache)
        continued = V3.render(whole, params(), cache)
        again = V3.render(whole, params(), cache)
        assert continued == again == V3.render(whole, params())
        assert isinstance(continued, Rendered)
        assert ("thinking" in json.loads(continued.body)) is (opening is not None)


def _blocks() -> list[Block]:
    c = Conversation("all")
    c.next_turn().user("q")
    c.user(" ")
    c.user("")
    c.snippet("s")
    c.next_turn().assistant("a")
    c.assistant("\n")
    c.thinking("t", **SIGNED)
    c.thinking("t2", signature="c2lnLTM=", signed_by="gemini")
    c.thinking("t3")
    c.thinking("t4", signature="c2lnLTQ=")
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(x, "")
    c.result(x, "4", status="error")
    c.artifact("art", role=Role.TOOL)
    return list(c.blocks)


def test_what_the_sent_table_says_goes_is_what_the_renderers_send() -> None:
    """SENT is read instead of rendering: for every kind it must agree with the renderer."""
    adapter = AnthropicMessagesAdapter(3, RULES_V3)
    blocks = _blocks()
    assert set(SENT) == set(RULES_V3.renderers.values())
    decided = [SENT[RULES_V3.renderers[b.kind]](b) for b in blocks]
    assert decided == [adapter.render_block(b) is not None for b in blocks]
    assert decided.count(False) == 5  # three blank texts, Gemini's and unsigned thinking
