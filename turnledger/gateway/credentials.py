"""Provider credentials: read from the variables or files the operator names, and never shown.

A `Secret` prints as `Secret('***')` (repr, str, f-strings, logging, tracebacks of
dataclasses holding it); only `reveal()` gives the value, and only the code that puts
it in a request header calls it. Every value read is also registered with the
redactor (gateway/redaction.py), which scrubs it from any log line or detail that
might still carry it. Errors name the variable or file, never its content.

AWS credentials come from named variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN by default) or from a botocore profile (the shared config and
credentials files); the request is signed by botocore's SigV4 signer (gateway/signing.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnledger.errors import GatewayError
from turnledger.gateway.redaction import REDACTOR


class CredentialError(GatewayError):
    """A credential the configuration names cannot be read (the message names where, never what)."""


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value:
            raise ValueError("a secret cannot be empty")
        self._value = value
        REDACTOR.register(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("a Secret is not serializable")


@dataclass(frozen=True)
class SecretSource:
    """Where a secret is: an environment variable, or a file (its content, surrounding whitespace
    stripped). Exactly one of the two."""

    env: str | None = None
    file: Path | None = None

    def __post_init__(self) -> None:
        if (self.env is None) == (self.file is None):
            raise ValueError("a secret source names exactly one of an environment variable or a file")

    @property
    def where(self) -> str:
        return f"environment variable {self.env}" if self.env else f"file {self.file}"

    def read(self, env: Mapping[str, str]) -> Secret | None:
        """The secret, or None when the variable is unset or empty; a named file must be readable."""
        if self.env is not None:
            value = env.get(self.env, "").strip()
            return Secret(value) if value else None
        assert self.file is not None
        try:
            value = self.file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CredentialError(f"cannot read the credential {self.where}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CredentialError(f"the credential {self.where} is not UTF-8") from None
        if not value:
            raise CredentialError(f"the credential {self.where} is empty")
        return Secret(value)

    def require(self, env: Mapping[str, str], purpose: str) -> Secret:
        secret = self.read(env)
        if secret is None:
            raise CredentialError(f"{purpose}: the credential {self.where} is not set")
        return secret


@dataclass(frozen=True)
class AwsCredentials:
    access_key_id: Secret
    secret_access_key: Secret
    session_token: Secret | None = None


@dataclass(frozen=True)
class AwsCredentialSource:
    access_key_id: SecretSource = SecretSource(env="AWS_ACCESS_KEY_ID")
    secret_access_key: SecretSource = SecretSource(env="AWS_SECRET_ACCESS_KEY")
    session_token: SecretSource | None = SecretSource(env="AWS_SESSION_TOKEN")
    profile: str | None = None  # a botocore profile instead of the variables

    def read(self, env: Mapping[str, str]) -> AwsCredentials | None:
        if self.profile is not None:
            return _from_profile(self.profile)
        key_id = self.access_key_id.read(env)
        secret = self.secret_access_key.read(env)
        if key_id is None or secret is None:
            return None
        token = self.session_token.read(env) if self.session_token is not None else None
        return AwsCredentials(key_id, secret, token)

    def require(self, env: Mapping[str, str], purpose: str) -> AwsCredentials:
        credentials = self.read(env)
        if credentials is None:
            raise CredentialError(
                f"{purpose}: AWS credentials not set ({self.access_key_id.where} and "
                f"{self.secret_access_key.where})"
            )
        return credentials


Credential = Secret | AwsCredentials | None
"""What a route signs its requests with: an API key, AWS keys, or nothing."""


def _from_profile(profile: str) -> AwsCredentials:
    return aws_credentials_of(botocore_credentials(profile).get_frozen_credentials())


NO_CREDENTIALS_WHERE = (
    ": botocore looked in the profile's entries of the shared credentials and config files (and what "
    "they name: a role, SSO, a process), then the container and instance metadata endpoints; a metadata "
    "endpoint that did not answer in time counts as none (AWS_METADATA_SERVICE_TIMEOUT and "
    "AWS_METADATA_SERVICE_NUM_ATTEMPTS give it longer)"
)
"""Why a profile can have no credentials: botocore answers None both where nothing is configured and
where the instance metadata service (EC2, an EKS node) timed out, so the message names both."""


def botocore_credentials(profile: str) -> Any:
    """botocore's credentials of `profile` (refreshable ones for temporary keys), checked readable."""
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        found = botocore.session.Session(profile=profile).get_credentials()
        if found is not None:
            found.get_frozen_credentials()
    except BotoCoreError as exc:
        raise CredentialError(f"AWS profile {profile!r}: {type(exc).__name__}") from None
    if found is None:
        raise CredentialError(f"AWS profile {profile!r} has no credentials{NO_CREDENTIALS_WHERE}")
    return found


def aws_credentials_of(frozen: Any) -> AwsCredentials:
    """Our AwsCredentials of botocore's ReadOnlyCredentials (access key, secret key, token)."""
    token = Secret(frozen.token) if frozen.token else None
    return AwsCredentials(Secret(frozen.access_key), Secret(frozen.secret_key), token)
