"""The devstack's token issuer at the edges (devstack/identity.py): base64url without padding, an
openssl that fails, the token endpoint's answers whole (defaults, counts, refusals), the HTTP Basic
header read as RFC 6749 §2.3.1 writes it, and the endpoint's HTTP (its own port, its thread, its
headers, a body without a length or not UTF-8). The happy paths and openssl's verdict on the
signatures: tests/unit/test_devstack_oauth.py; logins on a broker: tests/integration/."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from turnledger.devstack.errors import DevstackError
from turnledger.devstack.identity import SigningKey, TokenEndpoint, _basic, b64url, ensure_signing_key

FORM = {"grant_type": "client_credentials"}
GRANT = {"grant_type": ["client_credentials"]}
"""`FORM` as the endpoint's handler parses it."""
REFUSED = {"error": "invalid_client", "error_description": "unknown client or wrong secret"}


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    tool = shutil.which("openssl")
    if tool is None:
        pytest.skip("needs openssl")
    return ensure_signing_key(tmp_path_factory.mktemp("tls"), tool)


def basic(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return "Basic " + base64.b64encode(raw).decode()


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


@pytest.mark.parametrize(
    ("data", "text"),
    [(b"", ""), (b"a", "YQ"), (b"\x00\x17", "ABc"), (b"\x00\x00\x17", "AAAX"), (b"\xfb\xff", "-_8")],
)
def test_b64url_is_the_url_alphabet_without_padding(data: bytes, text: str) -> None:
    """RFC 7515 §2: only the trailing `=` go; a last character that happens to be `X` stays."""
    assert b64url(data) == text


def test_an_openssl_that_fails_is_a_devstack_error_with_its_words(tmp_path: Path) -> None:
    """Its exit code and its stderr, stripped, a byte that is not UTF-8 replaced (not a decode error)."""
    tool = tmp_path / "openssl"
    tool.write_text("#!/bin/sh\nprintf ' unable to load key \\377\\n' >&2\nexit 3\n")
    tool.chmod(0o755)
    with pytest.raises(DevstackError) as failed:
        SigningKey(tmp_path / "missing.key", str(tool)).jwks()
    assert str(failed.value) == (
        "openssl rsa failed (exit 3) making the OAUTHBEARER listener's token key: unable to load key \ufffd"
    )


def test_the_endpoint_issues_hour_long_tokens_by_default_and_counts_each(key: SigningKey) -> None:
    """Each answer whole, and the counts tests use to tell a cached token from a new one."""
    with TokenEndpoint(key, "svc", "s3cret") as endpoint:
        answers = [endpoint.answer(basic("svc:s3cret"), GRANT) for _ in range(2)]
        assert [(status, body["token_type"], body["expires_in"]) for status, body in answers] == [
            (200, "Bearer", 3600),
            (200, "Bearer", 3600),
        ]
        claims = claims_of(answers[0][1]["access_token"])
        assert (claims["sub"], claims["exp"] - claims["iat"]) == ("svc", 3600)
        assert endpoint.answer(basic("svc:wrong"), GRANT) == (401, REFUSED)
        assert endpoint.answer(None, GRANT) == (401, REFUSED)
        assert endpoint.answer(basic("svc:s3cret"), {"grant_type": ["password"]}) == (
            400,
            {"error": "unsupported_grant_type"},
        )
        assert (endpoint.issued, endpoint.refused) == (2, 2)


@pytest.mark.parametrize(
    ("authorization", "credentials"),
    [
        (basic("svc:pa:ss"), ("svc", "pa:ss")),
        ("basic " + base64.b64encode(b"team%3Asvc:s%20t%2B").decode(), ("team:svc", "s t+")),
        (basic("my+client:two+words"), ("my client", "two words")),
        (basic("svc:"), ("svc", "")),
        (basic("svc"), None),
        (basic("svc:s") + "!!", None),
        (basic(b"\xff:x"), None),
        ("Basic", None),
        ("Bearer " + base64.b64encode(b"svc:s").decode(), None),
        ("", None),
        (None, None),
    ],
)
def test_a_basic_header_gives_the_form_decoded_client_id_and_secret(
    authorization: str | None, credentials: tuple[str, str] | None
) -> None:
    """RFC 6749 §2.3.1: both parts are form-encoded before Basic (`%3A` a colon, `+` a space), so
    the first colon splits them; a header without one, or that is not base64 or UTF-8, names none."""
    assert _basic(authorization) == credentials


def test_two_endpoints_serve_at_once_each_on_a_port_of_its_own_in_a_daemon_thread(key: SigningKey) -> None:
    """A test session may run several issuers (a second one to refuse); none keeps the process alive."""
    before = set(threading.enumerate())
    with TokenEndpoint(key, "one", "s1") as first, TokenEndpoint(key, "two", "s2") as second:
        assert urlsplit(first.url).port != urlsplit(second.url).port
        serving = [t for t in set(threading.enumerate()) - before if t.name == "token-endpoint"]
        assert [t.daemon for t in serving] == [True, True]
        one = httpx.post(first.url, data=FORM, auth=("one", "s1"))
        two = httpx.post(second.url, data=FORM, auth=("two", "s2"))
        assert [claims_of(r.json()["access_token"])["sub"] for r in (one, two)] == ["one", "two"]
        assert (first.issued, second.issued) == (1, 1)


def test_the_answer_is_json_with_its_length(key: SigningKey) -> None:
    """Both a token and a refusal say they are JSON and how long they are."""
    with TokenEndpoint(key, "svc", "s") as endpoint:
        for response in (
            httpx.post(endpoint.url, data=FORM, auth=("svc", "s")),
            httpx.post(endpoint.url, data=FORM, auth=("svc", "wrong")),
        ):
            assert response.headers["content-type"] == "application/json"
            assert response.headers["content-length"] == str(len(response.content))
        assert response.json() == REFUSED


def test_a_form_that_is_not_utf_8_is_still_read(key: SigningKey) -> None:
    """A stray Latin-1 byte in another field does not cost the client its token."""
    with TokenEndpoint(key, "svc", "s") as endpoint:
        body = b"grant_type=client_credentials&note=caf\xe9"
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        response = httpx.post(endpoint.url, content=body, headers=headers, auth=("svc", "s"))
        assert (response.status_code, endpoint.issued) == (200, 1)


def test_a_request_without_a_content_length_has_no_form(key: SigningKey) -> None:
    """Nothing is read past the headers (a read would wait for a body nobody sends): no grant type."""
    with TokenEndpoint(key, "svc", "s") as endpoint:
        port = urlsplit(endpoint.url).port
        assert port is not None
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(
                f"POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {basic('svc:s')}\r\n\r\n".encode()
            )
            received = b""
            while chunk := conn.recv(4096):
                received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0] == b"HTTP/1.0 400 Bad Request"
        assert json.loads(body) == {"error": "unsupported_grant_type"}
