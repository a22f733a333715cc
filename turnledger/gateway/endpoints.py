"""Where each adapter's request bytes go, and what the provider behind it can do after a disconnect.

The manifest fixes the bytes, the endpoint fixes the route and the headers. What the
worker may rely on after a disconnect follows from those bytes alone, as it does in
the real APIs: only an OpenAI Responses request with `"background": true` and
`"stream": true` is kept by the provider and can be streamed again by its id; every
other stream is gone with its connection. A worker that resumed a response the
provider did not keep would wait for output that will never come.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from turnledger.errors import GatewayError


class UnknownEndpointError(GatewayError):
    """No endpoint is configured for the manifest's adapter."""


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    adapter: str  # e.g. "openai-responses@1"
    base_url: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def api(self) -> str:
        """The stream parser's api name: the adapter id without its version."""
        return self.adapter.partition("@")[0]

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.path

    def resume_url(self, response_handle: str) -> str | None:
        """The URL that re-reads a kept response from its first event, or None if there is none."""
        if self.api != "openai-responses":
            return None
        return f"{self.base_url.rstrip('/')}/v1/responses/{response_handle}?stream=true"

    def streams(self, request_body: str) -> bool:
        """Does this exact request ask for a stream? (The SSE APIs stream only with `"stream": true`.)"""
        return _flag(request_body, "stream")

    def resumable(self, request_body: str) -> bool:
        """Can a broken stream of this exact request be read again from its handle? Only a Responses
        request in background mode that streams (the API keeps it and serves it by id)."""
        if self.api != "openai-responses":
            return False
        return _flag(request_body, "stream") and _flag(request_body, "background")


def _flag(request_body: str, name: str) -> bool:
    try:
        body: Any = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get(name) is True


_PATHS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "anthropic-messages": ("/v1/messages", {"anthropic-version": "2023-06-01"}),
    "openai-chat": ("/v1/chat/completions", {}),
    "openai-responses": ("/v1/responses", {}),
}


def endpoints_for(base_url: str, *, versions: tuple[int, ...] = (1,)) -> dict[str, ProviderEndpoint]:
    """Endpoints of every SSE adapter behind one base URL (the fake provider, or a compatible proxy)."""
    out: dict[str, ProviderEndpoint] = {}
    for api, (path, headers) in _PATHS.items():
        for version in versions:
            adapter = f"{api}@{version}"
            out[adapter] = ProviderEndpoint(adapter, base_url, path, headers)
    return out


def endpoint_of(endpoints: Mapping[str, ProviderEndpoint], adapter: str) -> ProviderEndpoint:
    try:
        return endpoints[adapter]
    except KeyError:
        raise UnknownEndpointError(
            f"no provider endpoint for adapter {adapter!r}; configured: {sorted(endpoints)}"
        ) from None
