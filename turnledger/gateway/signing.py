"""AWS SigV4 for Bedrock requests, by botocore's own signer (no crypto of ours).

botocore.auth logs the canonical request at DEBUG, and with temporary credentials that
text holds the session token; its logger is therefore held at INFO or above here,
whatever the process's log level (the redacting log filter would scrub it too).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from turnledger.gateway.credentials import AwsCredentials

_BOTOCORE_AUTH_LOG = logging.getLogger("botocore.auth")
_BOTOCORE_AUTH_LOG.setLevel(max(_BOTOCORE_AUTH_LOG.level, logging.INFO))


def sigv4_headers(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: AwsCredentials,
    *,
    region: str,
    service: str,
) -> dict[str, str]:
    """`headers` plus the signature (Authorization, X-Amz-Date and, with a session token,
    X-Amz-Security-Token), for exactly this method, URL, header set and body."""
    token = credentials.session_token.reveal() if credentials.session_token is not None else None
    signer = SigV4Auth(
        Credentials(credentials.access_key_id.reveal(), credentials.secret_access_key.reveal(), token),
        service,
        region,
    )
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    signer.add_auth(request)
    return {name: str(value) for name, value in request.headers.items()}
