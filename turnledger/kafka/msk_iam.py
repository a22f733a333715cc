"""AWS MSK IAM access control as a source of OAUTHBEARER tokens (`KAFKA_SASL_OAUTHBEARER_AWS_REGION`).

An MSK cluster with IAM access control takes, on its SASL/OAUTHBEARER listener, the token AWS's own
`aws-msk-iam-sasl-signer-python` builds: a SigV4 *presigned* URL,
`GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-...` for the service
`kafka-cluster`, valid for 900 s, with a `User-Agent` query parameter appended after signing, the whole
URL base64url-encoded without padding. The broker checks the signature, so the token proves who we are
(the IAM identity of the keys) without a secret crossing the wire; the cluster's IAM policy then says
what that identity may do. The token holds the session token of temporary keys: it is never logged.

The signature is botocore's (`SigV4QueryAuth`), never ours. `User-Agent` is outside what is signed;
AWS's signer puts its own name and version there (`aws-msk-iam-sasl-signer-python/1.0.2`), we put ours
(`turnledger/<version>`). Nothing AWS publishes says MSK checks its form (unsigned, it cannot be a
credential); it may reach IAM as the `aws:UserAgent` condition key, as it does for the older
`AWS_MSK_IAM` mechanism (not verified for OAUTHBEARER), so a policy conditioned on it must expect ours.

The keys are botocore's: of the profile `KAFKA_SASL_OAUTHBEARER_AWS_PROFILE` names, else of botocore's
default chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the shared files' default
profile, SSO, web identity, container and instance metadata), which botocore reads from the process's
environment. They are looked up at the first login, not at start (the chain may ask a metadata
endpoint), and temporary ones are refreshed by botocore before they expire.
"""

from __future__ import annotations

import base64
import functools
import importlib.metadata
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import botocore.session
from botocore.auth import SIGV4_TIMESTAMP, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    InvalidConfigError,
    PartialCredentialsError,
    ProfileNotFound,
    SSOError,
)

from turnledger.errors import KafkaSettingsError
from turnledger.kafka.oauth import (
    ENV_AWS_PROFILE,
    ENV_AWS_REGION,
    Answer,
    Token,
    TokenRefused,
    TokenUnavailable,
    judge,
)

TOKEN_LIFETIME_S = 900
SIGNING_NAME = "kafka-cluster"
ACTION = "kafka-cluster:Connect"
REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
"""An AWS region's name (`eu-west-1`, `us-gov-west-1`, `cn-north-1`): a typo fails at start, not as a
token the broker refuses."""

SETTINGS_ERRORS: tuple[type[BaseException], ...] = (
    ProfileNotFound,
    PartialCredentialsError,
    InvalidConfigError,
    SSOError,  # an SSO session expired or never started: `aws sso login`, not waiting, mends it
)
"""botocore errors in finding or refreshing the keys that our settings (or an operator) must mend."""

THROTTLED = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded"})
"""Error codes of an AWS API that is throttling us (STS answers those with a 400): they pass."""


@functools.cache
def user_agent() -> str:
    try:
        version = importlib.metadata.version("turnledger")
    except importlib.metadata.PackageNotFoundError:
        version = "dev"
    return f"turnledger/{version}"


class _SigV4QueryAuthAt(SigV4QueryAuth):  # type: ignore[misc]
    """botocore's presigner, signing at a given time instead of now.

    `SigV4Auth.add_auth` reads the clock (`botocore.compat.get_current_datetime`) and overwrites
    `request.context['timestamp']` with it, so no argument pins the time. This `add_auth` is botocore's
    with the clock read replaced by the given time: the same steps (the query parameters, the
    canonical request, the string to sign, the signature, appended as `X-Amz-Signature`), all
    botocore's methods. It also skips botocore's DEBUG log of the canonical request, which holds the
    session token. tests/unit/test_kafka_msk_iam.py checks the result against AWS's own signer, which
    goes through botocore's `add_auth`."""

    def __init__(self, credentials: Any, region: str, at: datetime) -> None:
        super().__init__(credentials, SIGNING_NAME, region, expires=TOKEN_LIFETIME_S)
        self._timestamp = at.astimezone(UTC).strftime(SIGV4_TIMESTAMP)

    def add_auth(self, request: AWSRequest) -> None:
        request.context["timestamp"] = self._timestamp
        self._modify_request_before_signing(request)
        canonical_request = self.canonical_request(request)
        signature = self.signature(self.string_to_sign(request, canonical_request), request)
        self._inject_signature_to_request(request, signature)


def auth_token(credentials: Any, region: str, at: datetime) -> str:
    """The MSK IAM token for `credentials` (anything with botocore's `access_key`, `secret_key` and
    `token`), signed at `at` (timezone-aware; the signature has whole seconds)."""
    if at.tzinfo is None:
        raise ValueError("the signing time must be timezone-aware")
    url = f"https://kafka.{region}.amazonaws.com/"
    request = AWSRequest(method="GET", url=url, params={"Action": ACTION})
    _SigV4QueryAuthAt(credentials, region, at).add_auth(request)
    url = f"{request.url}&{urlencode({'User-Agent': user_agent()})}"
    return base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class MskIam:
    """Tokens signed with the AWS keys of a botocore session, for the MSK clusters of `region`."""

    region: str
    profile: str | None = None
    session: Any = field(default=None, repr=False, compare=False)
    """The botocore session whose keys sign: by default one of `profile` (else of the default chain).
    It keeps the keys it found (`get_credentials`), so temporary ones are refreshed, not looked up anew."""

    def __post_init__(self) -> None:
        if self.session is None:
            object.__setattr__(self, "session", botocore.session.Session(profile=self.profile))

    def describe(self) -> str:
        whose = f"profile {self.profile!r}" if self.profile else "botocore's default credentials"
        return f"AWS MSK IAM in {self.region} ({whose})"

    def check(self) -> str:
        return (
            f"The broker refused the token of {self.describe()}: check that the IAM identity's "
            "policy allows kafka-cluster:Connect on the cluster's ARN, that the cluster has IAM access "
            f"control on and the address is its IAM listener (port 9098, 9198 public), that "
            f"{ENV_AWS_REGION} is the cluster's region, and this host's clock (the signature is dated)."
        )

    def fetch(self, now: float) -> Token:
        signed_at = math.floor(now)
        value = auth_token(self._keys(), self.region, datetime.fromtimestamp(signed_at, UTC))
        return Token(value, float(signed_at + TOKEN_LIFETIME_S))

    def _keys(self) -> Any:
        """botocore's frozen keys now: temporary ones refreshed by botocore when near their expiry."""
        try:
            found = self.session.get_credentials()
            keys = None if found is None else found.get_frozen_credentials()
        except (BotoCoreError, ClientError) as exc:
            raise self._judged(exc) from exc
        if keys is None or not keys.access_key or not keys.secret_key:
            raise TokenRefused(*self._none_found())
        return keys

    def _judged(self, exc: BotoCoreError | ClientError) -> TokenRefused | TokenUnavailable:
        """An AWS API's answer is judged like a token endpoint's (by its HTTP status, a throttle passing);
        a botocore error is a refusal when it says our settings are wrong, else an outage (an STS or
        metadata endpoint that did not answer)."""
        why = f"{self.describe()}: getting the AWS credentials failed ({type(exc).__name__}: {exc})"
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
            refused = code not in THROTTLED and judge(status) is Answer.REFUSED
        else:
            refused = isinstance(exc, SETTINGS_ERRORS)
        if refused:
            return TokenRefused(why, f"Check {self._where()}.")
        return TokenUnavailable(why)

    def _where(self) -> str:
        if self.profile:
            return (
                f"the profile {self.profile!r} ({ENV_AWS_PROFILE}) in the AWS config files (~/.aws/config "
                "and ~/.aws/credentials, or AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE)"
            )
        return (
            "botocore's default chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the profile AWS_PROFILE "
            "names (else the default one), SSO, web identity, container or instance metadata"
        )

    def _none_found(self) -> tuple[str, str]:
        """What was not found, and what to do."""
        if self.profile:
            return (
                f"{self.describe()}: the profile has no AWS credentials",
                f"Give it keys, a role, an SSO session or a credential_process: check {self._where()}.",
            )
        return (
            f"{self.describe()}: no AWS credentials found in {self._where()}",
            f"Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile in AWS_PROFILE or "
            f"{ENV_AWS_PROFILE}.",
        )


def msk_iam_from_env(env: Mapping[str, str]) -> MskIam:
    """The source `KAFKA_SASL_OAUTHBEARER_AWS_REGION` (and `..._AWS_PROFILE`) name, checked at start: a
    region's name, a profile the AWS config files hold."""
    region = env.get(ENV_AWS_REGION, "").strip()
    if not REGION.fullmatch(region):
        raise KafkaSettingsError(
            f"{ENV_AWS_REGION} must be the AWS region of the MSK cluster, like eu-west-1, not {region!r}"
        )
    profile = env.get(ENV_AWS_PROFILE, "").strip() or None
    source = MskIam(region, profile)
    if profile is not None:
        try:
            known = profile in source.session.available_profiles
        except BotoCoreError as exc:
            raise KafkaSettingsError(f"{ENV_AWS_PROFILE}: cannot read the AWS config files: {exc}") from None
        if not known:
            raise KafkaSettingsError(
                f"{ENV_AWS_PROFILE}: no profile {profile!r} in the AWS config files (~/.aws/config and "
                "~/.aws/credentials, or AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE)"
            )
    return source
