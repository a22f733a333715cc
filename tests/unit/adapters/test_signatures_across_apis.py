"""A signature goes only to the API that minted it (`adapters/signatures.py`).

A conversation may move from one API to another (a gateway's fallback, a user picking another model).
Every adapter used to send a block's signature whoever minted it: an Anthropic thinking signature went
to Gemini as a `thoughtSignature`, a Gemini one to Anthropic or Bedrock as a thinking `signature`, and
the provider refused the request ("Corrupted thought signature.", an invalid thinking signature), as it
refused every later request of the conversation. Each case renders a block signed by its own API, by
an unknown one (sent as before) and by another API (sent as its unsigned twin is)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.adapters.conversations import Conversation, params_for
from turnledger.adapters.base import Rendered
from turnledger.adapters.registry import ADAPTERS
from turnledger.adapters.signatures import FOREIGN_CALL_SIGNATURE, foreign_signature, own_signature
from turnledger.model.graph import Block, BlockKind, Role

SIGNATURE = "c2lnLXJlYXNvbmluZy0x"


def _body(adapter_id: str, conversation: Conversation) -> dict[str, Any]:
    adapter = ADAPTERS[adapter_id]
    rendered = adapter.render(conversation.build(), params_for(adapter.provider))
    assert isinstance(rendered, Rendered), rendered
    body: dict[str, Any] = json.loads(rendered.body)
    return body


def _thought_then_answer(signature: str | None, signed_by: str | None) -> Conversation:
    c = Conversation("moved")
    c.next_turn().user("q")
    c.next_turn().thinking("deep", signature=signature, block_id="rs_1", signed_by=signed_by)
    c.assistant("done")
    c.next_turn().user("again")
    return c


REASONING_APIS = ["anthropic-messages@2", "bedrock-converse@1", "openai-responses@2", "gemini@2"]


@pytest.mark.parametrize("adapter_id", REASONING_APIS)
def test_reasoning_signed_by_the_adapters_own_api_or_an_unknown_one_is_sent_signed(adapter_id: str) -> None:
    api = ADAPTERS[adapter_id].api
    unsigned = _body(adapter_id, _thought_then_answer(None, None))
    for signed_by in (api, None):
        body = _body(adapter_id, _thought_then_answer(SIGNATURE, signed_by))
        assert SIGNATURE in json.dumps(body)
        assert body != unsigned


MINTED_ELSEWHERE = [
    (adapter_id, api)
    for adapter_id in REASONING_APIS
    for api in ("anthropic-messages", "gemini", "openai-responses", "bedrock-converse")
    if ADAPTERS[adapter_id].api != api
]


@pytest.mark.parametrize(("adapter_id", "minted_by"), MINTED_ELSEWHERE)
def test_reasoning_another_api_signed_is_sent_as_its_unsigned_twin(adapter_id: str, minted_by: str) -> None:
    body = _body(adapter_id, _thought_then_answer(SIGNATURE, minted_by))
    assert SIGNATURE not in json.dumps(body)
    assert body == _body(adapter_id, _thought_then_answer(None, None))


def _gemini_turn(add: Callable[[Conversation], Block]) -> list[dict[str, Any]]:
    c = Conversation("to-gemini")
    c.next_turn().user("q")
    c.next_turn()
    block = add(c)
    if block.kind == BlockKind.TOOL_CALL:
        c.next_turn().result(block, "4")
    else:
        c.next_turn().user("again")
    contents: list[dict[str, Any]] = _body("gemini@2", c)["contents"]
    return contents[1]["parts"] if contents[1]["role"] == "model" else []


def test_gemini_sends_a_text_another_api_signed_without_the_signature() -> None:
    parts = _gemini_turn(
        lambda c: c.assistant("a haiku", signature=SIGNATURE, signed_by="anthropic-messages")
    )
    assert parts == [{"text": "a haiku"}]


def test_gemini_leaves_out_an_empty_text_whose_only_content_is_another_apis_signature() -> None:
    c = Conversation("to-gemini")
    c.next_turn().user("q")
    c.next_turn().assistant("", signature=SIGNATURE, signed_by="openai-responses")
    c.next_turn().user("again")
    assert _body("gemini@2", c)["contents"] == [{"parts": [{"text": "q"}, {"text": "again"}], "role": "user"}]


def test_gemini_sends_its_own_text_signature_and_an_unknown_ones() -> None:
    for signed_by in ("gemini", None):
        parts = _gemini_turn(lambda c, s=signed_by: c.assistant("a", signature=SIGNATURE, signed_by=s))
        assert parts == [{"text": "a", "thoughtSignature": SIGNATURE}]


@pytest.mark.parametrize("signed_by", ["gemini", None])
def test_gemini_sends_an_empty_text_carrying_its_own_signature_or_an_unknown_ones(
    signed_by: str | None,
) -> None:
    """Gemini's last chunk puts its signature on an empty text part; the next request must return it."""
    parts = _gemini_turn(lambda c: c.assistant("", signature=SIGNATURE, signed_by=signed_by))
    assert parts == [{"text": "", "thoughtSignature": SIGNATURE}]


def test_gemini_sends_a_call_another_api_signed_with_the_signature_gemini_documents_for_it() -> None:
    """Gemini 3 refuses a call of the current turn without a signature; the documented stand-in for a
    call Gemini did not generate is `skip_thought_signature_validator`."""
    parts = _gemini_turn(
        lambda c: c.call("get_weather", {"city": "Oslo"}, "call-1", SIGNATURE, "openai-responses")
    )
    assert parts == [
        {
            "functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}},
            "thoughtSignature": "skip_thought_signature_validator",
        }
    ]
    assert FOREIGN_CALL_SIGNATURE == "skip_thought_signature_validator"


@pytest.mark.parametrize("signed_by", ["gemini", None])
def test_gemini_sends_its_own_call_signature_and_an_unknown_ones(signed_by: str | None) -> None:
    parts = _gemini_turn(lambda c: c.call("get_weather", {"city": "Oslo"}, "call-1", SIGNATURE, signed_by))
    assert parts == [
        {
            "functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}},
            "thoughtSignature": SIGNATURE,
        }
    ]


def test_gemini_sends_an_unsigned_call_as_it_always_did() -> None:
    parts = _gemini_turn(lambda c: c.call("get_weather", {"city": "Oslo"}, "call-1"))
    assert parts == [{"functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}}}]


def _block(signature: str | None, signed_by: str | None) -> Block:
    return Block(
        id="b", role=Role.ASSISTANT, kind=BlockKind.THINKING, turn_id="t", revision=1, ordering=0,
        trust_label="model", text="x", signature=signature, signed_by=signed_by,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("signature", "signed_by", "own", "foreign"),
    [
        (SIGNATURE, "gemini", SIGNATURE, False),
        (SIGNATURE, None, SIGNATURE, False),
        (SIGNATURE, "anthropic-messages", None, True),
        (None, None, None, False),
    ],
)
def test_own_and_foreign_signature(
    signature: str | None, signed_by: str | None, own: str | None, foreign: bool
) -> None:
    block = _block(signature, signed_by)
    assert (own_signature(block, "gemini"), foreign_signature(block, "gemini")) == (own, foreign)


def test_responses_v3_passes_the_reasoning_policy_and_v2_drops_it() -> None:
    """Without `include: ["reasoning.encrypted_content"]` a Responses answer carries no encrypted
    content, so no reasoning item could ever be sent back."""
    policy = {"include": ["reasoning.encrypted_content"], "reasoning": {"effort": "high"}, "store": False}
    c = Conversation("policy")
    c.next_turn().user("q")
    bodies = {}
    for adapter_id in ("openai-responses@2", "openai-responses@3"):
        adapter = ADAPTERS[adapter_id]
        params = dataclasses.replace(params_for(adapter.provider), policy=policy)
        rendered = adapter.render(c.build(), params)
        assert isinstance(rendered, Rendered)
        bodies[adapter_id] = json.loads(rendered.body)
    assert {k: bodies["openai-responses@3"].get(k) for k in policy} == policy
    assert {k: bodies["openai-responses@2"].get(k) for k in policy} == {
        "include": None,
        "reasoning": None,
        "store": False,
    }


THINKING_CONFIG = {"includeThoughts": True, "thinkingLevel": "low"}


def _gemini_config(adapter_id: str, policy: dict[str, Any]) -> Any:
    c = Conversation("policy")
    c.next_turn().user("q")
    adapter = ADAPTERS[adapter_id]
    rendered = adapter.render(c.build(), dataclasses.replace(params_for(adapter.provider), policy=policy))
    assert isinstance(rendered, Rendered)
    return json.loads(rendered.body)["generationConfig"]


def test_gemini_v3_passes_the_thinking_config_policy_into_the_generation_config() -> None:
    """As it is, beside the sampling policy; without it, no `thinkingConfig`."""
    policy = {"temperature": 0.2, "thinking_config": THINKING_CONFIG}
    assert _gemini_config("gemini@3", policy) == {
        "maxOutputTokens": 1600,
        "temperature": 0.2,
        "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "low"},
    }
    assert _gemini_config("gemini@3", {"temperature": 0.2}) == {"maxOutputTokens": 1600, "temperature": 0.2}


@pytest.mark.parametrize("adapter_id", ["gemini@1", "gemini@2"])
def test_gemini_v1_and_v2_drop_the_thinking_config_policy(adapter_id: str) -> None:
    policy = {"temperature": 0.2, "thinking_config": THINKING_CONFIG}
    assert _gemini_config(adapter_id, policy) == {"maxOutputTokens": 1600, "temperature": 0.2}


def test_only_gemini_v3_s_policy_fields_gained_thinking_config() -> None:
    """Versions 1 and 2 keep the sampling fields (their digests are pinned); version 3 adds one."""
    sampling = {"temperature": "temperature", "top_p": "topP", "top_k": "topK",
                "stop_sequences": "stopSequences", "seed": "seed"}  # fmt: skip
    fields = {a: ADAPTERS[a].rules.policy_fields for a in ("gemini@1", "gemini@2", "gemini@3")}  # type: ignore[attr-defined]
    assert fields == {
        "gemini@1": sampling,
        "gemini@2": sampling,
        "gemini@3": {**sampling, "thinking_config": "thinkingConfig"},
    }


STAND_IN = "skip_thought_signature_validator"


def _two_steps(first_signature: str | None = None, signed_by: str | None = None) -> Conversation:
    """Two answers with calls, no signature anywhere but the first call's (when given): as Claude
    without thinking, OpenAI Chat or Bedrock without reasoning answer."""
    c = Conversation("unsigned")
    c.next_turn().user("q")
    c.next_turn().assistant("checking")
    x = c.call("get_weather", {"city": "Oslo"}, "call-1", first_signature, signed_by)
    y = c.call("get_weather", {"city": "Rome"}, "call-2")
    c.next_turn().result(x, "4")
    c.result(y, "20")
    c.next_turn()
    z = c.call("get_weather", {"city": "Lima"}, "call-3")
    c.next_turn().result(z, "17")
    return c


def _call_signatures(adapter_id: str, c: Conversation) -> list[list[str | None]]:
    """Each model content's functionCall parts' thoughtSignature (None: none)."""
    return [
        [part.get("thoughtSignature") for part in content["parts"] if "functionCall" in part]
        for content in _body(adapter_id, c)["contents"]
        if content["role"] == "model"
    ]


def test_gemini_v3_gives_the_stand_in_to_the_first_unsigned_call_of_every_answer() -> None:
    """An answer another API made without reasoning carries no signature that says so, and Gemini 3
    refuses its first call unsigned ("Function call is missing a thought_signature")."""
    assert _call_signatures("gemini@3", _two_steps()) == [[STAND_IN, None], [STAND_IN]]
    parts = _body("gemini@3", _two_steps())["contents"][1]["parts"]
    assert parts == [
        {"text": "checking"},
        {
            "functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}},
            "thoughtSignature": STAND_IN,
        },
        {"functionCall": {"id": "call-2", "name": "get_weather", "args": {"city": "Rome"}}},
    ]


def test_gemini_v2_sends_unsigned_calls_with_no_foreign_signature_as_before() -> None:
    assert _call_signatures("gemini@2", _two_steps()) == [[None, None], [None]]
    assert _call_signatures("gemini@1", _two_steps()) == [[None, None], [None]]


@pytest.mark.parametrize("signed_by", ["gemini", None])
def test_gemini_v3_keeps_a_first_call_s_own_signature_and_adds_no_stand_in(signed_by: str | None) -> None:
    """Gemini signed its own step (or an older log does not say who did): the call keeps its signature,
    and the step's later calls stay unsigned, as Gemini sent them."""
    signed = _two_steps(SIGNATURE, signed_by)
    assert _call_signatures("gemini@3", signed) == [[SIGNATURE, None], [STAND_IN]]


def test_gemini_v3_gives_a_first_call_another_api_signed_the_stand_in_once() -> None:
    signed = _two_steps(SIGNATURE, "openai-responses")
    assert _call_signatures("gemini@3", signed) == [[STAND_IN, None], [STAND_IN]]
    assert _call_signatures("gemini@2", signed) == [[STAND_IN, None], [None]]


def test_gemini_v3_stands_in_for_a_call_after_the_run_s_own_signed_text() -> None:
    """Whatever the run holds: Gemini 3 signs the first call of its own step, so an answer whose call is
    unsigned did not come from it, a signature elsewhere in the run notwithstanding."""
    c = Conversation("own-text")
    c.next_turn().user("q")
    c.next_turn().assistant("checking", signature="CiQBS3hu", signed_by="gemini")
    x = c.call("get_weather", {"city": "Oslo"}, "call-1")
    c.next_turn().result(x, "4")
    assert _body("gemini@3", c)["contents"][1]["parts"] == [
        {"text": "checking", "thoughtSignature": "CiQBS3hu"},
        {
            "functionCall": {"id": "call-1", "name": "get_weather", "args": {"city": "Oslo"}},
            "thoughtSignature": STAND_IN,
        },
    ]


def test_gemini_v3_adds_nothing_to_an_answer_without_calls() -> None:
    c = Conversation("text")
    c.next_turn().user("q")
    c.next_turn().assistant("a")
    c.next_turn().user("again")
    assert _body("gemini@3", c) == _body("gemini@2", c)
