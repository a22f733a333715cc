"""Provider routes from a file (TOML or JSON) and the environment.

The file (`--providers FILE`, or `TURNLEDGER_PROVIDERS`) lists routes; each says which
adapters (and, optionally, which model revisions) it serves, where, with which
credential, timeouts and concurrency, so one worker sends to several providers at
once. A credential is named, never written: `api_key_env` (a variable) or
`api_key_file` (a file holding only the key); Bedrock routes name AWS variables or a
botocore profile and a region. A credential a route names but the environment lacks is
a configuration error at start-up (the message names the variable, never a value).

    [defaults]                      # optional; every route key but name/base_url/adapters
    read_timeout_s = 60

    [[routes]]
    name = "openai"
    base_url = "https://api.openai.com"
    adapters = ["openai-chat", "openai-responses@2"]   # a whole API, or one adapter version
    api_key_env = "OPENAI_API_KEY"
    concurrency = 32

    [[routes]]
    name = "anthropic"
    base_url = "https://api.anthropic.com"
    adapters = ["anthropic-messages"]
    api_key_env = "ANTHROPIC_API_KEY"
    headers = { "anthropic-version" = "2023-06-01" }

    [[routes]]
    name = "gemini"
    base_url = "https://generativelanguage.googleapis.com"
    adapters = ["gemini"]
    api_key_file = "/run/secrets/gemini"

    [[routes]]
    name = "bedrock"
    base_url = "https://bedrock-runtime.eu-west-1.amazonaws.com"
    adapters = ["bedrock-converse"]
    aws_region = "eu-west-1"        # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN
                                    # unless aws_*_env or aws_profile say otherwise

The JSON form is the same object (`{"defaults": {...}, "routes": [...]}`).

Without a file (`--provider-url URL`): every API behind that one base URL, credentials
from the variables the official SDKs read; an unset one is sent without a credential
(and logged as such, by name), since a local fake or an auth-adding proxy needs none.
"""

from __future__ import annotations

import json
import logging
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from turnledger.adapters.profiles import PROFILES, AuthScheme, profile_for
from turnledger.adapters.registry import ADAPTERS
from turnledger.errors import GatewayError, InputFileError
from turnledger.gateway.credentials import AwsCredentialSource, CredentialError, SecretSource
from turnledger.gateway.endpoints import ProviderRoute, ProviderRoutes, RouteSettings, shown_url
from turnledger.gateway.live_credentials import CredentialSupply, supply_of_aws, supply_of_key

log = logging.getLogger(__name__)

PROVIDERS_ENV = "TURNLEDGER_PROVIDERS"

DEFAULT_KEY_ENV: Mapping[AuthScheme, tuple[str, ...]] = {
    AuthScheme.BEARER: ("OPENAI_API_KEY",),
    AuthScheme.X_API_KEY: ("ANTHROPIC_API_KEY",),
    AuthScheme.GOOG_API_KEY: ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
AWS_REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")


class ProviderConfigError(InputFileError, GatewayError):
    """The provider configuration is unusable; names the file, the route and the key."""


@dataclass(frozen=True)
class CredentialSettings:
    """Where a route's credential is: an API key source, or AWS credentials (Bedrock)."""

    api_key: SecretSource | None = None
    aws: AwsCredentialSource | None = None
    required: bool = True  # a file route that names a credential must have it


@dataclass(frozen=True)
class RouteConfig:
    route: RouteSettings
    credential: CredentialSettings = field(default_factory=CredentialSettings)


_ROUTE_KEYS = {f.name for f in fields(RouteSettings)} - {"name", "base_url", "adapters", "models"}
_CREDENTIAL_KEYS = {
    "api_key_env",
    "api_key_file",
    "aws_access_key_id_env",
    "aws_secret_access_key_env",
    "aws_session_token_env",
    "aws_profile",
}


def load_provider_file(path: Path) -> list[RouteConfig]:
    """Read and check a provider file (`.toml`, else JSON)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProviderConfigError(f"{path}: cannot read the provider file ({exc.strerror})") from None
    try:
        data: Any = tomllib.loads(raw.decode("utf-8")) if path.suffix == ".toml" else json.loads(raw)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise ProviderConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    return parse_provider_config(data, str(path))


def parse_provider_config(data: Any, where: str = "provider config") -> list[RouteConfig]:
    if not isinstance(data, dict) or not isinstance(data.get("routes"), list) or not data["routes"]:
        raise ProviderConfigError(f"{where}: needs a non-empty list `routes`")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ProviderConfigError(f"{where}: `defaults` must be a table")
    unknown = set(data) - {"routes", "defaults"}
    if unknown:
        raise ProviderConfigError(f"{where}: unknown keys {sorted(unknown)}")
    configs = [
        _route({**defaults, **entry} if isinstance(entry, dict) else entry, f"{where} routes[{i}]")
        for i, entry in enumerate(data["routes"])
    ]
    names = [c.route.name for c in configs]
    if len(set(names)) != len(names):
        raise ProviderConfigError(f"{where}: route names must be unique, got {names}")
    return configs


def _route(entry: Any, where: str) -> RouteConfig:
    if not isinstance(entry, dict):
        raise ProviderConfigError(f"{where}: must be a table")
    unknown = set(entry) - _ROUTE_KEYS - _CREDENTIAL_KEYS - {"name", "base_url", "adapters", "models"}
    if unknown:
        raise ProviderConfigError(f"{where}: unknown keys {sorted(unknown)}")
    name = _string(entry, "name", where)
    where = f"{where} ({name})"
    base_url = _string(entry, "base_url", where)
    if not base_url.startswith(("http://", "https://")):
        raise ProviderConfigError(f"{where}: base_url must be an http(s) URL")
    adapters = _strings(entry, "adapters", where)
    if not adapters:
        raise ProviderConfigError(f"{where}: `adapters` must name at least one adapter or API")
    for adapter in adapters:
        if adapter not in ADAPTERS and adapter not in PROFILES:
            raise ProviderConfigError(
                f"{where}: unknown adapter or API {adapter!r}; known: {sorted({*ADAPTERS, *PROFILES})}"
            )
    options: dict[str, Any] = {k: entry[k] for k in _ROUTE_KEYS if k in entry}
    models = tuple(_strings(entry, "models", where))
    settings = RouteSettings(name=name, base_url=base_url, adapters=tuple(adapters), models=models, **options)
    _check_settings(settings, where)
    return RouteConfig(settings, _credential_settings(entry, settings, where))


def _check_settings(s: RouteSettings, where: str) -> None:
    if not isinstance(s.headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in s.headers.items()
    ):
        raise ProviderConfigError(f"{where}: headers must map strings to strings")
    credential_headers = {"authorization", "x-api-key", "x-goog-api-key"} & {k.lower() for k in s.headers}
    if credential_headers:
        raise ProviderConfigError(
            f"{where}: credentials are not headers in this file; use api_key_env or api_key_file "
            f"instead of {sorted(credential_headers)}"
        )
    for key in ("connect_timeout_s", "read_timeout_s"):
        value = getattr(s, key)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ProviderConfigError(f"{where}: {key} must be a positive number")
    if not isinstance(s.concurrency, int) or isinstance(s.concurrency, bool) or s.concurrency < 1:
        raise ProviderConfigError(f"{where}: concurrency must be a positive integer")
    if s.aws_region is not None and (not isinstance(s.aws_region, str) or not s.aws_region):
        raise ProviderConfigError(f"{where}: aws_region must be a non-empty string")
    if s.keeps_idempotency_keys is not None and not isinstance(s.keeps_idempotency_keys, bool):
        raise ProviderConfigError(f"{where}: keeps_idempotency_keys must be true or false")
    schemes = {profile_for(a).auth for a in s.adapters}
    if len(schemes) > 1:
        raise ProviderConfigError(
            f"{where}: its adapters authenticate differently ({sorted(s.value for s in schemes)}); "
            "one route per scheme"
        )


def _credential_settings(entry: dict[str, Any], s: RouteSettings, where: str) -> CredentialSettings:
    scheme = profile_for(s.adapters[0]).auth
    if scheme is AuthScheme.AWS_SIGV4:
        if "api_key_env" in entry or "api_key_file" in entry:
            raise ProviderConfigError(f"{where}: Bedrock routes take AWS credentials, not an API key")
        defaults = AwsCredentialSource()
        aws = AwsCredentialSource(
            access_key_id=_source(entry, "aws_access_key_id_env", defaults.access_key_id),
            secret_access_key=_source(entry, "aws_secret_access_key_env", defaults.secret_access_key),
            session_token=(
                SecretSource(env=entry["aws_session_token_env"])
                if isinstance(entry.get("aws_session_token_env"), str)
                else defaults.session_token
            ),
            profile=_optional_string(entry, "aws_profile", where),
        )
        return CredentialSettings(aws=aws)
    aws_keys = sorted(k for k in entry if k.startswith("aws_") and k != "aws_region")
    if aws_keys:
        raise ProviderConfigError(f"{where}: {aws_keys} apply to Bedrock routes only")
    if "api_key_env" in entry and "api_key_file" in entry:
        raise ProviderConfigError(f"{where}: name api_key_env or api_key_file, not both")
    if "api_key_file" in entry:
        source = SecretSource(file=Path(_string(entry, "api_key_file", where)))
    else:
        source = SecretSource(env=_optional_string(entry, "api_key_env", where) or DEFAULT_KEY_ENV[scheme][0])
    return CredentialSettings(api_key=source)


def _source(entry: dict[str, Any], key: str, default: SecretSource) -> SecretSource:
    value = entry.get(key)
    return SecretSource(env=value) if isinstance(value, str) and value else default


def _string(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise ProviderConfigError(f"{where}: `{key}` must be a non-empty string")
    return value


def _optional_string(entry: dict[str, Any], key: str, where: str) -> str | None:
    return _string(entry, key, where) if key in entry else None


def _strings(entry: dict[str, Any], key: str, where: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ProviderConfigError(f"{where}: `{key}` must be a list of strings")
    return list(value)


# -- resolution ---------------------------------------------------------------------------


def resolve_routes(configs: list[RouteConfig], env: Mapping[str, str]) -> ProviderRoutes:
    """Read every credential the routes name; a missing required one is a configuration error."""
    routes = []
    for config in configs:
        try:
            credential = _read_credential(config.credential, env, config.route.name)
        except CredentialError as exc:
            raise ProviderConfigError(str(exc)) from None
        route = config.route
        if config.credential.aws is not None and route.aws_region is None:
            region = next((env[k] for k in AWS_REGION_ENV if env.get(k)), None)
            route = _with_region(route, region)
        routes.append(ProviderRoute(route, credential))
    return ProviderRoutes(routes)


def _with_region(route: RouteSettings, region: str | None) -> RouteSettings:
    from dataclasses import replace

    return replace(route, aws_region=region) if region else route


def _read_credential(
    settings: CredentialSettings, env: Mapping[str, str], route: str
) -> CredentialSupply | None:
    """The route's credential as a supply kept current (a file watched, a botocore profile refreshed),
    or None; a required one that is missing is a CredentialError naming where it was looked for."""
    purpose = f"route {route}"
    if settings.aws is not None:
        supply = supply_of_aws(settings.aws, env)
        if supply is None and settings.required:
            settings.aws.require(env, purpose)
        return supply
    if settings.api_key is not None:
        found = supply_of_key(settings.api_key, env)
        if found is None and settings.required:
            settings.api_key.require(env, purpose)
        return found
    return None


def routes_for_base_url(
    base_url: str, env: Mapping[str, str], *, keeps_idempotency_keys: bool | None = None
) -> ProviderRoutes:
    """One route per API behind `base_url`, credentials from the SDKs' variables, optional."""
    configs = []
    for api, profile in PROFILES.items():
        settings = RouteSettings(
            name=api, base_url=base_url, adapters=(api,), keeps_idempotency_keys=keeps_idempotency_keys
        )
        if profile.auth is AuthScheme.AWS_SIGV4:
            credential = CredentialSettings(aws=AwsCredentialSource(), required=False)
        else:
            names = DEFAULT_KEY_ENV[profile.auth]
            name = next((n for n in names if env.get(n)), names[0])
            credential = CredentialSettings(api_key=SecretSource(env=name), required=False)
        configs.append(RouteConfig(settings, credential))
    resolved = resolve_routes(configs, env)
    for route in resolved.routes:
        if route.credential is None:
            log.debug("route %s: no credential in the environment; requests go without one", route.name)
    return resolved


def load_routes(
    providers_file: Path | None,
    provider_url: str | None,
    env: Mapping[str, str],
    *,
    keeps_idempotency_keys: bool | None = None,
) -> ProviderRoutes:
    """The worker's routes: the file when given (flag or TURNLEDGER_PROVIDERS), else the base URL
    (`keeps_idempotency_keys` applies to that one; a file says it per route)."""
    if providers_file is not None:
        return resolve_routes(load_provider_file(providers_file), env)
    if provider_url is None:
        raise ProviderConfigError(
            f"no providers configured: pass --providers FILE (or set {PROVIDERS_ENV}) or --provider-url URL"
        )
    if not provider_url.startswith(("http://", "https://")):
        raise ProviderConfigError(f"--provider-url {shown_url(provider_url)!r}: must be an http(s) URL")
    return routes_for_base_url(provider_url, env, keeps_idempotency_keys=keeps_idempotency_keys)
