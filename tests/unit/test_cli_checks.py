"""Shared checks of command-line values (`turnledger/cli_checks.py`), alone and on the commands that use
them: a bad value is a usage error naming the option, exit 2, before anything starts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.unit.cli_process import turnledger
from turnledger import cli_checks
from turnledger.cli import _register, app


@pytest.fixture(scope="module", autouse=True)
def _commands() -> None:
    if not app.registered_groups:
        _register()


@pytest.mark.parametrize(("given", "level"), [("info", "INFO"), ("Debug", "DEBUG"), ("CRITICAL", "CRITICAL")])
def test_a_log_level_is_read_in_any_case(given: str, level: str) -> None:
    assert cli_checks.log_level(given) == level


@pytest.mark.parametrize("given", ["bogus", "", "NOTSET", "WARN ", "10", "FATAL"])
def test_anything_else_is_not_a_log_level(given: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.log_level(given)
    assert str(caught.value) == (
        f"{given!r} is not a logging level: use one of CRITICAL, ERROR, WARNING, INFO, DEBUG"
    )


@pytest.mark.parametrize("given", ["worker-1", "w", "9", "a.b_c-d", "x" * 128])
def test_a_worker_id_of_letters_digits_and_separators_is_kept(given: str) -> None:
    assert cli_checks.worker_id(given) == given


@pytest.mark.parametrize(
    "given", ["", "-w", ".w", "_w", "a/b", "/tmp/abs", "..", "a b", "a:b", "wörker", "x" * 129, "w\n"]
)
def test_an_empty_or_path_like_worker_id_is_refused(given: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.worker_id(given)
    assert str(caught.value) == (
        f"{given!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit, at most 128)"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["process", "--bootstrap", "127.0.0.1:1", "--log-level", "bogus"],
        ["worker", "--bootstrap", "127.0.0.1:1", "--log-level", "bogus"],
        ["tool-executor", "--bootstrap", "127.0.0.1:1", "--log-level", "bogus"],
        [
            "project",
            "--bootstrap",
            "127.0.0.1:1",
            "--redis-url",
            "redis://127.0.0.1:1",
            "--log-level",
            "bogus",
        ],
        ["serve", "--bootstrap", "127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1", "--log-level", "bogus"],
    ],
    ids=["process", "worker", "tool-executor", "project", "serve"],
)
def test_the_commands_refuse_a_bad_log_level_before_starting(args: list[str]) -> None:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--log-level': 'bogus' is not a logging level" in result.output


@pytest.mark.parametrize("option", ["--worker-id", "--recorder-id"])
def test_the_commands_refuse_an_empty_worker_id_before_starting(option: str) -> None:
    command = ["worker"] if option == "--worker-id" else ["legacy", "record", __file__]
    result = CliRunner().invoke(
        app, [*command, "--bootstrap", "127.0.0.1:1", option, ""], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}': '': use letters, digits" in result.output


@pytest.mark.parametrize(
    "given",
    [None, "k:9092", "k", "127.0.0.1:1,k2:65535", " k:1 , [::1]:9093", "[::1]", "::1", "k.example:9092"],
)
def test_bootstrap_servers_as_the_kafka_client_reads_them_are_kept(given: str | None) -> None:
    assert cli_checks.bootstrap(given) == given


@pytest.mark.parametrize(
    ("given", "entry"),
    [
        ("127.0.0.1:abc", "127.0.0.1:abc"),
        ("127.0.0.1:99999", "127.0.0.1:99999"),
        ("k:0", "k:0"),
        ("k:-1", "k:-1"),
        ("k:1,", ""),
        ("", ""),
        (":9092", ":9092"),
        ("[::1]x", "[::1]x"),
        ("k:1,[::1", "[::1"),
    ],
)
def test_a_bootstrap_entry_the_client_would_choke_on_is_refused(given: str, entry: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.bootstrap(given)
    assert str(caught.value) == (
        f"{entry!r} in {given!r}: expected host:port[,host:port], each port from 1 to 65535"
    )


@pytest.mark.parametrize(
    "given",
    ["kafka-0.kafka.svc.cluster.local:9092", "k_1:9092", "k.:9092", "bücher.example:9092", "k" * 63 + ":1"],
)
def test_host_names_the_resolver_takes_are_kept(given: str) -> None:
    assert cli_checks.bootstrap(given) == given


@pytest.mark.parametrize(
    ("given", "entry"),
    [
        ("PLAINTEXT://k:9092", "PLAINTEXT://k:9092"),
        ("k1:9092,http://k2:9092", "http://k2:9092"),
        ("k:9092;k2:9092", "k:9092;k2:9092"),
        ("k 9092", "k 9092"),
        ("a..b:9092", "a..b:9092"),
        ("k" * 64 + ":9092", "k" * 64 + ":9092"),
    ],
)
def test_a_bootstrap_host_no_resolver_takes_is_refused(given: str, entry: str) -> None:
    """A scheme, a `;`, a space: a name no resolver finds, waited out as an outage for ever; an empty or
    too long label: a `UnicodeError` traceback out of the Kafka client's connect."""
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.bootstrap(given)
    assert str(caught.value) == (
        f"{entry!r} in {given!r}: expected host:port[,host:port], each host a host name or IP address "
        "(no scheme, user or path)"
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("SASL_SSL://bob:pw@k:9092", "'SASL_SSL://***@k:9092' in 'SASL_SSL://***@k:9092'"),
        ("k1:1,bob:pw@k2:9092", "'***@k2:9092' in 'k1:1,***@k2:9092'"),
        ("bob:pw@k2", "'***@k2' in '***@k2'"),
    ],
)
def test_a_bootstrap_refusal_does_not_repeat_a_password_given_in_it(given: str, said: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.bootstrap(given)
    assert str(caught.value).startswith(f"{said}: expected host:port[,host:port], each ")
    assert "pw" not in str(caught.value)


@pytest.mark.parametrize(
    "command",
    [["process"], ["worker"], ["tool-executor"], ["replay", "audit"], ["metrics"], ["project"]],
    ids=lambda c: " ".join(c),
)
def test_the_kafka_commands_refuse_a_bad_bootstrap_from_the_flag_or_the_variable(command: list[str]) -> None:
    flag = CliRunner().invoke(app, [*command, "--bootstrap", "127.0.0.1:abc"], env={"COLUMNS": "200"})
    variable = CliRunner().invoke(
        app, command, env={"COLUMNS": "200", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:99999"}
    )
    assert (flag.exit_code, variable.exit_code) == (2, 2), flag.output + variable.output
    assert "'127.0.0.1:abc' in '127.0.0.1:abc': expected host:port" in flag.output
    assert "'127.0.0.1:99999' in '127.0.0.1:99999': expected host:port" in variable.output


@pytest.mark.parametrize(
    "command", [["process", "--max-outage", "1"], ["metrics"]], ids=["process", "metrics"]
)
def test_a_kafka_command_refuses_a_listener_given_as_its_broker_list_before_connecting(
    command: list[str],
) -> None:
    env = {"COLUMNS": "300", "KAFKA_BOOTSTRAP_SERVERS": "PLAINTEXT://127.0.0.1:1"}
    result = CliRunner().invoke(app, command, env=env)
    assert result.exit_code == 2, result.output
    assert (
        "'PLAINTEXT://127.0.0.1:1' in 'PLAINTEXT://127.0.0.1:1': expected host:port[,host:port], each host "
        "a host name or IP address (no scheme, user or path)"
    ) in result.output


@pytest.mark.parametrize("given", ["", "t-api-1a2b3c4d-", "chaos-9f.", "A_b.c-", "p" * 228])
def test_a_topic_prefix_of_topic_name_characters_is_kept(given: str) -> None:
    assert cli_checks.topic_prefix(given) == given


@pytest.mark.parametrize("given", ["bad topic/", "t:1-", "tënant-", "p" * 229])
def test_a_topic_prefix_no_broker_takes_is_refused(given: str) -> None:
    """`p` * 229 + `turnledger.quarantine` is 250 characters, one past Kafka's longest topic name."""
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.topic_prefix(given)
    assert str(caught.value) == (
        f"{given!r}: a topic name takes letters, digits, '.', '_' and '-' only, and a prefix at most 228 of "
        "them (Kafka's 249 less our longest name)"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["process"],
        ["worker"],
        ["tool-executor"],
        ["project"],
        ["metrics"],
        ["serve"],
        ["replay", "audit"],
        ["shadow", "diff", __file__],
        ["legacy", "record", __file__],
    ],
    ids=" ".join,
)
@pytest.mark.timeout(60)  # unchecked, process, worker and project waited for Kafka at 127.0.0.1:1 for ever
def test_every_kafka_command_refuses_such_a_prefix_before_connecting(command: list[str]) -> None:
    """The processor and the projector waited for ever for topics named so, which no broker creates."""
    env = {"COLUMNS": "300", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1/0"}
    result = CliRunner().invoke(app, [*command, "--topic-prefix", "bad topic/"], env=env)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--topic-prefix': 'bad topic/': a topic name takes letters" in result.output


def test_the_worker_refuses_a_journal_dir_that_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    args = ["worker", "--bootstrap", "127.0.0.1:1", "--journal-dir", str(afile)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert f"Invalid value for --journal-dir: cannot make {afile} a directory" in result.output


def test_the_worker_refuses_a_crash_count_that_is_not_a_number(tmp_path: Path) -> None:
    env = {"TURNLEDGER_TEST_CRASH_AT": "journal-handle", "TURNLEDGER_TEST_CRASH_AFTER": "x"}
    args = ["worker", "--bootstrap", "127.0.0.1:1", "--journal-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert "turnledger worker: TURNLEDGER_TEST_CRASH_AFTER='x' is not an integer" in result.output


def test_made_directory_makes_it_with_its_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert cli_checks.made_directory(target, "--x") == target and target.is_dir()
    assert cli_checks.made_directory(target, "--x") == target


def test_an_empty_key_prefix_is_refused() -> None:
    assert cli_checks.key_prefix("tl:") == "tl:"
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.key_prefix("")
    assert str(caught.value) == "must not be empty (the default is 'tl:')"


@pytest.mark.parametrize(
    "command",
    [["history", "c1"], ["status", "op1"], ["project"], ["serve"], ["replay", "rebuild"]],
    ids=" ".join,
)
def test_the_redis_commands_refuse_an_empty_key_prefix_before_connecting(command: list[str]) -> None:
    args = [*command, "--key-prefix", "", "--redis-url", "redis://127.0.0.1:1/0"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--key-prefix': must not be empty (the default is 'tl:')" in result.output


@pytest.mark.parametrize(
    "args",
    [("process", "--max-outage", "0.3"), ("replay", "audit")],
    ids=["process, before any partition", "replay audit"],
)
def test_a_model_registry_override_that_cannot_be_read_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    env = {"TURNLEDGER_MODEL_REGISTRY": "/nonexistent/models.json", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = turnledger(*args, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "turnledger: model registry override '/nonexistent/models.json': [Errno 2] No such file or "
        "directory: '/nonexistent/models.json'"
    )
    assert "Traceback" not in done.stderr


def test_a_size_limit_the_worker_cannot_read_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {"TURNLEDGER_MAX_BLOCK_BYTES": "abc", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = turnledger("worker", "--journal-dir", str(tmp_path), env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == "turnledger: TURNLEDGER_MAX_BLOCK_BYTES='abc' is not an integer"
    assert "Traceback" not in done.stderr


def test_a_one_shot_command_without_logging_quiets_the_kafka_clients_own_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aiokafka = logging.getLogger("aiokafka")
    monkeypatch.setattr(aiokafka, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    cli_checks.quiet_kafka_client_logs()
    assert aiokafka.level == logging.CRITICAL


def test_a_command_that_logs_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    aiokafka = logging.getLogger("aiokafka")
    monkeypatch.setattr(aiokafka, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    cli_checks.quiet_kafka_client_logs()
    assert aiokafka.level == logging.NOTSET


GROUP_COMMANDS = [["worker"], ["process"], ["project", "--redis-url", "redis://127.0.0.1:1/0"]]


@pytest.mark.parametrize("command", GROUP_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("given", "said"),
    [("0", "greater than or equal to 1"), ("2147483648", "less than or equal to 2147483647")],
)
def test_every_group_command_refuses_a_session_timeout_no_broker_takes(
    command: list[str], given: str, said: str
) -> None:
    args = [*command, "--bootstrap", "127.0.0.1:1", "--max-outage", "0", "--session-timeout-ms", given]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--session-timeout-ms': Input should be {said}" in result.output


def test_the_group_commands_share_one_session_timeout_option() -> None:
    from turnledger.gateway.cli import worker
    from turnledger.processors.cli import process
    from turnledger.projections.cli import project_command

    annotations = [f.__annotations__["session_timeout_ms"] for f in (worker, process, project_command)]
    assert annotations == ["cli_checks.SessionTimeoutMs"] * 3


class RunWorker:
    """`run_worker` as the worker command calls it, recording the session timeout; nothing starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.session_timeouts: list[int] = []
        monkeypatch.setattr("turnledger.gateway.cli.run_worker", self.run)

    async def run(self, *args: object, session_timeout_ms: int, **kwargs: object) -> None:
        self.session_timeouts.append(session_timeout_ms)


@pytest.mark.parametrize("given", [501, 5_999, 2**31 - 1])
def test_the_worker_takes_a_session_timeout_a_broker_may_allow(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: int
) -> None:
    ran = RunWorker(monkeypatch)
    args = ["worker", "--bootstrap", "127.0.0.1:1", "--journal-dir", str(tmp_path), "--session-timeout-ms"]
    result = CliRunner().invoke(app, [*args, str(given)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert ran.session_timeouts == [given]


def test_the_worker_refuses_a_session_timeout_its_heartbeat_is_not_below(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran = RunWorker(monkeypatch)
    journal = tmp_path / "journal"
    args = [
        "worker",
        "--bootstrap",
        "127.0.0.1:1",
        "--journal-dir",
        str(journal),
        "--session-timeout-ms",
        "500",
    ]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert (
        "Invalid value: --session-timeout-ms 500 must be above the worker's heartbeat interval, 500 ms "
        "(a quarter of the session timeout, at least 500)"
    ) in result.output
    assert ran.session_timeouts == [] and not journal.exists()
    static = CliRunner().invoke(app, [*args, "--static"], env={"COLUMNS": "300"})
    assert static.exit_code == 0, static.output
    assert ran.session_timeouts == [500], "without a group the worker has no session to time out"


@pytest.mark.parametrize("given", [0.0, -1.5, 1e300, 3.0])
def test_a_finite_number_is_kept(given: float) -> None:
    assert cli_checks.finite(given) == given


@pytest.mark.parametrize(
    ("given", "shown"), [(float("inf"), "inf"), (float("-inf"), "-inf"), (float("nan"), "nan")]
)
def test_a_number_that_is_not_finite_is_refused(given: float, shown: str) -> None:
    with pytest.raises(typer.BadParameter) as caught:
        cli_checks.finite(given)
    assert str(caught.value) == f"{shown} is not a finite number"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["worker", "--lease-seconds", "86401"], "Invalid value for '--lease-seconds'"),
        (["worker", "--lease-seconds", "inf"], "Invalid value for '--lease-seconds'"),
        (
            ["legacy", "record", "x.jsonl", "--timeout", "inf"],
            "Invalid value for '--timeout': inf is not a finite",
        ),
        (
            ["legacy", "record", "x.jsonl", "--timeout", "nan"],
            "Invalid value for '--timeout': ",
        ),
    ],
    ids=["lease past a day", "lease inf", "legacy timeout inf", "legacy timeout nan"],
)
def test_a_float_option_out_of_its_range_is_a_usage_error(argv: list[str], said: str) -> None:
    """Before, `--lease-seconds inf` passed and the worker failed at its first attempt (OverflowError),
    and `legacy record --timeout inf` waited for ever."""
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "240"})
    assert result.exit_code == 2
    assert said in " ".join(result.output.split())
