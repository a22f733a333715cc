"""Every refusal of the provider file in its exact words (file, route and key named, never a value),
and what a route's keys resolve to: defaults, credentials by API, AWS sources, the region."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from turnledger.adapters.profiles import PROFILES
from turnledger.adapters.registry import ADAPTERS
from turnledger.gateway.credentials import AwsCredentials, AwsCredentialSource, Secret, SecretSource
from turnledger.gateway.provider_config import (
    PROVIDERS_ENV,
    CredentialSettings,
    ProviderConfigError,
    load_provider_file,
    load_routes,
    parse_provider_config,
    resolve_routes,
    routes_for_base_url,
)

GEMINI = {"name": "g", "base_url": "http://x", "adapters": ["gemini"]}
BEDROCK = {"name": "b", "base_url": "http://x", "adapters": ["bedrock-converse"]}
KNOWN = sorted({*ADAPTERS, *PROFILES})


def refusal(data: Any) -> str:
    with pytest.raises(ProviderConfigError) as refused:
        parse_provider_config(data, "f.toml")
    return str(refused.value)


def g(**over: Any) -> dict[str, Any]:
    """A file of one Gemini route with `over` set."""
    return {"routes": [{**GEMINI, **over}]}


def b(**over: Any) -> dict[str, Any]:
    """A file of one Bedrock route with `over` set."""
    return {"routes": [{**BEDROCK, **over}]}


G, B = "f.toml routes[0] (g)", "f.toml routes[0] (b)"
LIST = "needs a non-empty list `routes`"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], f"f.toml: {LIST}"),
        ({"routes": {}}, f"f.toml: {LIST}"),
        ({"routes": []}, f"f.toml: {LIST}"),
        ({"routes": [GEMINI], "defaults": []}, "f.toml: `defaults` must be a table"),
        ({"routes": [GEMINI], "extra": 1, "more": 2}, "f.toml: unknown keys ['extra', 'more']"),
        ({"routes": [GEMINI, GEMINI]}, "f.toml: route names must be unique, got ['g', 'g']"),
        ({"routes": [GEMINI, "x"]}, "f.toml routes[1]: must be a table"),
        (g(api_key="k"), "f.toml routes[0]: unknown keys ['api_key']"),
        (g(name=""), "f.toml routes[0]: `name` must be a non-empty string"),
        (g(base_url=5), f"{G}: `base_url` must be a non-empty string"),
        (g(base_url="ftp://x"), f"{G}: base_url must be an http(s) URL"),
        (g(adapters=[]), f"{G}: `adapters` must name at least one adapter or API"),
        (g(adapters="gemini"), f"{G}: `adapters` must be a list of strings"),
        (g(adapters=[""]), f"{G}: `adapters` must be a list of strings"),
        (g(adapters=["nope@1"]), f"{G}: unknown adapter or API 'nope@1'; known: {KNOWN}"),
        (g(models=[1]), f"{G}: `models` must be a list of strings"),
        (g(headers={"a": 1}), f"{G}: headers must map strings to strings"),
        (g(headers=["a"]), f"{G}: headers must map strings to strings"),
        (g(headers=None), f"{G}: headers must map strings to strings"),
        (g(headers={"X-Api-Key": "k", "Authorization": "a"}),
         f"{G}: credentials are not headers in this file; use api_key_env or api_key_file "
         "instead of ['authorization', 'x-api-key']"),
        (g(headers={"X-Goog-Api-Key": "k"}),
         f"{G}: credentials are not headers in this file; use api_key_env or api_key_file "
         "instead of ['x-goog-api-key']"),
        (g(read_timeout_s=0), f"{G}: read_timeout_s must be a positive number"),
        (g(read_timeout_s="9"), f"{G}: read_timeout_s must be a positive number"),
        (g(connect_timeout_s=True), f"{G}: connect_timeout_s must be a positive number"),
        (g(concurrency=0), f"{G}: concurrency must be a positive integer"),
        (g(concurrency=1.5), f"{G}: concurrency must be a positive integer"),
        (g(concurrency=True), f"{G}: concurrency must be a positive integer"),
        (g(keeps_idempotency_keys="yes"), f"{G}: keeps_idempotency_keys must be true or false"),
        (g(adapters=["gemini", "openai-chat"]),
         f"{G}: its adapters authenticate differently (['bearer', 'x-goog-api-key']); one route per scheme"),
        (b(api_key_env="K"), f"{B}: Bedrock routes take AWS credentials, not an API key"),
        (b(api_key_file="/k"), f"{B}: Bedrock routes take AWS credentials, not an API key"),
        (b(aws_region=""), f"{B}: aws_region must be a non-empty string"),
        (b(aws_region=1), f"{B}: aws_region must be a non-empty string"),
        (b(aws_profile=""), f"{B}: `aws_profile` must be a non-empty string"),
        (g(aws_profile="p", aws_access_key_id_env="A"),
         f"{G}: ['aws_access_key_id_env', 'aws_profile'] apply to Bedrock routes only"),
        (g(api_key_env="K", api_key_file="/k"), f"{G}: name api_key_env or api_key_file, not both"),
        (g(api_key_file=""), f"{G}: `api_key_file` must be a non-empty string"),
        (g(api_key_env=3), f"{G}: `api_key_env` must be a non-empty string"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_file_the_route_and_the_key(data: Any, message: str) -> None:
    assert refusal(data) == message


def test_the_least_a_route_may_say_and_the_default_place_in_messages() -> None:
    (config,) = parse_provider_config(
        g(read_timeout_s=1, connect_timeout_s=0.5, concurrency=1, aws_region="x")
    )
    route = config.route
    assert (route.read_timeout_s, route.connect_timeout_s, route.concurrency, route.aws_region) == (
        1,
        0.5,
        1,
        "x",
    )
    with pytest.raises(ProviderConfigError) as refused:
        parse_provider_config([])
    assert str(refused.value) == "provider config: needs a non-empty list `routes`"


def test_defaults_apply_to_every_route_and_a_route_overrides_them() -> None:
    data = {
        "defaults": {"read_timeout_s": 90, "concurrency": 2},
        "routes": [GEMINI, {**BEDROCK, "concurrency": 5}],
    }
    gemini, bedrock = parse_provider_config(data)
    assert (gemini.route.read_timeout_s, gemini.route.concurrency) == (90, 2)
    assert (bedrock.route.read_timeout_s, bedrock.route.concurrency) == (90, 5)
    assert (gemini.route.adapters, gemini.route.models) == (("gemini",), ())


def test_an_api_key_route_reads_its_named_source_or_the_sdk_variable() -> None:
    def source(entry: dict[str, Any]) -> CredentialSettings:
        (config,) = parse_provider_config({"routes": [entry]})
        return config.credential

    assert source(GEMINI) == CredentialSettings(api_key=SecretSource(env="GEMINI_API_KEY"))
    chat = {"name": "o", "base_url": "http://x", "adapters": ["openai-chat"]}
    assert source(chat) == CredentialSettings(api_key=SecretSource(env="OPENAI_API_KEY"))
    assert source({**chat, "api_key_env": "MINE"}) == CredentialSettings(api_key=SecretSource(env="MINE"))
    assert source({**chat, "api_key_file": "/run/k"}) == CredentialSettings(
        api_key=SecretSource(file=Path("/run/k"))
    )


def test_a_bedrock_route_names_its_aws_variables_or_a_profile() -> None:
    (plain,) = parse_provider_config({"routes": [BEDROCK]})
    assert plain.credential == CredentialSettings(aws=AwsCredentialSource())
    named = {
        **BEDROCK, "aws_access_key_id_env": "MY_ID", "aws_secret_access_key_env": "MY_SECRET",
        "aws_session_token_env": "MY_TOKEN", "aws_profile": "prod",
    }  # fmt: skip
    (config,) = parse_provider_config({"routes": [named]})
    assert config.credential == CredentialSettings(
        aws=AwsCredentialSource(
            access_key_id=SecretSource(env="MY_ID"),
            secret_access_key=SecretSource(env="MY_SECRET"),
            session_token=SecretSource(env="MY_TOKEN"),
            profile="prod",
        )
    )
    (blank,) = parse_provider_config(
        {"routes": [{**BEDROCK, "aws_access_key_id_env": "", "aws_session_token_env": 1}]}
    )
    assert blank.credential == CredentialSettings(aws=AwsCredentialSource())


AWS = {"AWS_ACCESS_KEY_ID": "AKIAREGION000111", "AWS_SECRET_ACCESS_KEY": "region/secret/222"}


def test_a_bedrock_route_without_a_region_takes_the_environments() -> None:
    configs = parse_provider_config({"routes": [BEDROCK]})
    assert (
        resolve_routes(configs, {**AWS, "AWS_DEFAULT_REGION": "eu-west-3"}).routes[0].settings.aws_region
        == "eu-west-3"
    )
    both = {**AWS, "AWS_REGION": "eu-north-1", "AWS_DEFAULT_REGION": "eu-west-3"}
    assert resolve_routes(configs, both).routes[0].settings.aws_region == "eu-north-1"
    assert resolve_routes(configs, {**AWS, "AWS_REGION": ""}).routes[0].settings.aws_region is None
    named = parse_provider_config(b(aws_region="ap-south-1"))
    assert resolve_routes(named, both).routes[0].settings.aws_region == "ap-south-1"
    credential = resolve_routes(configs, AWS).routes[0].credential
    assert isinstance(credential, AwsCredentials) and credential.access_key_id.reveal() == "AKIAREGION000111"


def test_a_missing_credential_of_a_file_route_is_refused_by_name() -> None:
    with pytest.raises(ProviderConfigError) as missing_key:
        resolve_routes(parse_provider_config(g(api_key_env="MISSING_KEY")), {})
    assert str(missing_key.value) == "route g: the credential environment variable MISSING_KEY is not set"
    with pytest.raises(ProviderConfigError) as refused:
        resolve_routes(parse_provider_config({"routes": [BEDROCK]}), {})
    assert str(refused.value) == (
        "route b: AWS credentials not set "
        "(environment variable AWS_ACCESS_KEY_ID and environment variable AWS_SECRET_ACCESS_KEY)"
    )


def test_the_base_url_mode_takes_each_apis_sdk_variable_and_goes_without_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="turnledger.gateway.provider_config"):
        routes = routes_for_base_url("http://127.0.0.1:9", {"GOOGLE_API_KEY": "AIza-base-url-000111", **AWS})
    without = sorted(set(PROFILES) - {"gemini", "bedrock-converse"})
    assert [r.getMessage() for r in caplog.records] == [
        f"route {name}: no credential in the environment; requests go without one"
        for name in PROFILES
        if name in without
    ]
    by_name = {route.name: route for route in routes.routes}
    assert sorted(by_name) == sorted(PROFILES)
    gemini = by_name["gemini"].credential
    assert isinstance(gemini, Secret) and gemini.reveal() == "AIza-base-url-000111"
    assert by_name["openai-chat"].credential is None
    assert isinstance(by_name["bedrock-converse"].credential, AwsCredentials)
    both = routes_for_base_url(
        "http://x", {"GEMINI_API_KEY": "AIza-first-222333", "GOOGLE_API_KEY": "AIza-second"}
    )
    first = {route.name: route for route in both.routes}["gemini"].credential
    assert isinstance(first, Secret) and first.reveal() == "AIza-first-222333"
    kept = routes_for_base_url("http://x", {}, keeps_idempotency_keys=True)
    assert {route.settings.keeps_idempotency_keys for route in kept.routes} == {True}


def test_files_that_cannot_be_read_or_parsed_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(ProviderConfigError) as unreadable:
        load_provider_file(missing)
    assert str(unreadable.value) == f"{missing}: cannot read the provider file (No such file or directory)"
    bad_toml = tmp_path / "p.toml"
    bad_toml.write_text("routes = [")
    with pytest.raises(ProviderConfigError, match=rf"^{bad_toml}: not valid toml: "):
        load_provider_file(bad_toml)
    for name in ("p.json", "providers"):
        bad_json = tmp_path / name
        bad_json.write_text("{")
        kind = "json" if name.endswith(".json") else "JSON"
        with pytest.raises(ProviderConfigError, match=rf"^{bad_json}: not valid {kind}: "):
            load_provider_file(bad_json)
    no_routes = tmp_path / "empty.toml"
    no_routes.write_text("")
    with pytest.raises(ProviderConfigError) as empty:
        load_provider_file(no_routes)
    assert str(empty.value) == f"{no_routes}: needs a non-empty list `routes`"


def test_without_a_file_or_a_url_the_worker_is_told_both_ways() -> None:
    with pytest.raises(ProviderConfigError) as refused:
        load_routes(None, None, {})
    assert str(refused.value) == (
        f"no providers configured: pass --providers FILE (or set {PROVIDERS_ENV}) or --provider-url URL"
    )
    assert PROVIDERS_ENV == "TURNLEDGER_PROVIDERS"
    routes = load_routes(None, "http://x", {}, keeps_idempotency_keys=True).routes
    assert {route.name for route in routes} == set(PROFILES)
    assert {(route.settings.base_url, route.settings.keeps_idempotency_keys) for route in routes} == {
        ("http://x", True)
    }


@pytest.mark.parametrize("url", ["http://fake:8790", "https://proxy.example/v1"])
def test_a_provider_url_over_http_or_https_serves_every_api(url: str) -> None:
    routes = load_routes(None, url, {}).routes
    assert {route.settings.base_url for route in routes} == {url}


@pytest.mark.parametrize(
    ("url", "shown"),
    [("notaurl", "notaurl"), ("", ""), ("ftp://u:S3CRET@h/x", "ftp://***@h/x"), ("HTTP://h", "HTTP://h")],
)
def test_a_provider_url_that_is_not_http_is_refused_without_its_credentials(url: str, shown: str) -> None:
    with pytest.raises(ProviderConfigError) as refused:
        load_routes(None, url, {})
    assert str(refused.value) == f"--provider-url {shown!r}: must be an http(s) URL"
