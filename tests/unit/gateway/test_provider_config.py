"""Provider routes from a file and the environment; requests built per API; secrets never shown."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from turnledger.gateway.credentials import AwsCredentials, Secret
from turnledger.gateway.endpoints import UnknownEndpointError, endpoints_for
from turnledger.gateway.provider_config import (
    ProviderConfigError,
    load_provider_file,
    load_routes,
    resolve_routes,
)
from turnledger.gateway.provider_request import resume_request, send_request
from turnledger.gateway.redaction import REDACTOR, RedactingFilter
from turnledger.model.manifest import DispatchManifest

TOML = """
[defaults]
read_timeout_s = 90

[[routes]]
name = "openai"
base_url = "https://api.openai.com"
adapters = ["openai-chat", "openai-responses@2"]
api_key_env = "MY_OPENAI_KEY"
concurrency = 3

[[routes]]
name = "openai-mini"
base_url = "https://mini.example"
adapters = ["openai-chat@2"]
models = ["openai/gpt-4o-mini@2024-07"]
api_key_file = "{key_file}"

[[routes]]
name = "anthropic"
base_url = "https://api.anthropic.com"
adapters = ["anthropic-messages"]
headers = {{ "anthropic-version" = "2023-06-01" }}

[[routes]]
name = "gemini"
base_url = "https://generativelanguage.googleapis.com"
adapters = ["gemini"]

[[routes]]
name = "bedrock"
base_url = "https://bedrock-runtime.eu-west-1.amazonaws.com"
adapters = ["bedrock-converse"]
aws_region = "eu-west-1"
"""

ENV = {
    "MY_OPENAI_KEY": "sk-planted-openai-000111",
    "ANTHROPIC_API_KEY": "sk-ant-planted-222333",
    "GEMINI_API_KEY": "AIza-planted-444555",
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED000111",
    "AWS_SECRET_ACCESS_KEY": "planted/secret/666777888",
    "AWS_SESSION_TOKEN": "planted-session-token-999",
}


def manifest(adapter: str, model: str, body: str = '{"stream":true}') -> DispatchManifest:
    return DispatchManifest.model_construct(
        adapter=adapter, model_revision=model, request_body=body, conversation_id="c", operation_id="o"
    )


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    key_file = tmp_path / "mini.key"
    key_file.write_text("sk-planted-mini-123456\n")
    path = tmp_path / "providers.toml"
    path.write_text(TOML.format(key_file=key_file))
    return path


def test_toml_routes_pick_by_adapter_and_model(config_file: Path) -> None:
    routes = resolve_routes(load_provider_file(config_file), ENV)
    pick = {
        ("openai-chat@1", "openai/gpt-4o@2024-08"): "openai",
        ("openai-chat@2", "openai/gpt-4o@2024-08"): "openai",
        ("openai-chat@2", "openai/gpt-4o-mini@2024-07"): "openai-mini",  # its model wins
        ("openai-responses@2", "openai/gpt-4.1@2025-04"): "openai",
        ("anthropic-messages@0", "anthropic/claude-sonnet-4@2025-05"): "anthropic",
        ("bedrock-converse@1", "bedrock/anthropic.claude-sonnet-4@2025-05"): "bedrock",
    }
    for (adapter, model), name in pick.items():
        assert routes.endpoint(adapter, model).route.name == name
    with pytest.raises(UnknownEndpointError, match="openai-responses@1"):
        routes.endpoint("openai-responses@1", "openai/gpt-4.1@2025-04")
    openai = routes.endpoint("openai-chat@2", "openai/gpt-4o@2024-08").route
    assert (openai.settings.concurrency, openai.settings.read_timeout_s) == (3, 90)
    assert isinstance(openai.credential, Secret) and openai.credential.reveal() == ENV["MY_OPENAI_KEY"]
    mini = routes.endpoint("openai-chat@2", "openai/gpt-4o-mini@2024-07").route.credential
    assert isinstance(mini, Secret) and mini.reveal() == "sk-planted-mini-123456"
    assert all("planted" not in line for line in routes.describe())


def test_the_json_form_is_the_same(config_file: Path, tmp_path: Path) -> None:
    import tomllib

    path = tmp_path / "providers.json"
    path.write_text(json.dumps(tomllib.loads(config_file.read_text())))
    assert load_provider_file(path) == load_provider_file(config_file)


def test_requests_carry_each_schemes_credential(config_file: Path) -> None:
    routes = resolve_routes(load_provider_file(config_file), ENV)
    cases = {
        "openai-chat@2": ("openai/gpt-4o@2024-08", "authorization", f"Bearer {ENV['MY_OPENAI_KEY']}"),
        "anthropic-messages@2": ("anthropic/claude-sonnet-4@2025-05", "x-api-key", ENV["ANTHROPIC_API_KEY"]),
        "gemini@2": ("google/gemini-2.5-pro@2025-06", "x-goog-api-key", ENV["GEMINI_API_KEY"]),
    }
    for adapter, (model, header, value) in cases.items():
        request = send_request(routes.endpoint(adapter, model), manifest(adapter, model), "key-1")
        assert request.headers[header] == value and request.headers["idempotency-key"] == "key-1"
        assert value not in repr(request)
    gemini = send_request(
        routes.endpoint("gemini@2", "google/gemini-2.5-pro@2025-06"),
        manifest("gemini@2", "google/gemini-2.5-pro@2025-06"),
        "",
    )
    assert gemini.url == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    )
    assert "key=" not in gemini.url
    anthropic = send_request(
        routes.endpoint("anthropic-messages@2", "anthropic/claude-sonnet-4@2025-05"),
        manifest("anthropic-messages@2", "anthropic/claude-sonnet-4@2025-05"),
        "",
    )
    assert anthropic.headers["anthropic-version"] == "2023-06-01"


def test_bedrock_is_signed_by_botocore_with_the_session_token(config_file: Path) -> None:
    routes = resolve_routes(load_provider_file(config_file), ENV)
    model = "bedrock/anthropic.claude-sonnet-4-20250514-v1:0@2025-05"
    endpoint = routes.endpoint("bedrock-converse@1", model)
    assert isinstance(endpoint.route.credential, AwsCredentials)
    request = send_request(endpoint, manifest("bedrock-converse@1", model, '{"messages":[]}'), "k")
    assert request.url == (
        "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-sonnet-4-20250514-v1%3A0/converse-stream"
    )
    auth = request.headers["Authorization"]
    assert re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=AKIAPLANTED000111/\d{8}/eu-west-1/bedrock/aws4_request, "
        r"SignedHeaders=[a-z0-9;-]+, Signature=[0-9a-f]{64}",
        auth,
    )
    assert request.headers["X-Amz-Security-Token"] == ENV["AWS_SESSION_TOKEN"]
    assert ENV["AWS_SECRET_ACCESS_KEY"] not in json.dumps(dict(request.headers))


def test_resume_only_where_the_profile_keeps_responses() -> None:
    routes = endpoints_for("http://127.0.0.1:1", {"OPENAI_API_KEY": "sk-resume-000000"})
    responses = routes.endpoint("openai-responses@2", "openai/gpt-4.1@2025-04")
    resume = resume_request(responses, "resp_1")
    assert resume is not None and resume.method == "GET"
    assert resume.url == "http://127.0.0.1:1/v1/responses/resp_1?stream=true"
    assert resume.headers["authorization"] == "Bearer sk-resume-000000"
    for adapter, model in (
        ("openai-chat@2", "openai/gpt-4o@2024-08"),
        ("gemini@2", "google/gemini-2.5-pro@2025-06"),
    ):
        assert resume_request(routes.endpoint(adapter, model), "h") is None
    assert responses.resumable('{"stream":true,"background":true}')
    assert not responses.resumable('{"stream":true}')
    gemini = routes.endpoint("gemini@2", "google/gemini-2.5-pro@2025-06")
    assert gemini.streams("{}")  # streams by endpoint


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "base_url": "ftp://x", "adapters": ["gemini"]}, "http"),
        ({"name": "x", "base_url": "http://x", "adapters": ["nope@1"]}, "unknown adapter"),
        (
            {"name": "x", "base_url": "http://x", "adapters": ["gemini", "openai-chat"]},
            "authenticate differently",
        ),
        (
            {"name": "x", "base_url": "http://x", "adapters": ["gemini"], "headers": {"Authorization": "k"}},
            "not headers",
        ),
        ({"name": "x", "base_url": "http://x", "adapters": ["gemini"], "concurrency": 0}, "concurrency"),
        (
            {"name": "x", "base_url": "http://x", "adapters": ["gemini"], "aws_profile": "p"},
            "Bedrock routes only",
        ),
        ({"name": "x", "base_url": "http://x", "adapters": ["gemini"], "api_key": "inline"}, "unknown keys"),
    ],
)
def test_bad_files_are_refused_with_the_key_named(entry: dict, message: str) -> None:  # type: ignore[type-arg]
    from turnledger.gateway.provider_config import parse_provider_config

    with pytest.raises(ProviderConfigError, match=message):
        parse_provider_config({"routes": [entry]})


def test_a_named_credential_that_is_missing_is_a_configuration_error(config_file: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "MY_OPENAI_KEY"}
    with pytest.raises(ProviderConfigError, match="MY_OPENAI_KEY is not set") as refused:
        load_routes(config_file, None, env)
    assert not any(v in str(refused.value) for v in ENV.values())


def test_base_url_mode_sends_what_it_has() -> None:
    routes = endpoints_for("http://127.0.0.1:1", {"GOOGLE_API_KEY": "AIza-google-000000"})
    gemini = routes.endpoint("gemini@1", "google/gemini-2.5-pro@2025-06")
    assert isinstance(gemini.route.credential, Secret)
    chat = routes.endpoint("openai-chat@1", "openai/gpt-4o@2024-08")
    assert chat.route.credential is None
    request = send_request(chat, manifest("openai-chat@1", "openai/gpt-4o@2024-08"), "")
    assert "authorization" not in request.headers


def test_secrets_never_print_and_logs_are_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    secret = Secret("sk-never-printed-424242")
    assert "sk-never" not in repr(secret) + str(secret) + f"{secret}" + repr([secret])
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(secret)
    log = logging.getLogger("test.redaction")
    caplog.handler.addFilter(RedactingFilter())
    try:
        log.warning("header was Bearer %s", "sk-never-printed-424242")
        try:
            raise RuntimeError("transport said sk-never-printed-424242")
        except RuntimeError:
            log.exception("failed")
    finally:
        caplog.handler.removeFilter(caplog.handler.filters[-1])
    assert "sk-never-printed-424242" not in caplog.text
    assert "Bearer ***" in caplog.text and "transport said ***" in caplog.text
    assert REDACTOR.scrub("x sk-never-printed-424242 y") == "x *** y"
