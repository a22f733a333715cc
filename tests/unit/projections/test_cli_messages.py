"""The CLI explains unreachable services instead of printing a traceback."""

from __future__ import annotations

import socket

import orjson
import pytest
import typer
from click.testing import Result
from typer.testing import CliRunner

from tests.unit.cli_entry import said_by_entry_point
from tests.unit.projections.test_reader import KEYS, MemoryRedis, block
from turnledger.kafka.group_member import SessionTimeoutRefusedError
from turnledger.projections import cli as projections_cli
from turnledger.projections.cli import history_command, status_command
from turnledger.projections.settings import FollowSettings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("history")(history_command)
    app.command("status")(status_command)
    return app


def test_unreachable_redis_says_what_was_tried_and_how_to_fix() -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    result = CliRunner().invoke(_app(), ["history", "conv-1", "--redis-url", url])
    assert result.exit_code == 2
    assert url in result.output and "turnledger dev up" in result.output and "REDIS_URL" in result.output


def test_missing_redis_url_is_explained(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("REDIS_URL", raising=False)
    result = CliRunner().invoke(_app(), ["status", "op-1"])
    assert result.exit_code == 2 and "REDIS_URL is not set" in result.output


def _project_app() -> typer.Typer:
    from turnledger.projections.cli import project_command

    app = typer.Typer()
    app.command("project")(project_command)
    app.command("noop")(lambda: None)  # two commands, so "project" stays a subcommand
    return app


def test_follow_waits_for_redis_then_gives_up_after_max_outage_with_the_clear_message() -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    bootstrap = f"127.0.0.1:{_closed_port()}"
    args = ["project", "--redis-url", url, "--bootstrap", bootstrap, "--max-outage", "0.5"]
    result = CliRunner().invoke(_project_app(), args)
    assert result.exit_code == 2, result.output
    assert url in result.output and "turnledger dev up" in result.output


def test_follow_rejects_a_heartbeat_not_below_the_session_timeout() -> None:
    args = [
        "project",
        "--redis-url",
        "redis://x:1/0",
        "--bootstrap",
        "x:1",
        "--heartbeat-interval-ms",
        "10000",
    ]
    result = CliRunner().invoke(_project_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert (
        "--heartbeat-interval-ms 10000 must be below --session-timeout-ms 10000 "
        "(a third of it at most is usual)" in result.output
    )


def test_an_unreachable_redis_is_named_without_its_password() -> None:
    port = _closed_port()
    url = f"redis://gateway:s3cret-pw@127.0.0.1:{port}/0"
    for args in (["history", "conv-1"], ["status", "op-1"]):
        result = CliRunner().invoke(_app(), [*args, "--redis-url", url])
        assert result.exit_code == 2
        assert f"redis://gateway:***@127.0.0.1:{port}/0" in result.output.replace("\n", "")
        assert "s3cret" not in result.output


# ---------------------------------------------------------------- history and status of what is not held


class HeldProjection:
    """`connect` answered by an in-memory projection (`test_reader.MemoryRedis`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.redis = MemoryRedis()
        monkeypatch.setattr(projections_cli, "connect", self.connect)

    async def connect(self, url: str) -> MemoryRedis:
        return self.redis


def _run(*args: str) -> Result:
    return CliRunner().invoke(_app(), [*args, "--redis-url", "redis://h:1/0"], env={"COLUMNS": "80"})


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_history_of_a_conversation_the_projection_does_not_know_is_exit_1_in_one_line(
    monkeypatch: pytest.MonkeyPatch, as_json: list[str]
) -> None:
    held = HeldProjection(monkeypatch)
    held.redis.xadd(KEYS.events("c-other"), {"type": "status", "data": "{}"})
    long_id = "c-" + "x" * 90
    result = _run("history", long_id, "--key-prefix", "tl:", *as_json)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"conversation {long_id!r} is not in the projection (key prefix 'tl:')\n"
    assert held.redis.closed == 1


def test_history_of_a_known_conversation_with_no_committed_turn_is_empty_exit_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = HeldProjection(monkeypatch)
    held.redis.sadd(KEYS.operations("c1"), "op-1")
    result = _run("history", "c1")
    assert result.exit_code == 0, result.output
    assert result.stderr == "no committed history for 'c1' under key prefix 'tl:'\n"
    assert "history of c1" in result.stdout
    as_json = _run("history", "c1", "--json")
    assert as_json.exit_code == 0 and orjson.loads(as_json.stdout) == {
        "conversationId": "c1", "blocks": [], "previews": [], "quarantine": [],
    }  # fmt: skip


def test_history_of_a_conversation_with_blocks_does_not_ask_whether_it_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = HeldProjection(monkeypatch)
    held.redis.hset(KEYS.history("c1"), "b1", block("b1", 0, "hello there").model_dump_json())
    held.redis.zadd(KEYS.history_order("c1"), "b1", 0)
    result = _run("history", "c1", "--no-previews")
    assert (result.exit_code, result.stderr) == (0, "")
    assert "hello there" in result.stdout
    assert "exists" not in held.redis.calls


def test_status_of_an_operation_the_projection_does_not_know_is_exit_1_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    HeldProjection(monkeypatch)
    long_id = "op-" + "y" * 90
    result = _run("status", long_id)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"operation {long_id!r} is not in the projection (key prefix 'tl:')\n"


def test_a_session_timeout_the_broker_refuses_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Raised by the group member's consumer (`kafka/group_member.py`) out of the projector's follow; the
    coordinator's range could not be read, so the line gives Kafka's defaults."""
    from turnledger.projections.projector import Projector

    async def refused(
        self: Projector, stop: object, report: object = None, *, follow: FollowSettings, diagnosed: object
    ) -> None:
        assert follow.group_id is not None
        raise SessionTimeoutRefusedError(self.bootstrap, follow.group_id, follow.session_timeout_ms, None)

    monkeypatch.setattr(Projector, "run_forever", refused)
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    args = ["--redis-url", url, "--bootstrap", "k:1", "--session-timeout-ms", "1000"]
    code, said = said_by_entry_point(monkeypatch, capsys, "project", *args, "--heartbeat-interval-ms", "300")
    assert code == 2
    assert said[-1] == (
        "turnledger: Kafka at 'k:1' refused --session-timeout-ms 1000 for consumer group "
        "'turnledger-projector' (InvalidSessionTimeoutError): the broker takes group.min.session.timeout.ms "
        "to group.max.session.timeout.ms (6000 to 1800000 ms unless set otherwise). Pass a "
        "--session-timeout-ms in that range, or change those broker settings."
    )
    assert not any("Traceback" in line for line in said)
