"""Per-API placement rules that the goldens pin only by example."""

from __future__ import annotations

from dataclasses import replace

import orjson

from tests.unit.adapters.conversations import Conversation, params_for, thinking_with_signature
from turnledger.adapters.base import Rendered, UnknownAdapterError
from turnledger.adapters.bedrock_converse import tool_use_id
from turnledger.adapters.registry import ADAPTERS, get_adapter, with_adapter
from turnledger.model.reasons import ReasonCode


def _body(adapter_id: str, sequence: object) -> dict:  # type: ignore[type-arg]
    adapter = get_adapter(adapter_id)
    out = adapter.render(sequence, params_for(adapter.provider))  # type: ignore[arg-type]
    assert isinstance(out, Rendered)
    return orjson.loads(out.body)


def test_gemini_keeps_signature_on_its_part_and_calls_in_one_content() -> None:
    body = _body("gemini@1", thinking_with_signature())
    model = body["contents"][1]
    calls = [p for p in model["parts"] if "functionCall" in p]
    assert len(calls) == 2
    assert calls[0]["thoughtSignature"] == "Z2VtaW5pLXNpZy0x" and calls[0]["functionCall"]["args"] == {
        "city": "Oslo"
    }
    assert "thoughtSignature" not in calls[1]
    responses = body["contents"][2]["parts"]
    assert [p["functionResponse"]["id"] for p in responses] == [c["functionCall"]["id"] for c in calls]


def test_responses_keeps_reasoning_before_its_calls() -> None:
    items = _body("openai-responses@1", thinking_with_signature())["input"]
    types = [i["type"] for i in items]
    r = types.index("reasoning")
    assert types[r + 1 : r + 3] == ["function_call", "function_call"]
    assert items[r]["encrypted_content"] == "c2lnLXRoaW5raW5nLTE="
    assert types.count("reasoning") == 1  # the unsigned, foreign thinking block is not replayed


def test_results_placed_after_calls_even_if_user_spoke_in_between() -> None:
    c = Conversation("between")
    c.next_turn().user("go")
    c.next_turn().assistant("calling")
    call = c.call("get_weather", {"city": "Oslo"})
    c.next_turn().user("hurry up")
    c.next_turn().result(call, "4C")
    anth = _body("anthropic-messages@1", c.build())["messages"]
    assert [p["type"] for p in anth[2]["content"]] == ["tool_result", "text"]
    chat = _body("openai-chat@1", c.build())["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "user"]


def test_bedrock_maps_foreign_ids_consistently() -> None:
    assert tool_use_id("toolu_01ABC") == "toolu_01ABC"
    mapped = tool_use_id("call:weird/id")
    assert mapped.startswith("tu_") and mapped == tool_use_id("call:weird/id")
    c = Conversation("ids")
    c.next_turn().user("go")
    call = c.next_turn().call("get_weather", {"city": "Oslo"}, call_id="fc.1/abc")
    c.next_turn().result(call, "ok")
    msgs = _body("bedrock-converse@1", c.build())["messages"]
    assert msgs[1]["content"][0]["toolUse"]["toolUseId"] == msgs[2]["content"][0]["toolResult"]["toolUseId"]


def test_stub_tools_when_history_has_tools_but_none_offered() -> None:
    c = Conversation("stub")
    c.next_turn().user("go")
    call = c.next_turn().call("get_weather", {"city": "Oslo"})
    c.next_turn().result(call, "ok")
    adapter = get_adapter("bedrock-converse@1")
    params = params_for("bedrock", tools=())
    out = adapter.render(c.build(), params)
    assert isinstance(out, Rendered)
    assert orjson.loads(out.body)["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"


def test_policy_is_whitelisted_per_api() -> None:
    c = Conversation("p")
    c.next_turn().user("hi")
    chat = _body("openai-chat@1", c.build())
    assert chat["temperature"] == 0.2 and "not_an_api_key" not in chat
    gem = _body("gemini@1", c.build())
    assert gem["generationConfig"] == {"maxOutputTokens": 1600, "temperature": 0.2, "topP": 0.9}
    anth = _body("anthropic-messages@1", c.build())
    assert "temperature" not in anth and anth["max_tokens"] == 1600


def test_registry_and_digests() -> None:
    assert set(ADAPTERS) >= {
        "openai-chat@1",
        "openai-responses@1",
        "anthropic-messages@1",
        "gemini@1",
        "bedrock-converse@1",
        "anthropic-messages@0",
    }
    assert len({a.digest for a in ADAPTERS.values()}) == len(ADAPTERS)
    try:
        get_adapter("mistral@1")
    except UnknownAdapterError as exc:
        assert exc.reason is ReasonCode.UNKNOWN_ADAPTER
    else:
        raise AssertionError("expected UnknownAdapterError")
    grown = with_adapter(ADAPTERS, get_adapter("gemini@1"))
    assert grown["gemini@1"] is get_adapter("gemini@1")


def test_streaming_is_part_of_the_request_bytes_where_the_api_takes_it_in_the_body() -> None:
    """The worker sends the manifest's bytes as they are, so streaming must be in them."""
    c = Conversation("s")
    c.next_turn().user("hi")
    sequence = c.build()
    streaming = {"stream": True, "background": True, "stream_options": {"include_usage": True}}

    def body(adapter_id: str) -> dict:  # type: ignore[type-arg]
        adapter = get_adapter(adapter_id)
        params = params_for(adapter.provider)
        rendered = adapter.render(sequence, replace(params, policy={**params.policy, **streaming}))
        assert isinstance(rendered, Rendered)
        return orjson.loads(rendered.body)  # type: ignore[no-any-return]

    assert body("anthropic-messages@1")["stream"] is True
    assert "background" not in body("anthropic-messages@1")
    chat = body("openai-chat@1")
    assert (chat["stream"], chat["stream_options"]) == (True, {"include_usage": True})
    responses = body("openai-responses@1")
    assert (responses["stream"], responses["background"]) == (True, True)
    for streamed_by_endpoint in ("gemini@1", "bedrock-converse@1"):
        assert {"stream", "background"}.isdisjoint(body(streamed_by_endpoint))
