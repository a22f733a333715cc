"""A route's credential kept current: a key file read again when it changes, a botocore profile's
temporary keys refreshed as botocore refreshes them, variables read once; a failed refresh keeps the
last good value."""

from __future__ import annotations

import datetime
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from botocore.credentials import Credentials, RefreshableCredentials

from turnledger.gateway.credentials import (
    AwsCredentials,
    AwsCredentialSource,
    CredentialError,
    Secret,
    SecretSource,
)
from turnledger.gateway.endpoints import ProviderRoute, RouteSettings
from turnledger.gateway.live_credentials import (
    BotocoreSession,
    FixedCredential,
    WatchedFile,
    supply_of_aws,
    supply_of_key,
)
from turnledger.gateway.redaction import REDACTOR


def _write(path: Path, text: str, mtime_ns: int) -> None:
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(mtime_ns, mtime_ns))  # a rewrite within the clock's tick still shows


def _watched(tmp_path: Path, text: str = "key-one") -> tuple[Path, WatchedFile]:
    path = tmp_path / "key"
    _write(path, text, 1_000_000_000)
    supply = supply_of_key(SecretSource(file=path), {})
    assert isinstance(supply, WatchedFile)
    return path, supply


def _key(supply: Any) -> str:
    assert isinstance(supply.value, Secret)
    return supply.value.reveal()


def test_a_key_file_is_read_again_once_it_changes(tmp_path: Path) -> None:
    path, supply = _watched(tmp_path)
    assert (_key(supply), supply.changes, supply.stale()) == ("key-one", 0, False)
    _write(path, "key-two\n", 2_000_000_000)
    assert supply.stale()
    assert supply.refresh() is True
    assert (_key(supply), supply.changes, supply.stale()) == ("key-two", 1, False)
    assert REDACTOR.scrub("sent key-two") == "sent ***"  # a rotated secret is never printed either


def test_a_rewrite_with_the_same_key_is_no_change(tmp_path: Path) -> None:
    path, supply = _watched(tmp_path)
    _write(path, "  key-one \n", 3_000_000_000)
    assert supply.stale()
    assert supply.refresh() is False
    assert (_key(supply), supply.changes, supply.stale()) == ("key-one", 0, False)


def test_a_file_being_replaced_keeps_the_last_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path, supply = _watched(tmp_path)
    path.unlink()
    assert supply.stale() is False  # gone for a moment: nothing to read, the last key stays
    _write(path, "", 4_000_000_000)
    assert supply.stale()
    with caplog.at_level(logging.WARNING, "turnledger.gateway.live_credentials"):
        assert supply.refresh() is False
    assert (_key(supply), supply.changes) == ("key-one", 0)
    assert caplog.messages == [f"keeping the credential read before: the credential file {path} is empty"]
    _write(path, "key-three", 5_000_000_000)
    assert supply.stale() and supply.refresh() is True and _key(supply) == "key-three"


async def test_a_key_file_that_is_not_utf_8_keeps_the_last_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write caught half way through a character (or a file saved as UTF-16) is a failed refresh, not
    an exception out of the route's refresh into the request."""
    path, supply = _watched(tmp_path)
    route = ProviderRoute(
        RouteSettings(name="r", base_url="http://127.0.0.1:1", adapters=("openai-chat",)), supply
    )
    path.write_bytes(b"key-\xe2\x82")
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    with caplog.at_level(logging.WARNING, "turnledger.gateway.live_credentials"):
        assert await route.refresh_credential() == 0
    assert (_key(supply), supply.changes) == ("key-one", 0)
    assert caplog.messages == [f"keeping the credential read before: the credential file {path} is not UTF-8"]
    with pytest.raises(CredentialError) as caught:
        supply_of_key(SecretSource(file=path), {})
    assert str(caught.value) == f"the credential file {path} is not UTF-8"


def test_a_key_file_is_utf_8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    path, supply = _watched(tmp_path, "clé-ünïcode-秘密")
    assert (_key(supply), supply.changes) == ("clé-ünïcode-秘密", 0)
    _write(path, "clé-rotée-秘密", 2_000_000_000)
    assert supply.refresh() is True
    assert (_key(supply), supply.changes) == ("clé-rotée-秘密", 1)


def test_each_change_of_a_key_file_is_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, supply = _watched(tmp_path)
    with caplog.at_level(logging.INFO, "turnledger.gateway.live_credentials"):
        for changes, key in enumerate(("key-two", "key-three"), start=1):
            _write(path, key, (changes + 1) * 1_000_000_000)
            assert (supply.stale(), supply.refresh()) == (True, True)
            assert (_key(supply), supply.changes, supply.stale()) == (key, changes, False)
    assert caplog.messages == [f"the credential in {path} changed: requests use the new one"] * 2


def test_variables_are_read_once() -> None:
    supply = supply_of_key(SecretSource(env="K"), {"K": "from-env"})
    assert isinstance(supply, FixedCredential)
    assert (_key(supply), supply.stale(), supply.refresh(), supply.changes) == ("from-env", False, False, 0)
    assert supply_of_key(SecretSource(env="K"), {}) is None
    assert supply_of_aws(AwsCredentialSource(), {}) is None
    aws = supply_of_aws(AwsCredentialSource(), {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s1"})
    assert isinstance(aws, FixedCredential) and isinstance(aws.value, AwsCredentials)
    assert aws.value.access_key_id.reveal() == "AKIA1" and aws.value.session_token is None


START = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)


def _metadata(n: int, expires_at: datetime.datetime) -> dict[str, str]:
    return {
        "access_key": f"ASIA{n}",
        "secret_key": f"secret-{n}",
        "token": f"token-{n}",
        "expiry_time": expires_at.isoformat(),
    }


class StsStandIn:
    """What botocore's refresh asks (an STS or metadata endpoint's answer), one per call."""

    def __init__(self, answers: list[dict[str, str] | Exception]) -> None:
        self.answers, self.calls = answers, 0

    def __call__(self) -> dict[str, str]:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


def _session(answers: list[dict[str, str] | Exception]) -> tuple[BotocoreSession, StsStandIn, Clock]:
    """Keys that expire an hour after START (botocore refreshes from 15 minutes before expiry)."""
    sts, clock = StsStandIn(answers), Clock()
    hour = datetime.timedelta(hours=1)
    credentials = RefreshableCredentials(
        "ASIA1", "secret-1", "token-1", START + hour, refresh_using=sts, method="test", time_fetcher=clock
    )
    return BotocoreSession("AWS profile 'test'", credentials), sts, clock


def _aws(supply: BotocoreSession) -> tuple[str, str, str | None]:
    value = supply.value
    assert isinstance(value, AwsCredentials)
    token = value.session_token
    return value.access_key_id.reveal(), value.secret_access_key.reveal(), token.reveal() if token else None


def test_temporary_aws_keys_are_refreshed_before_they_expire() -> None:
    supply, sts, clock = _session([_metadata(2, START + datetime.timedelta(hours=2))])
    assert (_aws(supply), supply.stale(), sts.calls) == (("ASIA1", "secret-1", "token-1"), False, 0)
    clock.now = START + datetime.timedelta(minutes=50)  # inside botocore's 15-minute window
    assert supply.stale()
    assert supply.refresh() is True
    assert _aws(supply) == ("ASIA2", "secret-2", "token-2")
    assert (supply.changes, supply.stale(), sts.calls) == (1, False, 1)


def test_each_aws_refresh_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    hour = datetime.timedelta(hours=1)
    supply, sts, clock = _session([_metadata(2, START + 2 * hour), _metadata(3, START + 3 * hour)])
    with caplog.at_level(logging.INFO, "turnledger.gateway.live_credentials"):
        for n in (2, 3):
            clock.now = START + (n - 1) * hour - datetime.timedelta(minutes=10)
            assert (supply.stale(), supply.refresh()) == (True, True)
            assert (_aws(supply), supply.changes) == ((f"ASIA{n}", f"secret-{n}", f"token-{n}"), n - 1)
    assert sts.calls == 2
    assert caplog.messages == ["AWS profile 'test': temporary credentials refreshed"] * 2


def test_a_new_session_token_alone_is_a_change() -> None:
    """The same key pair with another token (the token is what expires): requests must carry the new one."""
    same_keys = {**_metadata(1, START + datetime.timedelta(hours=2)), "token": "token-2"}
    supply, sts, clock = _session([same_keys])
    clock.now = START + datetime.timedelta(minutes=50)
    assert supply.refresh() is True
    assert (_aws(supply), supply.changes, sts.calls) == (("ASIA1", "secret-1", "token-2"), 1, 1)


def test_a_failed_aws_refresh_keeps_the_keys_it_had(caplog: pytest.LogCaptureFixture) -> None:
    supply, sts, clock = _session([ConnectionError("sts unreachable")])
    clock.now = START + datetime.timedelta(minutes=55)  # inside the mandatory window: botocore raises
    with caplog.at_level(logging.WARNING, "turnledger.gateway.live_credentials"):
        assert supply.refresh() is False
    assert (_aws(supply), supply.changes, sts.calls) == (("ASIA1", "secret-1", "token-1"), 0, 1)
    assert caplog.records[-1].getMessage() == (
        "AWS profile 'test': keeping the credentials read before: refresh failed (ConnectionError)"
    )


def test_static_botocore_keys_are_never_stale() -> None:
    supply = BotocoreSession("AWS profile 'static'", Credentials("AKIA9", "s9"))
    assert (_aws(supply), supply.stale(), supply.refresh()) == (("AKIA9", "s9", None), False, False)


def test_a_profile_is_read_through_botocore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[rotating]\naws_access_key_id = AKIA7\naws_secret_access_key = s7\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    supply = supply_of_aws(AwsCredentialSource(profile="rotating"), {})
    assert isinstance(supply, BotocoreSession)
    assert (supply.name, _aws(supply)) == ("AWS profile 'rotating'", ("AKIA7", "s7", None))


async def test_a_route_refreshes_only_a_stale_credential(tmp_path: Path) -> None:
    path, supply = _watched(tmp_path)
    route = ProviderRoute(
        RouteSettings(name="r", base_url="http://127.0.0.1:1", adapters=("openai-chat",)), supply
    )
    assert (await route.refresh_credential(), route.credential_changes) == (0, 0)
    assert isinstance(route.credential, Secret) and route.credential.reveal() == "key-one"
    _write(path, "key-two", 2_000_000_000)
    assert route.credential.reveal() == "key-one"  # until the next request's refresh
    assert await route.refresh_credential() == 1
    assert route.credential.reveal() == "key-two"
    fixed = ProviderRoute(
        RouteSettings(name="f", base_url="http://127.0.0.1:1", adapters=("openai-chat",)), None
    )
    assert (await fixed.refresh_credential(), fixed.credential) == (0, None)
