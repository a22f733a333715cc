"""`turnledger process --processes 2` ends on a refusal as `turnledger process` does: the same one line
(`cli_refusals.PROCESS_ENDINGS`: the entry point's, or `process`'s own), exit 2, no traceback. The
children are spawned for real."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest

from tests.unit.cli_entry import said_by_entry_point
from tests.unit.cli_process import turnledger
from tests.unit.multiproc_fakes import REFUSALS, child_main_refused, speaker
from turnledger.kafka import connection
from turnledger.processors.config import ProcessorExit
from turnledger.processors.multiproc import ProcessGroup

FOLD = "tests.unit.multiproc_fakes:fold"


@pytest.mark.parametrize(
    "refusal",
    [
        "kafka-access",
        "kafka-settings",
        "redis-access",
        "limits",
        "metrics-port",
        "kafka-unavailable",
        "topic-mismatch",
    ],
)
def test_processes_end_a_refusal_as_one_process_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], refusal: str
) -> None:
    """One process meets the refusal in its app's run; with --processes 2, each spawned child does
    (`multiproc_fakes.child_main_refused`)."""
    from turnledger.processors import cli

    error = REFUSALS[refusal]()

    class Refused:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        async def run(self) -> dict[int, ProcessorExit]:
            raise error

        def readiness(self) -> str | None:
            return None

    monkeypatch.setattr(cli, "ProcessorApp", Refused)
    monkeypatch.setattr(
        cli, "ProcessGroup", partial(ProcessGroup, target=partial(child_main_refused, refusal))
    )
    args = ["process", "--bootstrap", "k:1", "--fold", FOLD]
    one_code, one = said_by_entry_point(monkeypatch, capsys, *args)
    two_code, two = said_by_entry_point(monkeypatch, capsys, *args, "--processes", "2")
    assert (one_code, one[-1:]) == (2, [f"{speaker(refusal)}: {error}"])
    assert (two_code, two[-1:]) == (one_code, one[-1:])
    assert not any("Traceback" in line for line in one + two)


BOGUS = (
    "turnledger: KAFKA_SECURITY_PROTOCOL must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, not 'BOGUS'"
)


def test_a_kafka_setting_that_cannot_work_ends_processes_as_one_process() -> None:
    """Nothing faked: `process` reads the KAFKA_* settings at start, as its first client would, so with
    --processes 2 the parent says the refusal once and starts no child."""
    args = ["process", "--bootstrap", "127.0.0.1:1", "--fold", FOLD]
    for processes in ("1", "2"):
        ran = turnledger(*args, "--processes", processes, env={"KAFKA_SECURITY_PROTOCOL": "BOGUS"})
        said = ran.stderr.splitlines()
        assert (ran.returncode, said[-1:], ran.stderr.count(BOGUS)) == (2, [BOGUS], 1), ran.stderr
        assert "started process" not in ran.stderr
        assert "Traceback" not in ran.stderr


@pytest.fixture
def kafka_settings_read_anew() -> Iterator[None]:
    """`connection.security()` reads the environment once per process: again in this test, and after it."""
    connection.security.cache_clear()
    yield
    connection.security.cache_clear()


@pytest.mark.usefixtures("kafka_settings_read_anew")
def test_a_kafka_setting_that_cannot_work_is_refused_before_any_child_is_spawned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Group members: the parent builds no Kafka client, yet reads the settings before it spawns."""
    spawning: list[ProcessGroup] = []
    monkeypatch.setattr(ProcessGroup, "_start", lambda group, loop: spawning.append(group))
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "BOGUS")
    args = ["process", "--bootstrap", "127.0.0.1:1", "--fold", FOLD, "--processes", "2"]
    code, said = said_by_entry_point(monkeypatch, capsys, *args)
    assert (code, said, spawning) == (2, [BOGUS], [])
