"""Where each manifest's request bytes go: a route (base URL, credential, timeouts, concurrency)
chosen by adapter and model, and the API's profile (path, framing, auth, resume).

The manifest fixes the bytes, the endpoint fixes the route and the headers. What the
worker may rely on after a disconnect follows from those bytes and the API's profile
alone (adapters/profiles.py), as it does in the real APIs. A worker that resumed a
response the provider did not keep would wait for output that will never come.

Routes are configured by a file or the environment (gateway/provider_config.py). For
a manifest, the most specific route wins: one naming its model revision over one for
any model, one naming its exact adapter id over one naming the whole API; then the
first in the configuration's order. No route: `UnknownEndpointError`, and the worker
settles the operation with a reason naming the adapter instead of leaving it PREPARED.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from turnledger.adapters.base import parse_model_revision
from turnledger.adapters.profiles import AuthScheme, ProviderProfile, api_of, profile_for
from turnledger.errors import GatewayError
from turnledger.gateway.credentials import AwsCredentials, Credential, Secret
from turnledger.gateway.live_credentials import CredentialSupply, FixedCredential
from turnledger.model.manifest import DispatchManifest


class UnknownEndpointError(GatewayError):
    """No route is configured for the manifest's adapter (and model)."""


DEFAULT_AWS_REGION = "us-east-1"


LONGEST_COOL_DOWN_S = 3600.0
"""The longest a route holds a model back for one answer's `Retry-After`. The operation that met the answer
keeps the provider's word whole (a wait past its deadline ends it at once); the operations after it ask
again after this at most, so one garbled or absurd delay (a proxy's `retry-after: 1e999`) does not close
the model on this route until the worker restarts. A provider still throttling answers a new delay."""


@dataclass(frozen=True, slots=True)
class RouteSettings:
    """One route as configured: no secret values here, only where to read them."""

    name: str
    base_url: str
    adapters: tuple[str, ...]  # adapter ids (`api@N`) or whole APIs (`api`)
    models: tuple[str, ...] = ()  # model revisions; empty: any
    headers: Mapping[str, str] = field(default_factory=dict)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    concurrency: int = 64
    aws_region: str | None = None
    keeps_idempotency_keys: bool | None = None
    """The provider behind this route reattaches a request with the same idempotency key to the same
    response (a keeping gateway, the fake provider); None: what the API's profile says."""

    def specificity(self, adapter: str, model_revision: str) -> tuple[int, int] | None:
        """How closely this route matches (higher wins), or None when it does not serve them."""
        if adapter in self.adapters:
            adapter_score = 2
        elif api_of(adapter) in self.adapters:
            adapter_score = 1
        else:
            return None
        if not self.models:
            return (0, adapter_score)
        return (1, adapter_score) if model_revision in self.models else None


class ProviderRoute:
    """A route with its credential resolved, its concurrency limit and its cool-down; shared by its
    endpoints, so every operation of the worker sees what the provider asked of any of them.

    `credential` is a value (read once) or a supply kept current (a watched file, a botocore
    session: gateway/live_credentials.py); `refresh_credential` brings it up to date before a request."""

    def __init__(self, settings: RouteSettings, credential: Credential | CredentialSupply) -> None:
        self.settings = settings
        self._supply: CredentialSupply = (
            FixedCredential(credential)
            if credential is None or isinstance(credential, Secret | AwsCredentials)
            else credential
        )
        self._refreshing = asyncio.Lock()
        self.slots = asyncio.Semaphore(settings.concurrency)
        self.timeout = httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s)
        self._cooldowns: dict[str, float] = {}
        """Per model, the `time.monotonic()` before which no new generation of it is sent here."""

    @property
    def credential(self) -> Credential:
        """The credential requests are signed with now."""
        return self._supply.value

    @property
    def credential_changes(self) -> int:
        """How often a refresh gave the route another credential (0 for one read once)."""
        return self._supply.changes

    async def refresh_credential(self) -> int:
        """Read the credential's source again when it says it is stale (in a thread: a file read, an
        STS call); returns `credential_changes` after it."""
        if self._supply.stale():
            async with self._refreshing:
                if self._supply.stale():
                    await asyncio.to_thread(self._supply.refresh)
        return self._supply.changes

    def cool_down(self, model: str, seconds: float, now: float) -> None:
        """The provider asked to wait `seconds` from `now` after a request for `model`: no new generation
        for that model goes out on this route until then, or for `LONGEST_COOL_DOWN_S` at most. Per
        model, because every provider counts its rate limits and quotas per model: a model throttled for
        hours must not hold the route's others."""
        until = now + min(seconds, LONGEST_COOL_DOWN_S)
        self._cooldowns[model] = max(self._cooldowns.get(model, 0.0), until)

    def cooling_until(self, model: str) -> float:
        """The `time.monotonic()` before which `model` may not be sent here (0.0: it may now)."""
        return self._cooldowns.get(model, 0.0)

    @property
    def name(self) -> str:
        return self.settings.name

    def __repr__(self) -> str:
        return f"<ProviderRoute {self.settings.name} {self.settings.base_url} {list(self.settings.adapters)}>"


def headers_under(defaults: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """`defaults` under `own`: a header `own` names, in any case, replaces the default (HTTP header
    names are case-insensitive, and httpx would send both values)."""
    named = {name.lower() for name in own}
    return {**{k: v for k, v in defaults.items() if k.lower() not in named}, **own}


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """One manifest's destination: its API's profile, the route that serves it, the model to address."""

    profile: ProviderProfile
    route: ProviderRoute
    model: str

    @property
    def api(self) -> str:
        """The stream parser's api name."""
        return self.profile.api

    @property
    def base_url(self) -> str:
        return self.route.settings.base_url.rstrip("/")

    @property
    def url(self) -> str:
        return self.base_url + self.profile.path_for(self.model)

    @property
    def headers(self) -> dict[str, str]:
        """The profile's fixed headers (e.g. anthropic-version) under the route's own, whose names
        replace the profile's in any case (`Anthropic-Version` too); no credential."""
        return headers_under(self.profile.fixed_headers, self.route.settings.headers)

    @property
    def auth(self) -> AuthScheme:
        return self.profile.auth

    @property
    def region(self) -> str:
        return self.route.settings.aws_region or DEFAULT_AWS_REGION

    @property
    def replayable(self) -> bool:
        """May a broken attempt be sent again with its idempotency key, reattaching to the same response?"""
        keeps = self.route.settings.keeps_idempotency_keys
        return self.profile.keeps_idempotency_keys if keeps is None else keeps

    def cancel_url(self, response_handle: str) -> str | None:
        """The URL that stops a kept response at the provider, or None if the API keeps none."""
        path = self.profile.cancel_path(response_handle)
        return None if path is None else self.base_url + path

    def resume_url(self, response_handle: str) -> str | None:
        """The URL that re-reads a kept response from its first event, or None if there is none."""
        path = self.profile.resume_path(response_handle)
        return None if path is None else self.base_url + path

    def streams(self, request_body: str) -> bool:
        """Does this exact request ask for a stream? (Gemini and Bedrock stream by endpoint.)"""
        return self.profile.streams(_body(request_body))

    def resumable(self, request_body: str) -> bool:
        """Can a broken stream of this exact request be read again from its handle?"""
        return self.profile.resumable(_body(request_body))


def _body(request_body: str) -> Mapping[str, Any] | None:
    try:
        body: Any = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


class ProviderRoutes:
    """Every configured route; `endpoint_for` picks one per manifest."""

    def __init__(self, routes: Sequence[ProviderRoute]) -> None:
        self.routes = tuple(routes)

    def endpoint_for(self, manifest: DispatchManifest) -> ProviderEndpoint:
        return self.endpoint(manifest.adapter, manifest.model_revision)

    def endpoint(self, adapter: str, model_revision: str) -> ProviderEndpoint:
        best: tuple[tuple[int, int], int] | None = None
        for position, route in enumerate(self.routes):
            score = route.settings.specificity(adapter, model_revision)
            if score is not None and (best is None or score > best[0]):
                best = (score, position)
        if best is None:
            configured = sorted({a for r in self.routes for a in r.settings.adapters})
            raise UnknownEndpointError(
                f"no provider endpoint configured for adapter {adapter} (model {model_revision}); "
                f"configured: {configured}"
            )
        profile = profile_for(adapter)
        model = parse_model_revision(model_revision).model
        return ProviderEndpoint(profile, self.routes[best[1]], model)

    def describe(self) -> list[str]:
        """One line per route for start-up logs: names, URLs, adapters; never a credential."""
        lines = []
        for route in self.routes:
            s = route.settings
            models = f" models {list(s.models)}" if s.models else ""
            cred = "credential set" if route.credential is not None else "no credential"
            lines.append(
                f"{s.name}: {shown_url(s.base_url)} for {list(s.adapters)}{models}; {cred}; "
                f"concurrency {s.concurrency}; timeouts {s.connect_timeout_s}s/{s.read_timeout_s}s"
            )
        return lines


def shown_url(url: str) -> str:
    """`url` as a log line may show it: any user part (`https://user:key@host`, `https://key@host`) is a
    credential of some proxy, so all of it becomes `***`."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" not in authority:
        return url
    return f"{scheme}://***@{authority.rpartition('@')[2]}{slash}{path}"


def endpoints_for(
    base_url: str, env: Mapping[str, str] | None = None, *, keeps_idempotency_keys: bool | None = None
) -> ProviderRoutes:
    """Every API behind one base URL (the fake provider, or a compatible proxy), with credentials
    from the variables each API's SDK reads (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY,
    AWS_*) in `env`; none when `env` is not given. `keeps_idempotency_keys`: the provider reattaches
    keyed retries (the fake provider does), so broken attempts are replayed rather than restarted."""
    from turnledger.gateway.provider_config import routes_for_base_url

    env = env if env is not None else {}
    return routes_for_base_url(base_url, env, keeps_idempotency_keys=keeps_idempotency_keys)


def process_env() -> Mapping[str, str]:
    return os.environ
