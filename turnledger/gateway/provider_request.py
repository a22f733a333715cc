"""The HTTP request the worker sends for one attempt (or one resume), credentials applied last.

The body is the manifest's exact request bytes. Headers: the content type, the CAS's
idempotency key (under the profile's header), the API's fixed and the route's own
headers, then the credential by the API's auth scheme (a table: bearer, x-api-key,
x-goog-api-key, SigV4 by botocore over the exact request). A `ProviderRequest` never
prints its headers, so logging one cannot leak a credential.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from turnledger.adapters.profiles import AuthScheme
from turnledger.gateway.credentials import AwsCredentials, Secret
from turnledger.gateway.endpoints import ProviderEndpoint, headers_under
from turnledger.gateway.signing import sigv4_headers
from turnledger.model.manifest import DispatchManifest


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    content: bytes | None

    def __repr__(self) -> str:
        return f"<ProviderRequest {self.method} {self.url} ({len(self.content or b'')} bytes)>"


def send_request(
    endpoint: ProviderEndpoint, manifest: DispatchManifest, idempotency_key: str
) -> ProviderRequest:
    """POST of the manifest's bytes to the endpoint, authenticated."""
    headers = headers_under({"content-type": "application/json"}, endpoint.headers)
    if endpoint.profile.idempotency_header and idempotency_key:
        headers[endpoint.profile.idempotency_header] = idempotency_key
    return authenticate(
        endpoint, ProviderRequest("POST", endpoint.url, headers, manifest.request_body.encode())
    )


def resume_request(endpoint: ProviderEndpoint, response_handle: str) -> ProviderRequest | None:
    """GET that reads a kept response again from its first event, or None if the API keeps none."""
    url = endpoint.resume_url(response_handle)
    if url is None:
        return None
    return authenticate(endpoint, ProviderRequest("GET", url, dict(endpoint.headers), None))


def cancel_request(endpoint: ProviderEndpoint, response_handle: str) -> ProviderRequest | None:
    """POST that stops a kept response at the provider, or None if the API keeps none."""
    url = endpoint.cancel_url(response_handle)
    if url is None:
        return None
    return authenticate(endpoint, ProviderRequest("POST", url, dict(endpoint.headers), b""))


def authenticate(endpoint: ProviderEndpoint, request: ProviderRequest) -> ProviderRequest:
    """The request with the route's credential applied; unchanged when the route has none."""
    credential = endpoint.route.credential
    if credential is None:
        return request
    headers = _AUTH[endpoint.auth](endpoint, request, credential)
    return ProviderRequest(request.method, request.url, headers, request.content)


def _key(credential: Secret | AwsCredentials) -> str:
    if not isinstance(credential, Secret):
        raise TypeError("this API takes an API key, the route has AWS credentials")
    return credential.reveal()


def _bearer(
    endpoint: ProviderEndpoint, request: ProviderRequest, credential: Secret | AwsCredentials
) -> dict[str, str]:
    return {**request.headers, "authorization": f"Bearer {_key(credential)}"}


def _x_api_key(
    endpoint: ProviderEndpoint, request: ProviderRequest, credential: Secret | AwsCredentials
) -> dict[str, str]:
    return {**request.headers, "x-api-key": _key(credential)}


def _goog_api_key(
    endpoint: ProviderEndpoint, request: ProviderRequest, credential: Secret | AwsCredentials
) -> dict[str, str]:
    return {**request.headers, "x-goog-api-key": _key(credential)}


def _sigv4(
    endpoint: ProviderEndpoint, request: ProviderRequest, credential: Secret | AwsCredentials
) -> dict[str, str]:
    if not isinstance(credential, AwsCredentials):
        raise TypeError("SigV4 needs AWS credentials, the route has an API key")
    service = endpoint.profile.signing_service
    if service is None:
        raise TypeError(f"{endpoint.profile.api} signs with SigV4 but its profile names no signing service")
    return sigv4_headers(
        request.method,
        request.url,
        request.headers,
        request.content or b"",
        credential,
        region=endpoint.region,
        service=service,
    )


_AUTH: Mapping[
    AuthScheme, Callable[[ProviderEndpoint, ProviderRequest, Secret | AwsCredentials], dict[str, str]]
] = {
    AuthScheme.BEARER: _bearer,
    AuthScheme.X_API_KEY: _x_api_key,
    AuthScheme.GOOG_API_KEY: _goog_api_key,
    AuthScheme.AWS_SIGV4: _sigv4,
}
