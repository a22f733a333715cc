"""Credentials (`gateway/credentials.py`): where each is read from, what each refusal says (where, never
what), AWS keys from variables or a botocore profile, and a Secret that neither prints nor pickles."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from turnledger.gateway.credentials import (
    AwsCredentials,
    AwsCredentialSource,
    CredentialError,
    Secret,
    SecretSource,
)
from turnledger.gateway.redaction import REDACTOR


def test_a_secret_shows_only_stars_and_refuses_to_be_pickled_or_empty() -> None:
    secret = Secret("sk-credential-test-4711")
    assert (repr(secret), str(secret), f"{secret}") == ("Secret('***')",) * 3
    assert secret.reveal() == "sk-credential-test-4711"
    assert REDACTOR.scrub("x sk-credential-test-4711") == "x ***"
    with pytest.raises(TypeError, match=r"^a Secret is not serializable$"):
        pickle.dumps(secret)
    with pytest.raises(ValueError, match=r"^a secret cannot be empty$"):
        Secret("")


def test_a_source_names_exactly_one_place() -> None:
    for env, file in ((None, None), ("A", Path("f"))):
        with pytest.raises(
            ValueError, match=r"^a secret source names exactly one of an environment variable or a file$"
        ):
            SecretSource(env=env, file=file)
    assert SecretSource(env="A").where == "environment variable A"
    assert SecretSource(file=Path("/k/f")).where == "file /k/f"


def test_a_variable_is_read_stripped_and_unset_or_blank_is_none() -> None:
    source = SecretSource(env="KEY")
    read = source.read({"KEY": "  sk-from-env-123 \n"})
    assert read is not None and read.reveal() == "sk-from-env-123"
    assert source.read({}) is None and source.read({"KEY": "  "}) is None
    with pytest.raises(CredentialError) as refused:
        source.require({}, "route openai")
    assert str(refused.value) == "route openai: the credential environment variable KEY is not set"


def test_a_file_is_read_as_utf8_stripped_and_must_exist_and_hold_something(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes("  sk-fïle-key-123\n".encode())
    read = SecretSource(file=path).read({})
    assert read is not None and read.reveal() == "sk-fïle-key-123"
    path.write_text(" \n")
    with pytest.raises(CredentialError) as empty:
        SecretSource(file=path).read({})
    assert str(empty.value) == f"the credential file {path} is empty"
    missing = tmp_path / "missing"
    with pytest.raises(CredentialError) as unreadable:
        SecretSource(file=missing).read({})
    assert str(unreadable.value) == f"cannot read the credential file {missing}: No such file or directory"


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIACRED000111",
    "AWS_SECRET_ACCESS_KEY": "cred/secret/000222333",
    "AWS_SESSION_TOKEN": "cred-session-token-444",
}


def _values(credentials: AwsCredentials | None) -> tuple[str, str, str | None] | None:
    if credentials is None:
        return None
    token = credentials.session_token.reveal() if credentials.session_token else None
    return credentials.access_key_id.reveal(), credentials.secret_access_key.reveal(), token


def test_aws_credentials_from_variables_need_both_keys() -> None:
    source = AwsCredentialSource()
    assert _values(source.read(AWS_ENV)) == (
        "AKIACRED000111",
        "cred/secret/000222333",
        "cred-session-token-444",
    )
    without_token = {k: v for k, v in AWS_ENV.items() if k != "AWS_SESSION_TOKEN"}
    assert _values(source.read(without_token)) == ("AKIACRED000111", "cred/secret/000222333", None)
    assert _values(AwsCredentialSource(session_token=None).read(AWS_ENV)) == (
        "AKIACRED000111", "cred/secret/000222333", None,
    )  # fmt: skip
    for missing in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        partial = {k: v for k, v in AWS_ENV.items() if k != missing}
        assert source.read(partial) is None
    with pytest.raises(CredentialError) as refused:
        source.require({"AWS_ACCESS_KEY_ID": "AKIACRED000111"}, "route bedrock")
    assert str(refused.value) == (
        "route bedrock: AWS credentials not set "
        "(environment variable AWS_ACCESS_KEY_ID and environment variable AWS_SECRET_ACCESS_KEY)"
    )


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """botocore's shared files, here: a profile with a session token, one without, one with nothing."""
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[with-token]\naws_access_key_id = AKIAPROFILE000111\naws_secret_access_key = profile/secret/222\n"
        "aws_session_token = profile-token-333\n"
        "[plain]\naws_access_key_id = AKIAPLAIN000444\naws_secret_access_key = plain/secret/555\n"
    )
    config = tmp_path / "config"
    config.write_text("[profile empty]\nregion = eu-west-1\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


@pytest.mark.usefixtures("aws_files")
def test_aws_credentials_from_a_botocore_profile() -> None:
    """A profile wins over the variables; a profile without credentials, or unknown, is refused by name."""
    with_token = AwsCredentialSource(profile="with-token").read(AWS_ENV)
    assert _values(with_token) == ("AKIAPROFILE000111", "profile/secret/222", "profile-token-333")
    assert _values(AwsCredentialSource(profile="plain").read({})) == (
        "AKIAPLAIN000444",
        "plain/secret/555",
        None,
    )
    with pytest.raises(CredentialError) as empty:
        AwsCredentialSource(profile="empty").read({})
    assert str(empty.value) == (
        "AWS profile 'empty' has no credentials: botocore looked in the profile's entries of the shared "
        "credentials and config files (and what they name: a role, SSO, a process), then the container and "
        "instance metadata endpoints; a metadata endpoint that did not answer in time counts as none "
        "(AWS_METADATA_SERVICE_TIMEOUT and "
        "AWS_METADATA_SERVICE_NUM_ATTEMPTS give it longer)"
    )
    with pytest.raises(CredentialError) as unknown:
        AwsCredentialSource(profile="nope").read({})
    assert str(unknown.value) == "AWS profile 'nope': ProfileNotFound"
