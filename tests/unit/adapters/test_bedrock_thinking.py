"""bedrock-converse@2: the policy's `additional_model_request_fields` goes at the body's root, its
`thinking` left out in a tool loop that did not open with thinking the adapter sends.

Claude on Bedrock thinks when asked in `additionalModelRequestFields` (`{"thinking": {"type": "enabled",
"budget_tokens": N}}`, AWS's "Extended thinking" guide), and refuses a tool loop that did not open with
thinking as Anthropic does, in a ValidationException ("The model returned the following errors:
messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. ...",
anomalyco/opencode#3077, pydantic/pydantic-ai#2453)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.adapters.conversations import Conversation, params_for
from turnledger.adapters.base import DispatchParams, Rendered
from turnledger.adapters.bedrock_converse import RULES_V1, RULES_V2, SENT, BedrockConverseAdapter
from turnledger.adapters.prefix import RenderCache
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.adapters.tool_loop import policy_in_loop
from turnledger.model.graph import Block, MessageSequence, Role

V2 = ADAPTERS["bedrock-converse@2"]
ENABLED = {"type": "enabled", "budget_tokens": 1024}
OWN = {"signature": "c2lnLTE=", "signed_by": "bedrock-converse"}
OTHER_KEY = {"anthropic_beta": ["interleaved-thinking-2025-05-14"]}


def params(fields: Any = None, **policy: Any) -> DispatchParams:
    base = params_for("bedrock")
    return DispatchParams(
        model_revision=base.model_revision,
        tools=base.tools,
        max_output_tokens=base.max_output_tokens,
        policy={
            "temperature": 0.5,
            "additional_model_request_fields": {"thinking": ENABLED} if fields is None else fields,
            **policy,
        },
    )


def body(sequence: MessageSequence, p: DispatchParams | None = None, adapter: Any = V2) -> dict[str, Any]:
    rendered = adapter.render(sequence, p or params())
    assert isinstance(rendered, Rendered), rendered
    result: dict[str, Any] = json.loads(rendered.body)
    return result


def loop(opening: str | None, signed_by: str | None = "bedrock-converse") -> Conversation:
    """A user question, an assistant message opening with `opening` (reasoning text, or None: none) and
    a call, and its result last."""
    c = Conversation("loop")
    c.next_turn().user("Weather in Oslo?")
    c.next_turn()
    if opening is not None:
        c.thinking(opening, signature="c2lnLTE=", signed_by=signed_by, block_id="th_1")
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(x, '{"temp_c": 4}')
    return c


def test_bedrock_converse_2_is_the_latest_bedrock_adapter() -> None:
    assert LATEST["bedrock-converse"] == "bedrock-converse@2"
    assert V2.rules.policy_fields == {
        "temperature": "temperature",
        "top_p": "topP",
        "stop_sequences": "stopSequences",
        "additional_model_request_fields": "additionalModelRequestFields",
    }
    data = V2.rules.as_data()
    assert data["policy_at_root"] == ("additionalModelRequestFields",)
    assert data["policy_without_loop_thinking"] == ("additional_model_request_fields.thinking",)


def test_version_1_neither_sends_the_fields_nor_names_the_rules() -> None:
    data = RULES_V1.as_data()
    assert "policy_at_root" not in data and "policy_without_loop_thinking" not in data
    assert (RULES_V1.policy_at_root, RULES_V1.policy_without_loop_thinking) == ((), ())
    sent = body(loop("Oslo.").build(), adapter=ADAPTERS["bedrock-converse@1"])
    assert "additionalModelRequestFields" not in sent
    assert sent["inferenceConfig"] == {"maxTokens": 1600, "temperature": 0.5}


def test_the_fields_go_at_the_root_as_given_outside_a_loop() -> None:
    c = Conversation("plain")
    c.next_turn().user("Hello")
    fields = {"thinking": ENABLED, **OTHER_KEY}
    sent = body(c.build(), params(fields))
    assert sent["additionalModelRequestFields"] == fields
    assert sent["inferenceConfig"] == {"maxTokens": 1600, "temperature": 0.5}


def test_a_loop_claude_opened_with_thinking_on_bedrock_keeps_thinking_on() -> None:
    sent = body(loop("Oslo.").build())
    assert sent["additionalModelRequestFields"] == {"thinking": ENABLED}
    assert sent["messages"][1]["content"][0] == {
        "reasoningContent": {"reasoningText": {"text": "Oslo.", "signature": "c2lnLTE="}}
    }


@pytest.mark.parametrize("signed_by", ["anthropic-messages", "gemini", "openai-responses"])
def test_a_loop_another_api_opened_goes_without_thinking_its_other_keys_kept(signed_by: str) -> None:
    """Its reasoning is not sent (not Bedrock's signature), so the loop opens with the call."""
    sent = body(loop("Oslo.", signed_by=signed_by).build(), params({"thinking": ENABLED, **OTHER_KEY}))
    assert sent["additionalModelRequestFields"] == OTHER_KEY
    assert [list(part) for part in sent["messages"][1]["content"]] == [["toolUse"]]
    assert sent["inferenceConfig"] == {"maxTokens": 1600, "temperature": 0.5}


def test_a_loop_opened_without_thinking_drops_the_fields_left_empty() -> None:
    sent = body(loop(None).build())
    assert "additionalModelRequestFields" not in sent
    assert sent["inferenceConfig"] == {"maxTokens": 1600, "temperature": 0.5}


def test_adaptive_thinking_is_left_out_too_and_disabled_is_sent_as_it_is() -> None:
    adaptive = params({"thinking": {"type": "adaptive"}})
    assert "additionalModelRequestFields" not in body(loop(None).build(), adaptive)
    disabled = {"thinking": {"type": "disabled"}, **OTHER_KEY}
    assert body(loop(None).build(), params(disabled))["additionalModelRequestFields"] == disabled
    assert body(loop(None).build(), params(OTHER_KEY))["additionalModelRequestFields"] == OTHER_KEY


def test_a_second_step_without_thinking_stays_in_a_loop_that_opened_with_it() -> None:
    c = loop("Oslo first.")
    c.next_turn().assistant("Now Lima.")
    y = c.call("get_weather", {"city": "Lima"})
    c.next_turn().result(y, "19")
    assert body(c.build())["additionalModelRequestFields"] == {"thinking": ENABLED}


def test_a_new_question_opens_a_turn_that_thinks_again() -> None:
    c = loop(None)
    c.next_turn().assistant("4C.")
    c.next_turn().user("And Lima?")
    assert body(c.build())["additionalModelRequestFields"] == {"thinking": ENABLED}


def test_a_continued_render_decides_as_a_render_from_nothing() -> None:
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
        V2.render(prefix, params(), cache)
        continued = V2.render(whole, params(), cache)
        assert continued == V2.render(whole, params(), cache) == V2.render(whole, params())
        assert isinstance(continued, Rendered)
        assert ("additionalModelRequestFields" in json.loads(continued.body)) is (opening is not None)


def _blocks() -> list[Block]:
    c = Conversation("all")
    c.next_turn().user("q")
    c.user(" ")
    c.user("")
    c.snippet("s")
    c.next_turn().assistant("a")
    c.assistant("\n")
    c.thinking("t", **OWN)
    c.thinking("t2", signature="c2lnLTM=", signed_by="anthropic-messages")
    c.thinking("t3")
    c.thinking("t4", signature="c2lnLTQ=")
    x = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().result(x, "")
    c.result(x, "4", status="error")
    c.artifact("art", role=Role.TOOL)
    return list(c.blocks)


def test_what_the_sent_table_says_goes_is_what_the_renderers_send() -> None:
    """SENT is read instead of rendering: for every kind it must agree with the renderer."""
    adapter = BedrockConverseAdapter(2, RULES_V2)
    blocks = _blocks()
    assert set(SENT) == set(RULES_V2.renderers.values())
    decided = [SENT[RULES_V2.renderers[b.kind]](b) for b in blocks]
    assert decided == [adapter.render_block(b) is not None for b in blocks]
    assert decided.count(False) == 5  # three blank texts, Anthropic's and unsigned thinking


def test_policy_in_loop_removes_each_path_and_only_when_the_loop_is_unthought() -> None:
    policy = {"a": {"thinking": ENABLED, "b": 1}, "thinking": ENABLED, "c": 2}
    paths = ("a.thinking", "thinking")
    assert policy_in_loop(policy, paths, lambda: True) == {"a": {"b": 1}, "c": 2}
    assert policy_in_loop(policy, paths, lambda: False) is policy
    assert policy_in_loop(policy, (), lambda: True) is policy
    assert policy_in_loop({"a": {"thinking": ENABLED}}, ("a.thinking",), lambda: True) == {}
    no_object = {"a": "x", "b": None, "thinking": ENABLED}
    paths = ("a.thinking", "b.thinking", "c.thinking", "thinking")
    assert policy_in_loop(no_object, paths, lambda: True) == {"a": "x", "b": None}
    asked: list[bool] = []

    def unthought() -> bool:
        asked.append(True)
        return True

    off = {"a": {"thinking": {"type": "disabled"}}}
    assert policy_in_loop(off, ("a.thinking",), unthought) is off
    assert asked == []
