"""The devstack's TURNLEDGER_* settings (`devstack/settings.py`) and its state dir: a value that cannot
work is a `DevstackSettingsError` naming the variable, one line, exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli_process import turnledger
from turnledger.devstack import settings as settings_module
from turnledger.devstack.settings import KAFKA_VERSIONS, Settings
from turnledger.devstack.stack import LocalStack
from turnledger.errors import DevstackSettingsError


def test_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TURNLEDGER_DEVSTACK_BACKEND", "TURNLEDGER_KAFKA_READY_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings.from_env()
    assert (settings.backend, settings.ready_timeout_s) == ("auto", 120.0)


@pytest.mark.parametrize(("raw", "backend"), [("", "auto"), (" Local ", "local"), ("DOCKER", "docker")])
def test_a_backend_is_read_in_any_case(monkeypatch: pytest.MonkeyPatch, raw: str, backend: str) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_BACKEND", raw)
    assert Settings.from_env().backend == backend


def test_an_unknown_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_BACKEND", "bogus")
    with pytest.raises(DevstackSettingsError) as refused:
        Settings.from_env()
    assert str(refused.value) == "TURNLEDGER_DEVSTACK_BACKEND='bogus': use one of auto, local, docker"


def test_a_ready_timeout_is_read_in_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLEDGER_KAFKA_READY_TIMEOUT", "2.5")
    assert Settings.from_env().ready_timeout_s == 2.5


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan", "inf", ""])
def test_a_ready_timeout_that_is_no_positive_number_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("TURNLEDGER_KAFKA_READY_TIMEOUT", raw)
    with pytest.raises(DevstackSettingsError) as refused:
        Settings.from_env()
    assert str(refused.value) == f"TURNLEDGER_KAFKA_READY_TIMEOUT={raw!r}: a number of seconds above 0"


def test_a_state_dir_that_is_a_file_is_refused_in_words(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(DevstackSettingsError) as refused:
        LocalStack(afile).state()
    assert str(refused.value) == (
        f"TURNLEDGER_DEVSTACK_DIR: cannot read {afile / 'stack.json'} (Not a directory); point it at a "
        "directory of the devstack's own"
    )


def test_a_missing_or_unreadable_record_is_no_stack(tmp_path: Path) -> None:
    assert LocalStack(tmp_path / "absent").state() is None
    (tmp_path / "stack.json").write_text("{not json")
    assert LocalStack(tmp_path).state() is None


def test_dev_status_says_it_in_one_line_exit_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TURNLEDGER_KAFKA_READY_TIMEOUT": "abc"}
    done = turnledger("dev", "status", env=env, inherit=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "turnledger: TURNLEDGER_KAFKA_READY_TIMEOUT='abc': a number of seconds above 0\n"


def test_demo_refuses_a_log_file_it_cannot_write_before_starting_anything(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "demo.log"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "300"}
    done = turnledger("demo", "--log-file", str(target), "--no-serve", env=env, inherit=False)
    assert done.returncode == 2, done.stderr
    assert f"Invalid value for --log-file: cannot write {target}: No such file or directory" in done.stderr


def test_the_paths_heap_and_versions_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (
        "TURNLEDGER_CACHE_DIR",
        "TURNLEDGER_DEVSTACK_DIR",
        "TURNLEDGER_KAFKA_VERSION",
        "TURNLEDGER_KAFKA_HEAP",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    settings = Settings.from_env()
    checkout = Path(__file__).resolve().parents[2]
    assert (checkout / "pyproject.toml").is_file()
    assert settings.cache_root == tmp_path / ".cache" / "turnledger"
    assert settings.state_dir == checkout / ".devstack"
    assert settings.kafka_versions == KAFKA_VERSIONS == ("4.4.0", "4.3.1")
    assert settings.kafka_heap == "512m"
    assert settings.kafka_cache("4.4.0") == tmp_path / ".cache" / "turnledger" / "kafka-4.4.0"


def test_the_variables_set_the_paths_heap_and_one_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TURNLEDGER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TURNLEDGER_DEVSTACK_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("TURNLEDGER_KAFKA_VERSION", "4.3.1")
    monkeypatch.setenv("TURNLEDGER_KAFKA_HEAP", "1g")
    settings = Settings.from_env()
    assert (settings.cache_root, settings.state_dir) == (tmp_path / "cache", tmp_path / "state")
    assert (settings.kafka_versions, settings.kafka_heap) == (("4.3.1",), "1g")


def test_outside_a_checkout_the_state_dir_is_under_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TURNLEDGER_DEVSTACK_DIR", raising=False)
    monkeypatch.setattr(settings_module, "__file__", str(tmp_path / "a" / "b" / "c" / "settings.py"))
    monkeypatch.chdir(tmp_path)
    assert Settings.from_env().state_dir == tmp_path / ".devstack"


def test_a_ready_timeout_just_above_zero_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLEDGER_KAFKA_READY_TIMEOUT", "0.5")
    assert Settings.from_env().ready_timeout_s == 0.5
