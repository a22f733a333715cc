"""Credentials, checked the way each real API checks them, with each API's own error body.

| API | credential | missing | wrong |
|---|---|---|---|
| Anthropic | `x-api-key` or Bearer, `anthropic-version` | 401 authentication_error | 401 (same type) |
| OpenAI (both) | `Authorization: Bearer` | 401 "You didn't provide an API key" | 401 invalid_api_key |
| Gemini | `x-goog-api-key` (or `?key=`) | 403 PERMISSION_DENIED | 400 API_KEY_INVALID |
| Bedrock | SigV4 `Authorization` | 403 MissingAuthenticationToken | 403 UnrecognizedClient, BadSignature |

The SigV4 check is computed here from the signing algorithm (HMAC-SHA256 over the
canonical request), independently of the gateway's signer (botocore), so a request the
gateway signed wrongly, or altered after signing, is refused as AWS would refuse it.
Error messages never echo the credential received.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from turnledger.fake_provider.httpio import HttpRequest


@dataclass(frozen=True)
class FakeKeys:
    """The credentials the fake accepts (one per API family); `as_env` names them as the SDKs do."""

    openai: str = "sk-fake-openai-0123456789abcdef"
    anthropic: str = "sk-ant-fake-0123456789abcdef"
    gemini: str = "AIzaFake-0123456789abcdef"
    aws_access_key_id: str = "AKIAFAKE0123456789AB"
    aws_secret_access_key: str = "fake/secret/0123456789abcdefghijklmnop"

    def as_env(self) -> dict[str, str]:
        return {
            "OPENAI_API_KEY": self.openai,
            "ANTHROPIC_API_KEY": self.anthropic,
            "GEMINI_API_KEY": self.gemini,
            "AWS_ACCESS_KEY_ID": self.aws_access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.aws_secret_access_key,
        }


@dataclass(frozen=True)
class AuthFailure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def _anthropic(req: HttpRequest, keys: FakeKeys) -> AuthFailure | None:
    def fail(status: int, kind: str, message: str) -> AuthFailure:
        return AuthFailure(status, {"type": "error", "error": {"type": kind, "message": message}}, {})

    # the pinned SDK (anthropic 2.14) sends its API key as a Bearer token; x-api-key is the documented header
    scheme, _, token = req.headers.get("authorization", "").partition(" ")
    key = req.headers.get("x-api-key") or (token.strip() if scheme.lower() == "bearer" else "")
    if not key:
        return fail(401, "authentication_error", "x-api-key header is required")
    if not hmac.compare_digest(key, keys.anthropic):
        return fail(401, "authentication_error", "invalid x-api-key")
    if not req.headers.get("anthropic-version"):
        return fail(400, "invalid_request_error", "anthropic-version: header is required")
    return None


def _openai(req: HttpRequest, keys: FakeKeys) -> AuthFailure | None:
    def fail(message: str, code: str | None) -> AuthFailure:
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
        return AuthFailure(401, {"error": error}, {})

    scheme, _, token = req.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return fail(
            "You didn't provide an API key. You need to provide your API key in an Authorization header "
            "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            None,
        )
    if not hmac.compare_digest(token.strip(), keys.openai):
        return fail("Incorrect API key provided.", "invalid_api_key")
    return None


def _gemini(req: HttpRequest, keys: FakeKeys) -> AuthFailure | None:
    key = req.headers.get("x-goog-api-key") or req.query.get("key")
    if not key:
        error = {
            "code": 403,
            "message": "Method doesn't allow unregistered callers (callers without established identity). "
            "Please use API Key or other form of API consumer identity to call this API.",
            "status": "PERMISSION_DENIED",
        }
        return AuthFailure(403, {"error": error}, {})
    if not hmac.compare_digest(key, keys.gemini):
        error = {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
        }
        return AuthFailure(400, {"error": error}, {})
    return None


_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)"
    r"/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;-]+), ?Signature=(?P<signature>[0-9a-f]{64})"
)


def _bedrock(req: HttpRequest, keys: FakeKeys) -> AuthFailure | None:
    def fail(kind: str, message: str) -> AuthFailure:
        return AuthFailure(
            403, {"message": message}, {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/"}
        )

    header = req.headers.get("authorization")
    if not header:
        return fail("MissingAuthenticationTokenException", "Missing Authentication Token")
    m = _SIGV4.fullmatch(header.strip())
    if m is None or "x-amz-date" not in req.headers:
        return fail("IncompleteSignatureException", "Authorization header requires a valid SigV4 signature.")
    if not hmac.compare_digest(m["key"], keys.aws_access_key_id):
        return fail("UnrecognizedClientException", "The security token included in the request is invalid.")
    expected = _signature(req, m, keys.aws_secret_access_key)
    if expected is None or not hmac.compare_digest(expected, m["signature"]):
        return fail(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. Check your "
            "AWS Secret Access Key and signing method. Consult the service documentation for details.",
        )
    return None


def _signature(req: HttpRequest, m: re.Match[str], secret: str) -> str | None:
    signed = m["signed"].split(";")
    if "host" not in signed or any(name not in req.headers for name in signed):
        return None
    timestamp = req.headers["x-amz-date"]
    canonical_headers = "".join(f"{name}:{' '.join(req.headers[name].split())}\n" for name in signed)
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(req.query.items()))
    canonical = "\n".join(
        [
            req.method,
            quote(req.path, safe="/~"),
            query,
            canonical_headers,
            m["signed"],
            hashlib.sha256(req.body).hexdigest(),
        ]
    )
    scope = f"{m['date']}/{m['region']}/{m['service']}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", timestamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + secret).encode()
    for part in (m["date"], m["region"], m["service"], "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


CHECKS = {
    "anthropic-messages": _anthropic,
    "openai-chat": _openai,
    "openai-responses": _openai,
    "gemini": _gemini,
    "bedrock-converse": _bedrock,
}


def check(api: str, req: HttpRequest, keys: FakeKeys) -> AuthFailure | None:
    """None when the request carries the API's credential; else the API's own refusal."""
    return CHECKS[api](req, keys)
