"""The provider profiles: paths with their values quoted, the stream and resume rules, a fresh policy."""

from __future__ import annotations

import pytest

from turnledger.adapters.base import UnknownAdapterError
from turnledger.adapters.call_ids import IdRule
from turnledger.adapters.profiles import (
    PROFILES,
    AuthScheme,
    Framing,
    ProviderProfile,
    ResumeRule,
    api_of,
    profile_for,
)

RESPONSES = PROFILES["openai-responses"]


def test_a_model_or_a_handle_is_quoted_whole_into_its_path() -> None:
    """A slash or a space in a model name or a handle never reaches the path as one: it would address
    another resource."""
    gemini = PROFILES["gemini"]
    assert gemini.path_for("tuned/m 1") == "/v1beta/models/tuned%2Fm%201:streamGenerateContent?alt=sse"
    assert PROFILES["bedrock-converse"].path_for("a.b:0") == "/model/a.b%3A0/converse-stream"
    assert RESPONSES.resume_path("resp/1 x") == "/v1/responses/resp%2F1%20x?stream=true"
    assert RESPONSES.cancel_path("resp/1 x") == "/v1/responses/resp%2F1%20x/cancel"


def test_only_a_kept_response_has_resume_and_cancel_paths() -> None:
    anthropic = PROFILES["anthropic-messages"]
    assert (anthropic.resume_path("h"), anthropic.cancel_path("h")) == (None, None)
    no_cancel = ProviderProfile(
        api="kept-without-cancel",
        request_path="/v1/kept",
        framing=Framing.SSE,
        auth=AuthScheme.BEARER,
        id_rule=IdRule(),
        resume=ResumeRule("/v1/kept/{handle}", ("stream",)),
    )
    assert (no_cancel.resume_path("h/1"), no_cancel.cancel_path("h/1")) == ("/v1/kept/h%2F1", None)


@pytest.mark.parametrize(
    ("body", "streams", "resumable"),
    [
        ({"stream": True, "background": True}, True, True),
        ({"stream": True, "background": True, "store": True}, True, True),
        ({"stream": True, "background": True, "store": False}, True, False),  # asked not to be kept
        ({"stream": True, "background": True, "store": 0}, True, True),  # `store` is the JSON false or not
        ({"stream": True}, True, False),
        ({"stream": "true", "background": True}, False, False),  # a flag is the JSON true, nothing else
        ({}, False, False),
        (None, False, False),
    ],
)
def test_streams_and_resumable_read_the_exact_body(
    body: dict[str, object] | None, streams: bool, resumable: bool
) -> None:
    assert (RESPONSES.streams(body), RESPONSES.resumable(body)) == (streams, resumable)
    assert PROFILES["gemini"].streams(body) is True  # it streams by endpoint
    assert PROFILES["gemini"].resumable(body) is False


def test_a_stream_policy_is_a_fresh_copy_every_time() -> None:
    chat = PROFILES["openai-chat"]
    policy = chat.stream_policy()
    policy["stream_options"]["include_usage"] = False
    policy["stream"] = False
    assert chat.stream_policy() == {"stream": True, "stream_options": {"include_usage": True}}


@pytest.mark.parametrize(
    ("policy", "stream_policy"),
    [
        (None, {"stream": True, "background": True}),
        ({}, {"stream": True, "background": True}),
        ({"store": True, "temperature": 0}, {"stream": True, "background": True}),
        ({"store": False}, {"stream": True}),  # background mode would keep what is asked not to be stored
        ({"store": None}, {"stream": True, "background": True}),
    ],
)
def test_a_dispatch_asked_not_to_be_stored_gets_no_background_mode(
    policy: dict[str, object] | None, stream_policy: dict[str, object]
) -> None:
    assert RESPONSES.stream_policy(policy) == stream_policy
    assert RESPONSES.rules_out_keeping(policy) is ("background" not in stream_policy)
    assert RESPONSES.resumable({**(policy or {}), **stream_policy}) is ("background" in stream_policy)


def test_only_the_flags_that_keeping_alone_needs_are_left_out() -> None:
    """The stream flag stays (the request must still stream), and so does every key the resume rule
    does not name; an API without a resume rule keeps its whole stream policy."""
    kept = ProviderProfile(
        api="kept",
        request_path="/v1/kept",
        framing=Framing.SSE,
        auth=AuthScheme.BEARER,
        id_rule=IdRule(),
        stream_flag="streaming",
        stream_policy_data={"streaming": True, "keep": True, "hold": True, "level": 2},
        resume=ResumeRule(
            "/v1/kept/{handle}", ("streaming", "keep", "hold", "absent"), ruled_out_by=(("x", True),)
        ),
    )
    assert kept.stream_policy({"x": True}) == {"streaming": True, "level": 2}
    assert kept.stream_policy({"x": False}) == {"streaming": True, "keep": True, "hold": True, "level": 2}
    assert kept.rules_out_keeping({"x": True}) and not kept.rules_out_keeping({"y": True})
    chat = PROFILES["openai-chat"]
    assert chat.stream_policy({"store": False}) == {"stream": True, "stream_options": {"include_usage": True}}
    assert chat.rules_out_keeping({"store": False}) is False


def test_a_profile_is_found_by_adapter_id_or_api_and_an_unknown_one_is_named() -> None:
    assert api_of("gemini@2") == "gemini" and api_of("gemini") == "gemini"
    assert profile_for("openai-responses@1") is RESPONSES and profile_for("openai-responses") is RESPONSES
    with pytest.raises(UnknownAdapterError) as raised:
        profile_for("nope@1")
    assert (raised.value.adapter_id, str(raised.value)) == ("nope@1", "unknown adapter 'nope@1'")
