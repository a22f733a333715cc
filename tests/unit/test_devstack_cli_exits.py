"""`turnledger dev up|fetch` that cannot start the stack: the reason on stderr and exit 2, the code every
command gives a stack that is unavailable (`turnledger demo` too); run as a process, nothing started."""

from __future__ import annotations

from pathlib import Path

from tests.unit.cli_process import turnledger
from turnledger.devstack.errors import MavenMissing, RedisServerMissing


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No redis-server or mvn on PATH, an empty jar cache, a state dir of the test's own."""
    (tmp_path / "bin").mkdir()
    return {
        "PATH": str(tmp_path / "bin"),
        "HOME": str(tmp_path),
        "COLUMNS": "1000",
        "TURNLEDGER_DEVSTACK_DIR": str(tmp_path / "state"),
        "TURNLEDGER_CACHE_DIR": str(tmp_path / "cache"),
        "TURNLEDGER_DEVSTACK_BACKEND": "local",
        **extra,
    }


def test_dev_up_that_cannot_start_redis_exits_2(tmp_path: Path) -> None:
    done = turnledger("dev", "up", env=_env(tmp_path, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1"), inherit=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"dev up failed: {RedisServerMissing()}\n"


def test_dev_up_that_cannot_fetch_the_broker_exits_2(tmp_path: Path) -> None:
    env = _env(tmp_path, REDIS_URL="redis://127.0.0.1:1/0")
    done = turnledger("dev", "up", env=env, inherit=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"dev up failed: {MavenMissing()}\n"


def test_dev_fetch_that_cannot_fetch_exits_2(tmp_path: Path) -> None:
    done = turnledger("dev", "fetch", env=_env(tmp_path), inherit=False)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"dev fetch failed: {MavenMissing()}\n"


def test_dev_status_of_no_stack_stays_exit_1(tmp_path: Path) -> None:
    done = turnledger("dev", "status", env=_env(tmp_path), inherit=False)
    assert done.returncode == 1
    assert done.stdout == (
        f"Not running (state dir {tmp_path / 'state'}). Start it with `turnledger dev up`.\n"
    )
