"""A secret from a variable or the file it names (kafka/secret.py): never shown, compared by kind and
value, and the settings errors that name the variable, never the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnledger.errors import KafkaSettingsError
from turnledger.kafka.secret import Secret, read_secret, read_text

NAME, FILE = "KAFKA_SASL_PASSWORD", "KAFKA_SASL_PASSWORD_FILE"


def test_a_secret_shows_its_kind_never_its_value() -> None:
    assert repr(Secret("hunter2")) == "Secret('***')"
    assert repr(Secret("hunter2", "Password")) == "Password('***')"
    assert Secret("hunter2").reveal() == "hunter2"


def test_secrets_are_equal_by_kind_and_value_and_hash_alike() -> None:
    assert Secret("a", "Password") == Secret("a", "Password")
    assert Secret("a", "Password") != Secret("b", "Password")
    assert Secret("a", "Password") != Secret("a", "ClientSecret")
    assert Secret("a") != "a"
    assert hash(Secret("a", "Password")) == hash(Secret("a", "Password"))
    assert hash(Secret("a", "Password")) != hash(Secret("b", "Password"))
    assert hash(Secret("a", "Password")) != hash(Secret("a", "ClientSecret"))
    assert len({Secret("a"), Secret("a"), Secret("b")}) == 2


def test_read_secret_from_the_variable_or_the_file(tmp_path: Path) -> None:
    assert read_secret({}, NAME, FILE, "Password") is None
    assert read_secret({NAME: "", FILE: "  "}, NAME, FILE, "Password") is None
    assert read_secret({NAME: " p w "}, NAME, FILE, "Password") == Secret(" p w ", "Password")
    secret = tmp_path / "password"
    secret.write_text("  from-a-file\n")
    assert read_secret({FILE: f" {secret} "}, NAME, FILE, "Password") == Secret("from-a-file", "Password")


def test_read_secret_refusals_name_the_variables(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("\n \n")
    with pytest.raises(KafkaSettingsError) as caught:
        read_secret({NAME: "p", FILE: str(secret)}, NAME, FILE, "Password")
    assert str(caught.value) == "set KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE, not both"
    with pytest.raises(KafkaSettingsError) as caught:
        read_secret({FILE: str(secret)}, NAME, FILE, "Password")
    assert str(caught.value) == f"KAFKA_SASL_PASSWORD_FILE: {secret} is empty"


def test_read_text_says_why_a_file_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(KafkaSettingsError) as caught:
        read_text(FILE, tmp_path / "absent")
    assert (
        str(caught.value)
        == f"KAFKA_SASL_PASSWORD_FILE: cannot read {tmp_path / 'absent'} (No such file or directory)"
    )
    with pytest.raises(KafkaSettingsError) as caught:
        read_text(FILE, tmp_path)
    assert str(caught.value) == f"KAFKA_SASL_PASSWORD_FILE: cannot read {tmp_path} (Is a directory)"
    latin = tmp_path / "latin-1"
    latin.write_bytes("pässwört\n".encode("latin-1"))
    with pytest.raises(KafkaSettingsError) as caught:
        read_text(FILE, latin)
    assert str(caught.value) == f"KAFKA_SASL_PASSWORD_FILE: {latin} is not UTF-8"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_read_text_is_utf_8_and_stripped_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    text = tmp_path / "text"
    text.write_bytes(" pässwört-秘密 \n".encode())
    assert read_text(FILE, text) == "pässwört-秘密"
