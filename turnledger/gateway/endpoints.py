"""Where each adapter's request bytes go, and what the provider behind it can do after a disconnect.

The manifest fixes the bytes; the endpoint fixes the route, the headers and the
capabilities the worker may rely on. Resumability is configuration (or the request's
own `background: true`), never a guess: a worker that resumed a response the provider
did not keep would wait forever for output that will never come.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson


class UnknownEndpointError(KeyError):
    """No endpoint is configured for the manifest's adapter."""


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    adapter: str  # e.g. "openai-responses@1"
    base_url: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    #: the provider keeps streamed responses and serves them again by id (Responses background mode)
    retains_responses: bool = False

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

    def resumable(self, request_body: str) -> bool:
        """Can a broken stream of this exact request be read again from its handle?"""
        if self.api != "openai-responses":
            return False
        if self.retains_responses:
            return True
        body: Any = orjson.loads(request_body)
        return isinstance(body, dict) and body.get("background") is True and body.get("stream") is True


_PATHS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "anthropic-messages": ("/v1/messages", {"anthropic-version": "2023-06-01"}),
    "openai-chat": ("/v1/chat/completions", {}),
    "openai-responses": ("/v1/responses", {}),
}


def endpoints_for(
    base_url: str, *, retains_responses: bool = False, versions: tuple[int, ...] = (1,)
) -> dict[str, ProviderEndpoint]:
    """Endpoints of every SSE adapter behind one base URL (the fake provider, or a compatible proxy)."""
    out: dict[str, ProviderEndpoint] = {}
    for api, (path, headers) in _PATHS.items():
        for version in versions:
            adapter = f"{api}@{version}"
            out[adapter] = ProviderEndpoint(
                adapter, base_url, path, headers, retains_responses=retains_responses
            )
    return out


def endpoint_of(endpoints: Mapping[str, ProviderEndpoint], adapter: str) -> ProviderEndpoint:
    try:
        return endpoints[adapter]
    except KeyError:
        raise UnknownEndpointError(
            f"no provider endpoint for adapter {adapter!r}; configured: {sorted(endpoints)}"
        ) from None
