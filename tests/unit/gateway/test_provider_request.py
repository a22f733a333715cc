"""The requests the worker sends (`gateway/provider_request.py`): every header of a send, the idempotency
key only where the API takes one, the cancel of a kept response, and a credential of the wrong kind
refused by name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.gateway.test_provider_config import manifest
from turnledger.gateway import provider_request
from turnledger.gateway.credentials import AwsCredentials, Secret
from turnledger.gateway.endpoints import endpoints_for
from turnledger.gateway.provider_request import ProviderRequest, cancel_request, send_request
from turnledger.gateway.signing import sigv4_headers

KEYS = {"OPENAI_API_KEY": "sk-request-test-000111", "ANTHROPIC_API_KEY": "sk-ant-request-222333"}
RESPONSES = ("openai-responses@2", "openai/gpt-4.1@2025-04")
CHAT = ("openai-chat@2", "openai/gpt-4o@2024-08")
REGION = "us-east-1"  # a base-URL route's region when none is named


def test_a_send_carries_the_json_type_the_route_headers_the_idempotency_key_and_the_credential() -> None:
    routes = endpoints_for("http://127.0.0.1:1", KEYS)
    endpoint = routes.endpoint(*CHAT)
    request = send_request(endpoint, manifest(*CHAT, body='{"model":"gpt-4o"}'), "idem-1")
    assert (request.method, request.url, request.content) == (
        "POST", "http://127.0.0.1:1/v1/chat/completions", b'{"model":"gpt-4o"}',
    )  # fmt: skip
    assert dict(request.headers) == {
        **endpoint.headers,
        "content-type": "application/json",
        "idempotency-key": "idem-1",
        "authorization": "Bearer sk-request-test-000111",
    }
    assert repr(request) == "<ProviderRequest POST http://127.0.0.1:1/v1/chat/completions (18 bytes)>"


def test_no_idempotency_header_without_a_key_or_where_the_api_names_none() -> None:
    routes = endpoints_for("http://127.0.0.1:1", {"GOOGLE_API_KEY": "AIza-request-444555"})
    chat = routes.endpoint(*CHAT)
    assert "idempotency-key" not in send_request(chat, manifest(*CHAT), "").headers
    gemini_ids = ("gemini@2", "google/gemini-2.5-pro@2025-06")
    gemini = routes.endpoint(*gemini_ids)
    header = gemini.profile.idempotency_header
    bare = replace(gemini, profile=replace(gemini.profile, idempotency_header=None))
    assert header is not None and header in send_request(gemini, manifest(*gemini_ids), "k").headers
    assert not any(h.lower() == header for h in send_request(bare, manifest(*gemini_ids), "k").headers)


def test_a_kept_response_is_cancelled_by_an_authenticated_empty_post() -> None:
    routes = endpoints_for("http://127.0.0.1:1", KEYS)
    endpoint = routes.endpoint(*RESPONSES)
    cancel = cancel_request(endpoint, "resp/1")
    assert cancel == ProviderRequest(
        "POST",
        "http://127.0.0.1:1/v1/responses/resp%2F1/cancel",
        {**endpoint.headers, "authorization": "Bearer sk-request-test-000111"},
        b"",
    )
    assert cancel_request(routes.endpoint(*CHAT), "h") is None


def test_a_credential_of_the_wrong_kind_is_refused_by_name() -> None:
    aws = AwsCredentials(Secret("AKIAWRONG000111"), Secret("wrong/secret/222"))
    with pytest.raises(TypeError, match=r"^this API takes an API key, the route has AWS credentials$"):
        provider_request._key(aws)
    routes = endpoints_for("http://127.0.0.1:1", KEYS)
    endpoint = routes.endpoint(*CHAT)
    request = ProviderRequest("POST", endpoint.url, {}, b"")
    with pytest.raises(TypeError, match=r"^SigV4 needs AWS credentials, the route has an API key$"):
        provider_request._sigv4(endpoint, request, Secret("sk-wrong-kind-333"))


def test_a_sigv4_request_without_content_is_signed_over_no_bytes() -> None:
    """The same signature as botocore gives an empty body, for no content and for empty content (signed
    in the same second: the signature covers the time, so a pair across a second boundary is taken again)."""
    env = {"AWS_ACCESS_KEY_ID": "AKIAEMPTY000111", "AWS_SECRET_ACCESS_KEY": "empty/secret/222"}
    routes = endpoints_for("http://127.0.0.1:1", env)
    endpoint = routes.endpoint("bedrock-converse@1", "bedrock/anthropic.claude-sonnet-4@2025-05")
    credential = endpoint.route.credential
    assert isinstance(credential, AwsCredentials)
    for content in (None, b""):
        while True:
            ours = provider_request._sigv4(
                endpoint, ProviderRequest("POST", endpoint.url, {}, content), credential
            )
            direct = sigv4_headers(
                "POST", endpoint.url, {}, b"", credential, region="us-east-1", service="bedrock"
            )
            if ours["X-Amz-Date"] == direct["X-Amz-Date"]:
                break
        assert ours == direct
        assert "/us-east-1/bedrock/aws4_request" in ours["Authorization"]


def test_a_sigv4_signature_keeps_the_request_s_headers_and_signs_them() -> None:
    """The headers a send carries go out as they were, beside the signature, and are signed with it."""
    credential = AwsCredentials(Secret("AKIAHEADERS000111"), Secret("headers/secret/222"))
    headers = {"content-type": "application/json", "accept": "application/json"}
    url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/x/converse"
    signed = sigv4_headers("POST", url, headers, b"{}", credential, region="us-east-1", service="bedrock")
    assert list(signed) == ["content-type", "accept", "X-Amz-Date", "Authorization"]
    assert {k: signed[k] for k in headers} == headers
    assert "SignedHeaders=accept;content-type;host;x-amz-date, Signature=" in signed["Authorization"]


def test_a_sigv4_profile_must_name_its_signing_service() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIANOSERVICE0111", "AWS_SECRET_ACCESS_KEY": "no/service/secret/222"}
    endpoint = endpoints_for("http://127.0.0.1:1", env).endpoint(
        "bedrock-converse@1", "bedrock/anthropic.claude-sonnet-4@2025-05"
    )
    unnamed = replace(endpoint, profile=replace(endpoint.profile, signing_service=None))
    request = ProviderRequest("POST", endpoint.url, {}, b"{}")
    with pytest.raises(
        TypeError, match=r"^bedrock-converse signs with SigV4 but its profile names no signing service$"
    ):
        provider_request._sigv4(unnamed, request, endpoint.route.credential)  # type: ignore[arg-type]


def test_a_route_content_type_replaces_the_default_whatever_its_case() -> None:
    from turnledger.gateway.endpoints import ProviderRoute, ProviderRoutes, RouteSettings

    settings = RouteSettings(
        "r", "http://127.0.0.1:1", ("openai-chat",), headers={"Content-Type": "application/x"}
    )
    endpoint = ProviderRoutes([ProviderRoute(settings, Secret("sk-route-ct-000999"))]).endpoint(*CHAT)
    headers = dict(send_request(endpoint, manifest(*CHAT), "").headers)
    assert [name for name in headers if name.lower() == "content-type"] == ["Content-Type"]
    assert headers["Content-Type"] == "application/x"
