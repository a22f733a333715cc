"""Routes matched and endpoints derived, each outcome exact: the most specific route wins (a model
revision over any model, then an adapter id over its whole API, then the first configured), the
refusal names what is configured, a route's slots, timeouts and cool-down, an endpoint's URLs,
headers, region and replay rule, and the start-up lines (gateway/endpoints.py)."""

from __future__ import annotations

import sys

import httpx
import pytest

from turnledger.gateway.credentials import Secret
from turnledger.gateway.endpoints import (
    LONGEST_COOL_DOWN_S,
    ProviderRoute,
    ProviderRoutes,
    RouteSettings,
    UnknownEndpointError,
    endpoints_for,
    shown_url,
)

GPT = "openai/gpt-4o@2024-08"
MINI = "openai/gpt-4o-mini@2024-07"


def route(name: str, adapters: tuple[str, ...], models: tuple[str, ...] = ()) -> ProviderRoute:
    return ProviderRoute(RouteSettings(name, f"https://{name}.example", adapters, models), None)


def test_specificity_a_model_revision_first_then_an_adapter_id_over_its_api() -> None:
    any_model = RouteSettings("any", "https://any.example", ("openai-chat@2", "openai-responses"))
    assert any_model.specificity("openai-chat@2", GPT) == (0, 2)
    assert any_model.specificity("openai-responses@2", GPT) == (0, 1)
    assert any_model.specificity("openai-chat@1", GPT) is None  # another version of a named id
    assert any_model.specificity("gemini@2", GPT) is None
    one_model = RouteSettings("one", "https://one.example", ("openai-chat@2", "openai-responses"), (MINI,))
    assert one_model.specificity("openai-chat@2", MINI) == (1, 2)
    assert one_model.specificity("openai-responses@2", MINI) == (1, 1)
    assert one_model.specificity("openai-chat@2", GPT) is None


def test_the_most_specific_route_wins_then_the_first_configured() -> None:
    api_any = route("api-any", ("openai-chat",))
    id_any = route("id-any", ("openai-chat@2",))
    api_model = route("api-model", ("openai-chat",), (MINI,))
    id_model = route("id-model", ("openai-chat@2",), (MINI,))
    api_any_later = route("api-any-later", ("openai-chat",))
    every = ProviderRoutes([api_any, id_any, api_model, id_model, api_any_later])
    assert every.endpoint("openai-chat@2", MINI).route is id_model
    assert every.endpoint("openai-chat@1", MINI).route is api_model  # its model, though not its id
    assert every.endpoint("openai-chat@2", GPT).route is id_any
    assert every.endpoint("openai-chat@1", GPT).route is api_any  # of two equals, the first
    # a model revision outweighs an adapter id, whichever comes first
    assert ProviderRoutes([id_any, api_model]).endpoint("openai-chat@2", MINI).route is api_model
    assert ProviderRoutes([api_model, id_any]).endpoint("openai-chat@2", MINI).route is api_model
    # an adapter id outweighs its API, whichever comes first
    assert ProviderRoutes([api_any, id_any]).endpoint("openai-chat@2", GPT).route is id_any
    assert ProviderRoutes([id_any, api_any]).endpoint("openai-chat@2", GPT).route is id_any
    assert ProviderRoutes([api_any_later, api_any]).endpoint("openai-chat@2", GPT).route is api_any_later


def test_no_route_is_refused_naming_the_adapter_the_model_and_what_is_configured() -> None:
    routes = ProviderRoutes(
        [route("b", ("openai-chat@2", "anthropic-messages")), route("a", ("openai-chat@2",), (MINI,))]
    )
    with pytest.raises(UnknownEndpointError) as refused:
        routes.endpoint("gemini@2", "google/gemini-2.5-pro@2025-06")
    assert str(refused.value) == (
        "no provider endpoint configured for adapter gemini@2 (model google/gemini-2.5-pro@2025-06); "
        "configured: ['anthropic-messages', 'openai-chat@2']"
    )
    with pytest.raises(UnknownEndpointError) as none:
        ProviderRoutes([]).endpoint("openai-chat@2", GPT)
    assert str(none.value) == (
        f"no provider endpoint configured for adapter openai-chat@2 (model {GPT}); configured: []"
    )


def test_a_route_has_its_slots_its_timeouts_and_a_cool_down_per_model_that_only_grows() -> None:
    settings = RouteSettings(
        "slow", "https://slow.example", ("gemini",), connect_timeout_s=1.5, read_timeout_s=30.0, concurrency=3
    )
    slow = ProviderRoute(settings, None)
    assert (slow.name, slow.slots._value) == ("slow", 3)
    timeout = slow.timeout
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (1.5, 30.0, 30.0, 30.0)
    pro, flash = "gemini-2.5-pro", "gemini-2.5-flash"
    assert (slow.cooling_until(pro), slow.cooling_until(flash)) == (0.0, 0.0)
    slow.cool_down(pro, 5.0, 100.0)
    assert (slow.cooling_until(pro), slow.cooling_until(flash)) == (105.0, 0.0)
    slow.cool_down(pro, 1.0, 100.0)  # an earlier end does not shorten the wait
    assert slow.cooling_until(pro) == 105.0
    slow.cool_down(pro, 10.0, 100.0)
    assert (slow.cooling_until(pro), slow.cooling_until(flash)) == (110.0, 0.0)
    slow.cool_down(flash, 0.25, 0.5)  # a first wait is its own end, however early
    assert (slow.cooling_until(pro), slow.cooling_until(flash)) == (110.0, 0.75)
    assert repr(slow) == "<ProviderRoute slow https://slow.example ['gemini']>"


def test_a_route_holds_a_model_back_for_an_hour_at_most_whatever_the_delay() -> None:
    """Before, `retry-after: 1e999` (the longest pause) closed the model on the route until the worker
    restarted: every later operation of it gave up at once."""
    route = ProviderRoute(RouteSettings("r", "https://r.example", ("gemini",)), None)
    route.cool_down("pro", sys.float_info.max, 100.0)
    assert route.cooling_until("pro") == 100.0 + LONGEST_COOL_DOWN_S == 3700.0
    route.cool_down("flash", 3599.5, 100.0)
    assert route.cooling_until("flash") == 3699.5
    route.cool_down("flash", 1e9, 200.0)
    assert route.cooling_until("flash") == 3800.0
    default = ProviderRoute(RouteSettings("d", "https://d.example", ("gemini",)), None)
    assert (default.slots._value, default.timeout) == (64, httpx.Timeout(60.0, connect=5.0))


def test_an_endpoint_joins_its_route_and_its_profile() -> None:
    settings = RouteSettings(
        "anthropic",
        "https://proxy.example/anthropic/",
        ("anthropic-messages",),
        headers={"anthropic-version": "2024-01-01", "x-team": "ledger"},
    )
    endpoint = ProviderRoutes([ProviderRoute(settings, None)]).endpoint(
        "anthropic-messages@2", "anthropic/claude-sonnet-4@2025-05"
    )
    assert (endpoint.api, endpoint.model, endpoint.auth) == (
        "anthropic-messages",
        "claude-sonnet-4",
        "x-api-key",
    )
    assert endpoint.base_url == "https://proxy.example/anthropic"
    assert endpoint.url == "https://proxy.example/anthropic/v1/messages"
    assert endpoint.headers == {"anthropic-version": "2024-01-01", "x-team": "ledger"}  # the route's win
    assert endpoint.region == "us-east-1"
    assert (endpoint.cancel_url("msg/1"), endpoint.resume_url("msg/1")) == (None, None)
    plain = ProviderRoutes([route("a", ("anthropic-messages",))]).endpoint(
        "anthropic-messages@2", "anthropic/claude-sonnet-4@2025-05"
    )
    assert plain.headers == {"anthropic-version": "2023-06-01"}  # the profile's, with none of the route's


def test_a_model_is_quoted_into_its_path_and_a_handle_into_its_urls() -> None:
    gemini = ProviderRoutes([route("g", ("gemini",))]).endpoint("gemini@2", "google/gemini 2.5/pro@2025-06")
    assert gemini.url == "https://g.example/v1beta/models/gemini%202.5%2Fpro:streamGenerateContent?alt=sse"
    responses = ProviderRoutes([route("r", ("openai-responses",))]).endpoint("openai-responses@2", GPT)
    assert responses.resume_url("resp/1") == "https://r.example/v1/responses/resp%2F1?stream=true"
    assert responses.cancel_url("resp/1") == "https://r.example/v1/responses/resp%2F1/cancel"


def test_the_region_is_the_routes_else_the_default() -> None:
    settings = RouteSettings("b", "https://b.example", ("bedrock-converse",), aws_region="eu-west-1")
    model = "bedrock/anthropic.claude-sonnet-4@2025-05"
    assert ProviderRoutes([ProviderRoute(settings, None)]).endpoint("bedrock-converse@1", model).region == (
        "eu-west-1"
    )
    default = ProviderRoutes([route("b", ("bedrock-converse",))]).endpoint("bedrock-converse@1", model)
    assert default.region == "us-east-1"


@pytest.mark.parametrize(("keeps", "replayable"), [(None, False), (True, True), (False, False)])
def test_a_route_may_say_its_provider_keeps_idempotency_keys_else_the_profile_decides(
    keeps: bool | None, replayable: bool
) -> None:
    settings = RouteSettings("r", "https://r.example", ("openai-responses",), keeps_idempotency_keys=keeps)
    endpoint = ProviderRoutes([ProviderRoute(settings, None)]).endpoint("openai-responses@2", GPT)
    assert endpoint.profile.keeps_idempotency_keys is False
    assert endpoint.replayable is replayable


def test_streams_and_resumable_read_the_exact_body_and_only_an_object() -> None:
    chat = ProviderRoutes([route("c", ("openai-chat",))]).endpoint("openai-chat@2", GPT)
    assert [chat.streams(b) for b in ('{"stream":true}', '{"stream":false}', "{}", "[1]", "not json")] == [
        True,
        False,
        False,
        False,
        False,
    ]
    responses = ProviderRoutes([route("r", ("openai-responses",))]).endpoint("openai-responses@2", GPT)
    bodies = ('{"stream":true,"background":true}', '{"stream":true}', '[{"stream":true}]', "{")
    assert [responses.resumable(b) for b in bodies] == [True, False, False, False]
    gemini = ProviderRoutes([route("g", ("gemini",))]).endpoint("gemini@2", "google/gemini-2.5-pro@2025-06")
    assert (gemini.streams("{}"), gemini.streams("[1]"), gemini.resumable("{}")) == (True, True, False)


def test_one_start_up_line_per_route_without_a_credential_value() -> None:
    secret = "sk-describe-000111222"
    with_models = ProviderRoute(
        RouteSettings("mini", "https://mini.example", ("openai-chat@2", "openai-responses"), (MINI, GPT)),
        Secret(secret),
    )
    plain = ProviderRoute(
        RouteSettings(
            "gemini",
            "https://g.example",
            ("gemini",),
            connect_timeout_s=1.5,
            read_timeout_s=30.0,
            concurrency=3,
        ),
        None,
    )
    assert ProviderRoutes([with_models, plain]).describe() == [
        "mini: https://mini.example for ['openai-chat@2', 'openai-responses'] models "
        f"['{MINI}', '{GPT}']; credential set; concurrency 64; timeouts 5.0s/60.0s",
        "gemini: https://g.example for ['gemini']; no credential; concurrency 3; timeouts 1.5s/30.0s",
    ]
    assert ProviderRoutes([]).describe() == []


def test_one_base_url_serves_every_api_with_the_credentials_env_names() -> None:
    bare = endpoints_for("http://127.0.0.1:1/")
    assert [r.name for r in bare.routes] == [
        "anthropic-messages",
        "openai-chat",
        "openai-responses",
        "gemini",
        "bedrock-converse",
    ]
    assert [r.credential for r in bare.routes] == [None] * 5
    assert [bare.endpoint(f"{r.name}@1", GPT).replayable for r in bare.routes] == [False] * 5
    keyed = endpoints_for("http://127.0.0.1:1/", {"OPENAI_API_KEY": "sk-env-000111"})
    chat = keyed.endpoint("openai-chat@2", GPT)
    assert isinstance(chat.route.credential, Secret) and chat.route.credential.reveal() == "sk-env-000111"
    assert chat.url == "http://127.0.0.1:1/v1/chat/completions"
    keeping = endpoints_for("http://127.0.0.1:1", {}, keeps_idempotency_keys=True)
    assert [keeping.endpoint(f"{r.name}@1", GPT).replayable for r in keeping.routes] == [True] * 5


def test_a_route_header_replaces_the_profiles_whatever_its_case() -> None:
    """HTTP header names ignore case: a route's `Anthropic-Version` replaces the profile's default
    rather than going out beside it as a second value."""
    settings = RouteSettings(
        "a", "https://a.example", ("anthropic-messages",), headers={"Anthropic-Version": "2024-01-01"}
    )
    endpoint = ProviderRoutes([ProviderRoute(settings, None)]).endpoint(
        "anthropic-messages@2", "anthropic/claude-sonnet-4@2025-05"
    )
    assert endpoint.headers == {"Anthropic-Version": "2024-01-01"}
    sent = httpx.Request("POST", endpoint.url, headers=endpoint.headers)
    assert sent.headers.get_list("anthropic-version") == ["2024-01-01"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:S3CRET@proxy.example:8443/v1", "https://***@proxy.example:8443/v1"),
        ("https://S3CRET@proxy.example", "https://***@proxy.example"),
        ("http://a@b:c@proxy.example/p@th", "http://***@proxy.example/p@th"),
        ("https://proxy.example/v1?key=x@y", "https://proxy.example/v1?key=x@y"),
        ("https://proxy.example", "https://proxy.example"),
        ("notaurl@x", "notaurl@x"),
        ("https://u:S3CRET@proxy.example/v1?next=http://x", "https://***@proxy.example/v1?next=http://x"),
    ],
)
def test_a_url_is_shown_without_any_user_part(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_routes_are_described_without_the_credentials_in_their_urls() -> None:
    settings = RouteSettings("proxy", "https://u:S3CRET@proxy.example/v1", ("gemini",))
    [line] = ProviderRoutes([ProviderRoute(settings, None)]).describe()
    assert line.startswith("proxy: https://***@proxy.example/v1 for ['gemini']; no credential;")
    assert "S3CRET" not in line
