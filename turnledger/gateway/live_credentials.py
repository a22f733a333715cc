"""A route's credential as its source holds it now, so a rotated key or a refreshed AWS session is
used without restarting the worker.

| source | stale (checked before every request) | refreshed by (in a thread) |
|---|---|---|
| environment variables | never: a process's environment does not change | — |
| a file (`api_key_file`) | its inode, size or modification time changed | reading it again |
| a botocore profile | `refresh_needed()`: temporary keys near their expiry | `get_frozen_credentials()` |

A refresh that fails (a file being replaced, empty, unreadable; an STS or metadata endpoint down)
keeps the value it had: the request goes with the last good credential and the provider judges it.
`changes` counts the refreshes that gave another value, so the worker can tell whether a request the
provider refused for its credential went out with the one in use now (gateway/worker.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from turnledger.gateway.credentials import (
    AwsCredentials,
    AwsCredentialSource,
    Credential,
    CredentialError,
    Secret,
    SecretSource,
    aws_credentials_of,
    botocore_credentials,
)

log = logging.getLogger(__name__)


class CredentialSupply(Protocol):
    @property
    def value(self) -> Credential: ...

    @property
    def changes(self) -> int: ...

    def stale(self) -> bool:
        """Must `refresh` run before `value` is what the source holds? Cheap, never blocks long."""
        ...

    def refresh(self) -> bool:
        """Read the source again (may block); True if the value changed."""
        ...


class FixedCredential:
    """A credential read once: from variables, or none at all."""

    def __init__(self, value: Credential) -> None:
        self.value = value
        self.changes = 0

    def stale(self) -> bool:
        return False

    def refresh(self) -> bool:
        return False


FileSignature = tuple[int, int, int]


def _signature(path: Path) -> FileSignature | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class WatchedFile:
    """An API key in a file (a mounted secret, say), read again when the file changes."""

    def __init__(self, source: SecretSource, value: Secret) -> None:
        assert source.file is not None
        self.source, self.path = source, source.file
        self.value: Credential = value
        self.changes = 0
        self._read_as = _signature(self.path)

    @classmethod
    def read(cls, source: SecretSource, env: Mapping[str, str]) -> WatchedFile | None:
        """The file's key now (a CredentialError names the file when it cannot be read)."""
        value = source.read(env)
        return None if value is None else cls(source, value)

    def stale(self) -> bool:
        now = _signature(self.path)
        return now is not None and now != self._read_as

    def refresh(self) -> bool:
        signature = _signature(self.path)
        try:
            value = self.source.read({})
        except CredentialError as exc:
            log.warning("keeping the credential read before: %s", exc)
            return False
        self._read_as = signature
        assert isinstance(self.value, Secret) and value is not None
        if value.reveal() == self.value.reveal():
            return False
        self.value = value
        self.changes += 1
        log.info("the credential in %s changed: requests use the new one", self.path)
        return True


class BotocoreSession:
    """AWS keys of a botocore profile: temporary ones (assume-role, SSO, instance or container
    metadata, web identity) are refreshed as botocore refreshes them, before they expire."""

    def __init__(self, name: str, credentials: Any) -> None:
        self.name = name
        self._credentials = credentials
        self.value: Credential = aws_credentials_of(credentials.get_frozen_credentials())
        self.changes = 0

    @classmethod
    def of_profile(cls, profile: str) -> BotocoreSession:
        return cls(f"AWS profile {profile!r}", botocore_credentials(profile))

    def stale(self) -> bool:
        refresh_needed = getattr(self._credentials, "refresh_needed", None)
        return bool(refresh_needed()) if refresh_needed is not None else False

    def refresh(self) -> bool:
        try:
            frozen = self._credentials.get_frozen_credentials()
        except Exception as exc:  # botocore raises its own errors, and those of the endpoint it asks
            why = type(exc).__name__
            log.warning("%s: keeping the credentials read before: refresh failed (%s)", self.name, why)
            return False
        value = aws_credentials_of(frozen)
        assert isinstance(self.value, AwsCredentials)
        if _aws_tuple(value) == _aws_tuple(self.value):
            return False
        self.value = value
        self.changes += 1
        log.info("%s: temporary credentials refreshed", self.name)
        return True


def _aws_tuple(credentials: AwsCredentials) -> tuple[str, str, str | None]:
    token = credentials.session_token
    return (
        credentials.access_key_id.reveal(),
        credentials.secret_access_key.reveal(),
        None if token is None else token.reveal(),
    )


def supply_of_key(source: SecretSource, env: Mapping[str, str]) -> CredentialSupply | None:
    """An API key: watched when it is in a file, else read once; None when its variable is unset."""
    if source.file is not None:
        return WatchedFile.read(source, env)
    value = source.read(env)
    return None if value is None else FixedCredential(value)


def supply_of_aws(source: AwsCredentialSource, env: Mapping[str, str]) -> CredentialSupply | None:
    """AWS keys: a profile's refreshed as botocore refreshes them, variables read once."""
    if source.profile is not None:
        return BotocoreSession.of_profile(source.profile)
    value = source.read(env)
    return None if value is None else FixedCredential(value)
