"""openai-responses@4: a reasoning block without encrypted content goes back by reference to its
`rs_` id when the request is stored, and a request that is not stored asks for the encrypted content
(adapters/openai_responses.py says what OpenAI documents). Versions 1 to 3 drop such a block, so the
API refuses the calls that followed it; their bytes are pinned by their goldens."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pytest

from tests.unit.adapters.conversations import Conversation, params_for
from turnledger.adapters.base import Rendered
from turnledger.adapters.prefix import RenderCache
from turnledger.adapters.registry import ADAPTERS, LATEST
from turnledger.model.graph import MessageSequence

V3, V4 = "openai-responses@3", "openai-responses@4"
REASONING = {"effort": "low"}
ENCRYPTED = "reasoning.encrypted_content"
SIGNATURE = "gAAAAABoc2lnbmVk"
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
DONE = {"type": "message", "role": "assistant", "content": "Sunny."}


def reasoned_call(
    signature: str | None = None, block_id: str = "rs_1", item_id: str | None = None, answered: bool = True
) -> MessageSequence:
    """A reasoning answer's call (its reasoning block first) and its result, then the answer if
    `answered`."""
    c = Conversation("reasoned")
    c.next_turn().user("weather?")
    c.next_turn().thinking("Check Oslo.", signature=signature, block_id=block_id, item_id=item_id)
    call = c.call("get_weather", {"city": "Oslo"}, "call_1")
    c.next_turn().result(call, "sunny")
    if answered:
        c.next_turn().assistant("Sunny.")
    return c.build()


def body(adapter_id: str, sequence: MessageSequence, policy: Mapping[str, Any]) -> dict[str, Any]:
    adapter = ADAPTERS[adapter_id]
    params = dataclasses.replace(params_for(adapter.provider, tools=()), policy=policy)
    rendered = adapter.render(sequence, params)
    assert isinstance(rendered, Rendered), rendered
    out: dict[str, Any] = json.loads(rendered.body)
    return out


def reference(item_id: str) -> dict[str, str]:
    return {"type": "item_reference", "id": item_id}


def test_v4_is_the_latest_responses_adapter() -> None:
    assert LATEST["openai-responses"] == V4


@pytest.mark.parametrize("policy", [{}, {"store": True}, {"reasoning": REASONING}, {"store": None}])
def test_a_stored_request_refers_to_an_unsigned_reasoning_item_by_its_rs_id_where_v3_drops_it(
    policy: Mapping[str, Any],
) -> None:
    sequence = reasoned_call()
    assert body(V4, sequence, policy)["input"] == [USER, reference("rs_1"), CALL, OUTPUT, DONE]
    assert body(V3, sequence, policy)["input"] == [USER, CALL, OUTPUT, DONE]


def test_the_reference_names_the_stream_s_item_id_before_the_block_s_own() -> None:
    sequence = reasoned_call(block_id="b-1", item_id="rs_from_stream")
    assert body(V4, sequence, {})["input"] == [USER, reference("rs_from_stream"), CALL, OUTPUT, DONE]


def test_a_reasoning_block_with_no_rs_id_is_not_referred_to() -> None:
    """Another API's reasoning, or one submitted without the provider's id: no stored item to name."""
    assert body(V4, reasoned_call(block_id="think-1"), {})["input"] == [USER, CALL, OUTPUT, DONE]


def test_a_signed_reasoning_item_is_sent_whole_stored_or_not() -> None:
    whole = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Check Oslo."}],
        "encrypted_content": SIGNATURE,
    }
    for policy in ({}, {"store": False}):
        assert body(V4, reasoned_call(SIGNATURE), policy)["input"] == [USER, whole, CALL, OUTPUT, DONE]


def test_a_reference_with_nothing_after_it_in_its_run_is_dropped_as_a_reasoning_item_is() -> None:
    c = Conversation("trailing")
    c.next_turn().user("weather?")
    c.next_turn().thinking("Nothing to say.", block_id="rs_1")
    c.next_turn().user("again")
    again = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]}
    assert body(V4, c.build(), {})["input"] == [USER, again]


def test_a_request_that_is_not_stored_drops_the_unsigned_item_as_v3_does() -> None:
    """Nothing is kept to refer to: the API would answer "Item with id 'rs_…' not found"."""
    policy = {"store": False}
    sequence = reasoned_call()
    assert body(V4, sequence, policy)["input"] == body(V3, sequence, policy)["input"]
    assert body(V4, sequence, policy)["input"] == [USER, CALL, OUTPUT, DONE]


@pytest.mark.parametrize(
    ("include", "sent"),
    [
        (None, [ENCRYPTED]),
        ([], [ENCRYPTED]),
        (["message.output_text.logprobs"], ["message.output_text.logprobs", ENCRYPTED]),
        ([ENCRYPTED], [ENCRYPTED]),
        ("not-a-list", "not-a-list"),
    ],
)
def test_a_request_that_is_not_stored_and_asks_for_reasoning_asks_for_its_encrypted_content(
    include: Any, sent: Any
) -> None:
    policy = {"store": False, "reasoning": REASONING, "include": include}
    sent_body = body(V4, reasoned_call(answered=False), policy)
    assert (sent_body["store"], sent_body["reasoning"], sent_body.get("include")) == (False, REASONING, sent)
    assert body(V3, reasoned_call(answered=False), policy).get("include") == include


@pytest.mark.parametrize(
    "policy",
    [
        {"store": False},
        {"reasoning": REASONING},
        {"store": True, "reasoning": REASONING},
        {"store": False, "reasoning": None},
    ],
)
def test_include_is_left_as_the_policy_says_when_stored_or_without_reasoning(
    policy: Mapping[str, Any],
) -> None:
    assert "include" not in body(V4, reasoned_call(answered=False), policy)


def test_the_policy_given_is_not_changed() -> None:
    policy = {"store": False, "reasoning": REASONING, "include": ["message.output_text.logprobs"]}
    body(V4, reasoned_call(), policy)
    assert policy == {"store": False, "reasoning": REASONING, "include": ["message.output_text.logprobs"]}


def test_build_renders_as_render_does() -> None:
    adapter = ADAPTERS[V4]
    for policy in ({}, {"store": False, "reasoning": REASONING}):
        params = dataclasses.replace(params_for(adapter.provider, tools=()), policy=policy)
        built = adapter.build(reasoned_call(), params)
        assert built == body(V4, reasoned_call(), policy)


def test_a_cached_prefix_of_a_stored_request_is_not_continued_for_one_that_is_not() -> None:
    """The prefix cache is per (adapter, conversation): a request that is not stored has a key of its
    own, so the reference rendered for a stored one is never sent where nothing is stored."""
    adapter = ADAPTERS[V4]
    cache = RenderCache()
    params = params_for(adapter.provider, tools=())
    for first, then in [({}, {"store": False}), ({"store": False}, {})]:
        cache = RenderCache()
        adapter.render(reasoned_call(answered=False), dataclasses.replace(params, policy=first), cache)
        rendered = adapter.render(reasoned_call(), dataclasses.replace(params, policy=then), cache)
        assert isinstance(rendered, Rendered)
        assert json.loads(rendered.body) == body(V4, reasoned_call(), then)
