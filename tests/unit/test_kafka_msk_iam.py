"""AWS MSK IAM tokens for OAUTHBEARER: the URL AWS's own signer builds (its signature included), at a
given time, with botocore's keys; the settings that choose it; no keys, a refusal or an outage in
getting them; refreshed through the provider at 80% of their 900 s. No network: the keys are put into a
botocore session as botocore's own credential objects."""

from __future__ import annotations

import base64
import datetime
import importlib.metadata
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import botocore.auth
import botocore.session
import pytest
from botocore.credentials import CredentialProvider, CredentialResolver, Credentials, RefreshableCredentials
from botocore.exceptions import ClientError, EndpointConnectionError, UnauthorizedSSOTokenError

from turnledger.errors import KafkaSettingsError
from turnledger.kafka import msk_iam
from turnledger.kafka.msk_iam import MskIam, auth_token
from turnledger.kafka.oauth import (
    ClientCredentials,
    OAuthTokenProvider,
    TokenFile,
    TokenRefused,
    TokenUnavailable,
    source_from_env,
)

AT = datetime.datetime(2026, 3, 1, 12, 34, 56, tzinfo=datetime.UTC)
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
REGION = "eu-west-1"
DEFAULT = "AWS MSK IAM in eu-west-1 (botocore's default credentials)"
CHAIN = (
    "botocore's default chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the profile AWS_PROFILE names "
    "(else the default one), SSO, web identity, container or instance metadata"
)


def url_of(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def query_of(token: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url_of(token)).query, keep_blank_values=True))


class Found(CredentialProvider):  # type: ignore[misc]
    """A botocore credential provider that finds the credentials it is given (None: finds none)."""

    METHOD = "test"

    def __init__(self, credentials: Any) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> Any:
        return self._credentials


def session_with(credentials: Any) -> botocore.session.Session:
    session = botocore.session.Session()
    session.register_component("credential_provider", CredentialResolver([Found(credentials)]))
    return session


def expired_keys(refresh: Callable[[], dict[str, str]]) -> RefreshableCredentials:
    """Temporary keys already expired, so botocore must refresh them (its mandatory refresh)."""
    return RefreshableCredentials(
        "ASIAEXAMPLE", SECRET_KEY, SESSION_TOKEN, AT - datetime.timedelta(hours=1), refresh, "test"
    )


@pytest.mark.parametrize("token", ["token", None])
def test_the_token_is_aws_signers_url_signature_included(
    monkeypatch: pytest.MonkeyPatch, token: str | None
) -> None:
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    credentials = Credentials("AKIDEXAMPLE", "secret", token)
    pinned = AT.replace(tzinfo=None)  # what botocore's clock gives: UTC without a zone
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda remove_tzinfo=True: pinned)
    theirs, expires_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
        REGION, Found(credentials)
    )
    ours = auth_token(credentials, REGION, AT)

    mine, aws = urlsplit(url_of(ours)), urlsplit(url_of(theirs))
    assert (mine.scheme, mine.netloc, mine.path) == (aws.scheme, aws.netloc, aws.path)
    assert {**query_of(ours), "User-Agent": "-"} == {**query_of(theirs), "User-Agent": "-"}
    assert url_of(ours).rpartition("&User-Agent=")[0] == url_of(theirs).rpartition("&User-Agent=")[0]
    assert query_of(theirs)["User-Agent"] == "aws-msk-iam-sasl-signer-python/1.0.2"
    assert expires_ms == (AT.timestamp() + 900) * 1000


def test_the_token_shape() -> None:
    token = auth_token(Credentials("AKIDEXAMPLE", SECRET_KEY, SESSION_TOKEN), REGION, AT)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token)  # base64url, and no "=" padding
    assert url_of(token).startswith(
        "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm=AWS4-HMAC-SHA256&"
        "X-Amz-Credential=AKIDEXAMPLE%2F20260301%2Feu-west-1%2Fkafka-cluster%2Faws4_request&"
        "X-Amz-Date=20260301T123456Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&"
    )
    query = query_of(token)
    assert query["X-Amz-Security-Token"] == SESSION_TOKEN
    assert query["User-Agent"] == msk_iam.user_agent()
    assert SECRET_KEY not in url_of(token) and SECRET_KEY not in token
    long_term = Credentials("AKIDEXAMPLE", SECRET_KEY)
    assert "X-Amz-Security-Token" not in query_of(auth_token(long_term, REGION, AT))
    with pytest.raises(ValueError, match="timezone-aware"):
        auth_token(long_term, REGION, AT.replace(tzinfo=None))


def test_the_user_agent_names_turnledger_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    assert msk_iam.user_agent() == f"turnledger/{importlib.metadata.version('turnledger')}"

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert msk_iam.user_agent.__wrapped__() == "turnledger/dev"


def test_fetch_signs_now_and_expires_900_s_later() -> None:
    keys = Credentials("AKIDEXAMPLE", SECRET_KEY, SESSION_TOKEN)
    source = MskIam(REGION, session=session_with(keys))
    token = source.fetch(AT.timestamp() + 0.75)
    assert token.expires_at == AT.timestamp() + 900
    assert token.value == auth_token(keys, REGION, AT)
    for shown in (repr(source), source.describe(), source.check()):
        assert SECRET_KEY not in shown and SESSION_TOKEN not in shown
    assert repr(source) == "MskIam(region='eu-west-1', profile=None)"
    assert source.describe() == "AWS MSK IAM in eu-west-1 (botocore's default credentials)"
    assert MskIam(REGION, "ops").describe() == "AWS MSK IAM in eu-west-1 (profile 'ops')"
    assert source.check() == (
        "The broker refused the token of AWS MSK IAM in eu-west-1 (botocore's default credentials): check "
        "that the IAM identity's policy allows kafka-cluster:Connect on the cluster's ARN, that the cluster "
        "has IAM access control on and the address is its IAM listener (port 9098, 9198 public), that "
        "KAFKA_SASL_OAUTHBEARER_AWS_REGION is the cluster's region, and this host's clock (the signature "
        "is dated)."
    )


def test_temporary_keys_are_refreshed_by_botocore_at_each_fetch() -> None:
    fresh = {
        "access_key": "ASIAFRESH",
        "secret_key": "fresh-secret",
        "token": "fresh-token",
        "expiry_time": "2999-01-01T00:00:00Z",
    }
    source = MskIam(REGION, session=session_with(expired_keys(lambda: fresh)))
    query = query_of(source.fetch(AT.timestamp()).value)
    assert query["X-Amz-Credential"].startswith("ASIAFRESH/")
    assert query["X-Amz-Security-Token"] == "fresh-token"


def test_no_credentials_is_a_refusal_saying_where_botocore_looked() -> None:
    with pytest.raises(TokenRefused) as caught:
        MskIam(REGION, session=session_with(None)).fetch(AT.timestamp())
    assert str(caught.value) == f"{DEFAULT}: no AWS credentials found in {CHAIN}"
    assert caught.value.check == (
        "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile in AWS_PROFILE or "
        "KAFKA_SASL_OAUTHBEARER_AWS_PROFILE."
    )
    with pytest.raises(TokenRefused) as caught:
        MskIam(REGION, "ops", session=session_with(None)).fetch(AT.timestamp())
    assert str(caught.value) == "AWS MSK IAM in eu-west-1 (profile 'ops'): the profile has no AWS credentials"
    assert caught.value.check == (
        "Give it keys, a role, an SSO session or a credential_process: check the profile 'ops' "
        "(KAFKA_SASL_OAUTHBEARER_AWS_PROFILE) in the AWS config files (~/.aws/config and "
        "~/.aws/credentials, or AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE)."
    )


def client_error(code: str, status: int) -> ClientError:
    answer = {"Error": {"Code": code, "Message": "no"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(answer, "AssumeRole")


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (EndpointConnectionError(endpoint_url="https://sts.amazonaws.com/"), TokenUnavailable),
        (client_error("Throttling", 400), TokenUnavailable),
        (client_error("InternalFailure", 500), TokenUnavailable),
        (client_error("AccessDenied", 403), TokenRefused),
        (UnauthorizedSSOTokenError(), TokenRefused),
    ],
)
def test_a_failed_refresh_is_an_outage_unless_aws_refused_us(
    failure: Exception, raised: type[Exception]
) -> None:
    def refresh() -> dict[str, str]:
        raise failure

    with pytest.raises(raised) as caught:
        MskIam(REGION, session=session_with(expired_keys(refresh))).fetch(AT.timestamp())
    message = str(caught.value)
    why = f"{DEFAULT}: getting the AWS credentials failed ({type(failure).__name__}: {failure})"
    assert message == why
    if isinstance(caught.value, TokenRefused):
        assert caught.value.check == f"Check {CHAIN}."
    assert SECRET_KEY not in message and SESSION_TOKEN not in message


def test_the_provider_signs_again_at_80_percent_of_900_s() -> None:
    now = [AT.timestamp()]
    source = MskIam(REGION, session=session_with(Credentials("AKIDEXAMPLE", SECRET_KEY)))
    provider = OAuthTokenProvider(source, clock=lambda: now[0])
    first = provider.current()
    now[0] += 719
    assert provider.current() == first
    now[0] += 1
    second = provider.current()
    assert second != first and query_of(second)["X-Amz-Date"] == "20260301T124656Z"
    assert repr(provider) == "OAuthTokenProvider(AWS MSK IAM in eu-west-1 (botocore's default credentials))"


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """AWS config files of our own, so botocore never reads the ones of whoever runs the tests."""
    config = tmp_path / "config"
    config.write_text("[profile ops]\nregion = eu-west-1\n")
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[keys]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    return tmp_path


REGION_VAR = "KAFKA_SASL_OAUTHBEARER_AWS_REGION"
PROFILE_VAR = "KAFKA_SASL_OAUTHBEARER_AWS_PROFILE"
ENDPOINT_VAR = "KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL"
FILE_VAR = "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE"
CLIENT_ID_VAR = "KAFKA_SASL_OAUTHBEARER_CLIENT_ID"


def test_the_region_variable_chooses_msk_iam(aws_files: Path) -> None:
    assert source_from_env({REGION_VAR: " eu-west-1 "}) == MskIam("eu-west-1")
    assert source_from_env({REGION_VAR: "us-gov-west-1"}) == MskIam("us-gov-west-1")
    assert source_from_env({REGION_VAR: "eu-west-1", PROFILE_VAR: "ops"}) == MskIam("eu-west-1", "ops")
    keys = source_from_env({REGION_VAR: "eu-west-1", PROFILE_VAR: "keys"})
    assert isinstance(keys, MskIam) and SECRET_KEY not in repr(keys)
    assert query_of(keys.fetch(AT.timestamp()).value)["X-Amz-Credential"].startswith("AKIDEXAMPLE/")
    token_file = aws_files / "token"
    token_file.write_text("t")
    assert isinstance(source_from_env({FILE_VAR: str(token_file)}), TokenFile)
    client = {
        ENDPOINT_VAR: "https://issuer/token",
        CLIENT_ID_VAR: "c",
        "KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET": "s",
    }
    assert isinstance(source_from_env(client), ClientCredentials)


ONE_SOURCE = (
    "KAFKA_SASL_MECHANISM=OAUTHBEARER needs one source of tokens: KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL "
    "(with KAFKA_SASL_OAUTHBEARER_CLIENT_ID and KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET), "
    "KAFKA_SASL_OAUTHBEARER_TOKEN_FILE or KAFKA_SASL_OAUTHBEARER_AWS_REGION (AWS MSK IAM)"
)
URL = {ENDPOINT_VAR: "https://issuer/token"}
FILE = {FILE_VAR: "/token"}
AWS = {REGION_VAR: "eu-west-1"}


def not_a_region(value: str) -> str:
    return f"{REGION_VAR} must be the AWS region of the MSK cluster, like eu-west-1, not {value!r}"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, ONE_SOURCE),
        ({PROFILE_VAR: "ops"}, ONE_SOURCE),
        (URL | FILE, f"{ONE_SOURCE}, not {ENDPOINT_VAR} and {FILE_VAR} together"),
        (URL | AWS, f"{ONE_SOURCE}, not {ENDPOINT_VAR} and {REGION_VAR} together"),
        (FILE | AWS, f"{ONE_SOURCE}, not {FILE_VAR} and {REGION_VAR} together"),
        (URL | FILE | AWS, f"{ONE_SOURCE}, not {ENDPOINT_VAR}, {FILE_VAR} and {REGION_VAR} together"),
        (AWS | {CLIENT_ID_VAR: "c", "KAFKA_SASL_OAUTHBEARER_SCOPE": "s"},
         f"{CLIENT_ID_VAR}, KAFKA_SASL_OAUTHBEARER_SCOPE set beside {REGION_VAR}: unset them"),
        (AWS | {"KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE": "/s"},
         f"KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET_FILE set beside {REGION_VAR}: unset them"),
        (FILE | {PROFILE_VAR: "ops"}, f"{PROFILE_VAR} set beside {FILE_VAR}: unset them"),
        (URL | {PROFILE_VAR: "ops"}, f"{PROFILE_VAR} set beside {ENDPOINT_VAR}: unset them"),
        ({REGION_VAR: "eu-west"}, not_a_region("eu-west")),
        ({REGION_VAR: "EU-WEST-1"}, not_a_region("EU-WEST-1")),
        ({REGION_VAR: "kafka.eu-west-1.amazonaws.com"}, not_a_region("kafka.eu-west-1.amazonaws.com")),
        (AWS | {PROFILE_VAR: "nope"}, f"{PROFILE_VAR}: no profile 'nope' in the AWS config files "
         "(~/.aws/config and ~/.aws/credentials, or AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE)"),
    ],
)  # fmt: skip
def test_settings_that_cannot_work(aws_files: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaSettingsError) as caught:
        source_from_env(env)
    assert str(caught.value) == message


@pytest.fixture
def tokyo_clock() -> Iterator[None]:
    """The process's local time zone nine hours east of UTC (a POSIX TZ, no tz database needed)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "JST-9")
        time.tzset()
        try:
            yield
        finally:
            patch.undo()
            time.tzset()


def test_the_signature_is_dated_in_utc_whatever_the_hosts_zone(tokyo_clock: None) -> None:
    keys = Credentials("AKIDEXAMPLE", SECRET_KEY)
    elsewhere = AT.astimezone(datetime.timezone(datetime.timedelta(hours=-5)))
    assert query_of(auth_token(keys, REGION, elsewhere))["X-Amz-Date"] == "20260301T123456Z"
    assert auth_token(keys, REGION, elsewhere) == auth_token(keys, REGION, AT)


def test_a_naive_signing_time_is_refused_in_those_words() -> None:
    with pytest.raises(ValueError) as caught:
        auth_token(Credentials("AKIDEXAMPLE", SECRET_KEY), REGION, AT.replace(tzinfo=None))
    assert str(caught.value) == "the signing time must be timezone-aware"


def test_the_token_is_unpadded_base64url_of_the_whole_url_whatever_its_length() -> None:
    """Three access keys one character apart: URLs of each length modulo 3, so with 0, 1 and 2 "=" of
    padding for the encoder to leave out."""
    tail = "&" + urlencode({"User-Agent": msk_iam.user_agent()})
    urls = []
    for access_key in ("AKIDEXAMPLE", "AKIDEXAMPLE1", "AKIDEXAMPLE12"):
        token = auth_token(Credentials(access_key, SECRET_KEY), REGION, AT)
        assert "=" not in token
        url = url_of(token)
        assert url.startswith("https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&")
        assert url.endswith(tail) and f"X-Amz-Credential={access_key}%2F" in url
        urls.append(url)
    assert sorted(len(url.encode()) % 3 for url in urls) == [0, 1, 2]


@pytest.mark.parametrize(("access_key", "secret_key"), [("AKIDEXAMPLE", ""), ("", SECRET_KEY)])
def test_half_a_key_pair_is_no_credentials(access_key: str, secret_key: str) -> None:
    with pytest.raises(TokenRefused) as caught:
        MskIam(REGION, session=session_with(Credentials(access_key, secret_key))).fetch(AT.timestamp())
    assert str(caught.value) == f"{DEFAULT}: no AWS credentials found in {CHAIN}"


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        ({"ResponseMetadata": {"HTTPStatusCode": 403}}, TokenRefused),  # no error code: judged by status
        ({"Error": {"Code": "AccessDenied", "Message": "no"}}, TokenUnavailable),  # no status: as a 500
        ({}, TokenUnavailable),
    ],
)
def test_an_aws_answer_missing_its_code_or_status(answer: dict[str, Any], raised: type[Exception]) -> None:
    failure = ClientError(answer, "AssumeRole")

    def refresh() -> dict[str, str]:
        raise failure

    with pytest.raises(raised) as caught:
        MskIam(REGION, session=session_with(expired_keys(refresh))).fetch(AT.timestamp())
    assert str(caught.value) == f"{DEFAULT}: getting the AWS credentials failed (ClientError: {failure})"


def test_msk_iam_from_env_without_a_region() -> None:
    with pytest.raises(KafkaSettingsError) as caught:
        msk_iam.msk_iam_from_env({})
    assert str(caught.value) == not_a_region("")


def test_aws_config_files_botocore_cannot_parse(aws_files: Path) -> None:
    (aws_files / "config").write_text("[profile ops\nregion = eu-west-1\n")
    with pytest.raises(KafkaSettingsError) as caught:
        source_from_env(AWS | {PROFILE_VAR: "ops"})
    assert str(caught.value) == (
        f"{PROFILE_VAR}: cannot read the AWS config files: "
        f"Unable to parse config file: {aws_files / 'config'}"
    )
