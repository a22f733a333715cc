"""aiokafka (0.14 and before) takes a broker's refusal of an OAUTHBEARER token for a login.

RFC 7628 §3.2.2: a server that refuses the token answers the client's first message with an error
challenge (a JSON `{"status": "invalid_token", ...}`), and the client must answer it with a single
%x01 byte, after which the server fails the exchange. Kafka's broker does exactly this
(`OAuthBearerSaslServer`: the SaslAuthenticate response carries the challenge and no error code; the
error code comes only after the %x01), and Kafka's Java client (`OAuthBearerSaslClient`) answers it.
aiokafka's `OAuthAuthenticator` stops after sending the token whatever the answer, so a refused
token looked like a login: the connection then broke on its next request, and a client with an
expired or foreign token waited for ever as if the cluster were down. (sarama had the same bug,
IBM/sarama#1423.)

`install` gives aiokafka's connections an authenticator that answers a non-empty challenge with
%x01, so the broker's error code arrives and aiokafka raises `SaslAuthenticationFailed`, which
`connection.diagnose` reports as a `KafkaAccessError`. It changes nothing when the token is taken
(the broker's answer is then empty). Installed once, when OAUTHBEARER settings are read.
"""

from __future__ import annotations

from typing import Any

from aiokafka import conn

ERROR_REPLY = b"\x01"
"""RFC 7628 §3.2.3: the client's whole answer to an error challenge."""


class RefusalAwareOAuthAuthenticator(conn.OAuthAuthenticator):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER exchange, plus RFC 7628's answer to a server's error challenge."""

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        if self._token_sent and payload:
            return ERROR_REPLY, True
        result: tuple[bytes, bool] | None = await super().step(payload)
        return result


def _refusal_aware_authenticator(self: Any) -> RefusalAwareOAuthAuthenticator:
    return RefusalAwareOAuthAuthenticator(sasl_oauth_token_provider=self._sasl_oauth_token_provider)


def install() -> None:
    """Make every aiokafka connection use `RefusalAwareOAuthAuthenticator` (idempotent). A newer
    aiokafka without `authenticator_oauth` fails here, loudly, rather than losing the fix."""
    if not callable(getattr(conn.AIOKafkaConnection, "authenticator_oauth", None)):
        raise RuntimeError(
            "aiokafka changed: AIOKafkaConnection.authenticator_oauth is gone; see oauth_refusal.py"
        )
    conn.AIOKafkaConnection.authenticator_oauth = _refusal_aware_authenticator


def installed() -> bool:
    return conn.AIOKafkaConnection.authenticator_oauth is _refusal_aware_authenticator
