"""Adapter behaviour the golden conversations do not reach, pinned exactly: stub tools for a history
with calls and a request without tools, a tool-role snippet with nothing to carry it, a signed
thought another provider minted, user contents around a system block merged for Gemini, an empty
successful result, a blank one, and the call id rules' own boundaries (mutation survivors of the adapters)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from tests.unit.adapters.conversations import Conversation, parallel_tools, params_for
from tests.unit.adapters.invariants import CHECKERS
from turnledger.adapters.base import Rendered, UnsupportedKind
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.registry import ADAPTERS
from turnledger.model.graph import MessageSequence, Role


def _body(adapter_id: str, sequence: MessageSequence, **params: Any) -> dict[str, Any]:
    adapter = ADAPTERS[adapter_id]
    rendered = adapter.render(sequence, params_for(adapter.provider, **params))
    assert isinstance(rendered, Rendered), rendered
    body: dict[str, Any] = json.loads(rendered.body)
    return body


@pytest.mark.parametrize("adapter_id", ["anthropic-messages@1", "anthropic-messages@2", "bedrock-converse@1"])
def test_a_history_with_calls_and_a_request_without_tools_gets_stub_tools(adapter_id: str) -> None:
    body = _body(adapter_id, parallel_tools(), tools=())
    tools = body["tools"] if "tools" in body else body["toolConfig"]["tools"]
    names = [t["name"] if "name" in t else t["toolSpec"]["name"] for t in tools]
    assert names == ["get_weather", "search_docs", "send_email"]


@pytest.mark.parametrize(
    ("adapter_id", "carrier"),
    [
        ("openai-chat@1", "tool message"),
        ("openai-chat@2", "tool message"),
        ("openai-responses@2", "tool output"),
    ],
)
def test_a_tool_role_snippet_with_no_result_to_carry_it_is_unsupported(adapter_id: str, carrier: str) -> None:
    c = Conversation("carrier")
    c.next_turn().user("q")
    c.next_turn().assistant("hi")
    snippet = c.next_turn().snippet("loose", role=Role.TOOL)
    adapter = ADAPTERS[adapter_id]
    assert adapter.render(c.build(), params_for(adapter.provider)) == UnsupportedKind(
        kind="retrieved_snippet", block_id=snippet.id, detail=f"tool-role block with no {carrier} to carry it"
    )


def test_a_signed_thought_another_provider_minted_is_not_sent_as_reasoning() -> None:
    c = Conversation("foreign-thought")
    c.next_turn().user("q")
    c.next_turn().thinking("deep", signature="c2ln", block_id="th-anthropic-1")
    c.assistant("done")
    assert [item["type"] for item in _body("openai-responses@2", c.build())["input"]] == [
        "message",
        "message",
    ]


def test_gemini_merges_the_user_contents_a_system_block_stood_between() -> None:
    c = Conversation("mid")
    c.next_turn().user("a")
    c.next_turn().system("b")
    c.next_turn().user("c")
    assert _body("gemini@2", c.build())["contents"] == [
        {"parts": [{"text": "a"}, {"text": "c"}], "role": "user"}
    ]


@pytest.mark.parametrize("adapter_id", ["gemini@1", "gemini@2"])
def test_gemini_returns_a_text_signature_on_its_part_even_on_an_empty_text(adapter_id: str) -> None:
    """Gemini's last chunk carries the thought signature on an empty text part (provider-formats §2d);
    dropping the empty part would lose the signature the next request must return."""
    c = Conversation("signed-text")
    c.next_turn().user("q")
    c.next_turn().assistant("a haiku", signature="c2lnLWE=")
    c.next_turn().user("again")
    c.next_turn().assistant("", signature="c2lnLWI=")
    c.next_turn().assistant("")
    c.next_turn().user("more")
    assert _body(adapter_id, c.build())["contents"] == [
        {"parts": [{"text": "q"}], "role": "user"},
        {"parts": [{"text": "a haiku", "thoughtSignature": "c2lnLWE="}], "role": "model"},
        {"parts": [{"text": "again"}], "role": "user"},
        {"parts": [{"text": "", "thoughtSignature": "c2lnLWI="}], "role": "model"},
        {"parts": [{"text": "more"}], "role": "user"},
    ]


@pytest.mark.parametrize("adapter_id", ["anthropic-messages@2", "openai-chat@2", "bedrock-converse@1"])
def test_a_text_signature_gemini_minted_is_not_sent_to_another_provider(adapter_id: str) -> None:
    c = Conversation("signed-elsewhere")
    c.next_turn().user("q")
    c.next_turn().assistant("a haiku", signature="c2lnLWE=")
    c.next_turn().user("again")
    unsigned = Conversation("signed-elsewhere")
    unsigned.next_turn().user("q")
    unsigned.next_turn().assistant("a haiku")
    unsigned.next_turn().user("again")
    assert "c2lnLWE=" not in json.dumps(_body(adapter_id, c.build()))
    assert _body(adapter_id, c.build()) == _body(adapter_id, unsigned.build())


def test_gemini_sends_an_empty_successful_result_as_an_empty_output() -> None:
    c = Conversation("empty-ok")
    c.next_turn().user("q")
    call = c.next_turn().call("get_weather", {"city": "Oslo"})
    c.next_turn().result(call, "")
    response = _body("gemini@2", c.build())["contents"][-1]["parts"][0]["functionResponse"]
    assert response == {"id": call.call_id, "name": "get_weather", "response": {"output": ""}}


def test_an_id_rule_whose_mapped_ids_break_it_is_refused() -> None:
    with pytest.raises(ValueError) as refused:
        IdRule(pattern=r"[a-z]+")  # the mapped ids have a digit and an underscore
    assert str(refused.value) == "mapped ids (tl_<32 hex>) break their own rule"
    with pytest.raises(ValueError):
        IdRule(max_length=34)  # "tl_" and 32 characters: 35
    assert IdRule(max_length=35).max_length == 35  # exactly as long as a mapped id: accepted


def test_an_id_as_long_as_the_limit_is_kept_and_a_missing_one_is_mapped_from_the_empty_id() -> None:
    rule = IdRule(max_length=40)
    assert rule.accepts("c" * 40) and not rule.accepts("c" * 41)
    assert wire_call_id(rule, "c" * 40) == "c" * 40
    assert wire_call_id(rule, None) == "tl_" + hashlib.sha256(b"").hexdigest()[:32]


def test_an_adapter_names_its_class_id_and_digest_prefix() -> None:
    adapter = ADAPTERS["openai-chat@1"]
    assert repr(adapter) == f"<OpenAIChatAdapter openai-chat@1 {adapter.digest[:19]}>"
    assert adapter.digest[:19] == "sha256:ad710e25e53b"


def _results_part(adapter_id: str, text: str, status: str) -> Any:
    c = Conversation("blank-result")
    c.next_turn().user("weather?")
    call = c.next_turn().call("get_weather", {"city": "Oslo"}, call_id="call_1")
    c.next_turn().result(call, text, status=status)
    return _body(adapter_id, c.build())["messages"][2]["content"]


@pytest.mark.parametrize("text", ["", " ", "\n\t"])
@pytest.mark.parametrize(
    ("adapter_id", "status", "part"),
    [
        ("anthropic-messages@1", "success", {"tool_use_id": "call_1", "type": "tool_result"}),
        (
            "anthropic-messages@2",
            "error",
            {"content": [{"text": "Tool call failed.", "type": "text"}], "is_error": True,
             "tool_use_id": "call_1", "type": "tool_result"},
        ),
        (
            "bedrock-converse@1",
            "success",
            {"toolResult": {"content": [], "status": "success", "toolUseId": "call_1"}},
        ),
        (
            "bedrock-converse@1",
            "error",
            {"toolResult": {"content": [{"text": "Tool call failed."}], "status": "error",
                            "toolUseId": "call_1"}},
        ),
    ],
)  # fmt: skip
def test_a_blank_tool_result_is_sent_as_one_without_text(
    adapter_id: str, status: str, part: Any, text: str
) -> None:
    """Anthropic and Bedrock refuse a whitespace-only text block inside a result too, and an error-status
    Bedrock result must have content: a blank result is rendered as an empty one."""
    assert _results_part(adapter_id, text, status) == [part]


def test_a_blank_bedrock_result_s_empty_content_is_what_the_service_model_allows() -> None:
    """Bedrock's model does not refuse `"content": []`, so bedrock-converse@1 keeps it (no new version).
    botocore's service model (github boto/botocore at e3091ae01b90bb7fb4838f91a1fe545abbb47dd5,
    botocore/data/bedrock-runtime/2023-09-30/service-2.json, and every earlier version of it that has the
    shape): `ToolResultBlock` requires `toolUseId` and `content`, and `ToolResultContentBlocks` is
    `{"type": "list", "member": {"shape": "ToolResultContentBlock"}}`, with no `min`. AWS's API reference
    (API_runtime_ToolResultBlock) says the same: content, an array of ToolResultContentBlock, required,
    no minimum. What the service does refuse is the alternative, an empty text block ("text content
    blocks must be non-empty", a ValidationException: NousResearch/hermes-agent#55093,
    anomalyco/opencode#17381), which invariants.check_bedrock names "blank text"."""
    conversation = Conversation("blank-result")
    conversation.next_turn().user("weather?")
    call = conversation.next_turn().call("get_weather", {"city": "Oslo"}, call_id="call_1")
    conversation.next_turn().result(call, "", status="success")
    body = _body("bedrock-converse@1", conversation.build())
    assert body["messages"][2]["content"] == [
        {"toolResult": {"content": [], "status": "success", "toolUseId": "call_1"}}
    ]
    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    result_block, contents = model.shape_for("ToolResultBlock"), model.shape_for("ToolResultContentBlocks")
    assert (result_block.required_members, contents.type_name, contents.metadata) == (
        ["toolUseId", "content"],
        "list",
        {},
    )
    operation = model.operation_model("ConverseStream")
    report = ParamValidator().validate({"modelId": "m", **body}, operation.input_shape)
    assert (report.has_errors(), CHECKERS["bedrock-converse"](body)) == (False, [])
    empty_text = json.loads(json.dumps(body).replace('"content": []', '"content": [{"text": ""}]'))
    assert CHECKERS["bedrock-converse"](empty_text) == ["messages.2: blank text"]
