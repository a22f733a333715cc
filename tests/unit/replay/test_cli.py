"""`turnledger replay audit|manifest|rebuild`, `turnledger shadow diff` and `turnledger metrics`
(`replay/cli.py`), with what they call faked: what each command hands the replay code (the bootstrap,
the topics, the limits it exports, the keys), what it prints (recorded, tables cell by cell) and its
exit code. The replay code itself has its own tests (`test_audit_*.py`, `test_manifest_check.py`,
`test_shadow_matching.py`, `test_metrics*.py`); on the real broker: tests/integration/replay."""

from __future__ import annotations

import time
from io import StringIO
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from redis.asyncio.cluster import RedisCluster
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner, Result

from tests.unit.progress_helpers import FakeProgress, console_on, seen
from turnledger.cli import _register, app
from turnledger.errors import ProjectionError
from turnledger.model.limits import Limits
from turnledger.processors.limits_config import LIMIT_ENV, describe, load_limits
from turnledger.projections.keys import ProjectionKeys
from turnledger.projections.projector import ProjectorStats
from turnledger.replay import cli
from turnledger.replay.audit import AuditReport, Coordinates, Divergence
from turnledger.replay.manifest_check import Check, ManifestCheck
from turnledger.replay.metrics import Metrics
from turnledger.replay.metrics_report import metrics_json
from turnledger.replay.rebuild import RebuildReport
from turnledger.replay.semantic_diff import Difference, DiffKind, Side
from turnledger.replay.shadow import LegacyRequest, ShadowResult
from turnledger.topology import Topics


class Recorder:
    """Stands for `cli.console` and `cli.err`: every `print` with its keywords."""

    def __init__(self) -> None:
        self.printed: list[tuple[Any, dict[str, Any]]] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        [one] = objects
        self.printed.append((one, kwargs))

    @property
    def texts(self) -> list[Any]:
        """What was printed as Rich markup would spell it (the consoles take no markup: a style is a
        keyword or a `Text`'s), tables as (title, rows)."""
        return [
            rows_of(one) if isinstance(one, Table) else spelled(one, kw.get("style"))
            for one, kw in self.printed
        ]


def spelled(one: Any, style: str | None = None) -> Any:
    text = one.markup if isinstance(one, Text) else one
    return f"[{style}]{text}[/{style}]" if style and isinstance(text, str) else text


def rows_of(table: Table) -> tuple[Any, list[tuple[str, ...]]]:
    columns = [[spelled(cell) for cell in column._cells] for column in table.columns]
    return table.title, [tuple(row) for row in zip(*columns, strict=True)]


@pytest.fixture
def out(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(cli, "console", recorder)
    return recorder


@pytest.fixture
def err(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(cli, "err", recorder)
    return recorder


@pytest.fixture
def shared_err(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """`projections.cli.err`, where `require` and `run` print."""
    recorder = Recorder()
    monkeypatch.setattr("turnledger.projections.cli.err", recorder)
    return recorder


def not_set(name: str, flag: str, command: str) -> str:
    return (
        f"turnledger {command}: {name} is not set. Set {name} or pass {flag}; for a local stack run "
        "`turnledger dev up` and export the variables it prints."
    )


def kafka_not_set(command: str) -> str:
    return not_set("KAFKA_BOOTSTRAP_SERVERS", "--bootstrap", command)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No bootstrap, Redis or limit from the machine; the limits a command exports are undone after."""
    for var in ("KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL", *LIMIT_ENV.values()):
        monkeypatch.delenv(var, raising=False)


METRICS = typer.Typer()
METRICS.command("metrics")(cli.metrics_command)
METRICS.command("unused")(lambda: None)  # two commands: `metrics` stays a subcommand
APPS = {"replay": cli.replay_app, "shadow": cli.shadow_app, "metrics": METRICS}


DIGEST = "sha256:" + "0123456789abcdef" * 4
"""A manifest digest of the ledger's form."""


def invoke(*args: str) -> Result:
    """The command as `turnledger ...` runs it, from its own group (building the whole CLI's costs
    a second an invocation)."""
    group = APPS[args[0]]
    return CliRunner().invoke(group, list(args if group is METRICS else args[1:]))


def test_the_groups_are_the_cli_s() -> None:
    _register()
    groups = {info.name: info.typer_instance for info in app.registered_groups}
    assert (groups["replay"], groups["shadow"]) == (cli.replay_app, cli.shadow_app)
    # (`_register` adds its commands again each time it is called)
    assert {c.callback for c in app.registered_commands if c.name == "metrics"} == {cli.metrics_command}


@pytest.mark.parametrize(
    ("group", "words", "commands"),
    [
        (
            "replay",
            "Re-fold the ingress log, reproduce manifests, rebuild projections.",
            ("audit", "manifest", "rebuild"),
        ),
        ("shadow", "Compare legacy provider requests with our manifests.", ("diff",)),
    ],
)
def test_a_group_without_a_command_shows_its_help(group: str, words: str, commands: tuple[str, ...]) -> None:
    result = invoke(group)
    assert result.exit_code == 2
    assert words in [line.strip() for line in result.output.splitlines()]
    assert "Missing command" not in result.output
    listed = [
        line.split()[1] for line in result.output.splitlines() if line.startswith("│ ") and "  " in line[2:]
    ]
    assert [name for name in listed if name in commands] == list(commands)


def test_shadow_diff_is_a_subcommand_of_shadow() -> None:
    result = invoke("shadow", "diff", "--help")
    assert result.exit_code == 0
    assert "Usage: root diff [OPTIONS] {legacy" in result.output


LIMIT_ARGS = [
    "--max-block-bytes", "1001", "--max-deltas-per-block", "1002", "--max-blocks-per-turn", "1003",
    "--max-record-bytes", "1004", "--max-turn-bytes", "1005", "--max-held-deltas", "1006",
]  # fmt: skip
GIVEN = Limits(1001, 1002, 1003, 1004, 1005, 1006)


# ---------------------------------------------------------------------------------------------- audit


def test_the_bars_of_audit_manifest_and_shadow_show_done_of_total_on_the_error_console_and_go_away() -> None:
    progress = cli._bars()
    assert progress.console is cli.err and progress.live.transient
    kinds = [type(column) for column in progress.columns]
    assert kinds == [TextColumn, BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn]
    texts = [column.text_format for column in progress.columns if isinstance(column, TextColumn)]
    assert texts == ["{task.description}", "{task.fields[unit]}"]


def drawing_consoles(monkeypatch: pytest.MonkeyPatch, err_is_a_terminal: bool) -> tuple[StringIO, StringIO]:
    """The real bars on real consoles: stdout a terminal too, so a bar drawn there would show."""
    (stdout, printed), (stderr, drawn) = console_on(True), console_on(err_is_a_terminal)
    monkeypatch.setattr(cli, "console", stdout)
    monkeypatch.setattr(cli, "err", stderr)
    return printed, drawn


class FakeAudit:
    def __init__(self, report: AuditReport) -> None:
        self.report = report
        self.calls: list[tuple[str, Topics]] = []
        self.exported: Limits | None = None

    async def __call__(self, bootstrap: str, topics: Topics, progress: Any) -> AuditReport:
        """Tells the fold's progress, then each output topic's, the last two out of their order (the
        bar is the topic's)."""
        self.calls.append((bootstrap, topics))
        self.exported = load_limits()
        progress("ingress", 0, 9)
        progress("ingress", 9, 9)
        for n, topic in enumerate(topics.outputs[:4]):
            progress(topic, n, 4)
        progress(topics.rejections, 13, 14)
        progress(topics.previews, 2, 3)
        return self.report


AUDIT_TOLD = [
    (41, 0, 9),
    (41, 9, 9),
    (42, 0, 4),
    (43, 1, 4),
    (44, 2, 4),
    (45, 3, 4),
    (47, 13, 14),
    (46, 2, 3),
]


def audit_bars(prefix: str) -> list[tuple[str, Any, dict[str, Any]]]:
    return [
        (f"folding {prefix}turnledger.ingress", None, {"unit": "offsets"}),
        *(
            (f"reading {prefix}turnledger.{stream}", None, {"unit": "offsets"})
            for stream in ("committed", "manifests", "tool-calls", "quarantine", "previews", "rejections")
        ),
    ]


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> FakeProgress:
    """`replay audit`'s, `replay manifest`'s, `replay rebuild`'s, `shadow diff`'s and `metrics`'."""
    fake = FakeProgress()
    monkeypatch.setattr(cli, "_bars", lambda: fake)
    return fake


def audited(monkeypatch: pytest.MonkeyPatch, report: AuditReport) -> FakeAudit:
    fake = FakeAudit(report)
    monkeypatch.setattr("turnledger.replay.audit.audit", fake)
    return fake


DEFAULTS = Limits()


def summary(report: AuditReport, limits: Limits = DEFAULTS) -> tuple[str, list[tuple[str, str]]]:
    return "replay audit", [
        ("ingress records folded", str(report.ingress_records)),
        ("expected output records", str(report.expected)),
        ("output records on the topics", str(report.actual)),
        ("records checked", str(report.checked)),
        ("of them written with an older schema version", str(report.older_versions)),
        ("divergences", str(len(report.divergences))),
        ("seconds", f"{report.seconds:.2f}"),
        ("size limits", describe(limits)),
    ]


def test_an_audit_with_no_divergence_says_so_under_its_summary(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, bars: FakeProgress
) -> None:
    report = AuditReport(
        ingress_records=11, expected=12, actual=13, checked=14, older_versions=2, seconds=1.256
    )
    fake = audited(monkeypatch, report)
    result = invoke("replay", "audit", "--bootstrap", "k1:9092", "--topic-prefix", "pre.", *LIMIT_ARGS)
    assert result.exit_code == 0, result.output
    assert fake.calls == [("k1:9092", Topics("pre."))]
    assert fake.exported == GIVEN, "the refold reads the limits given from the environment"
    assert (bars.tasks, bars.updated, bars.open) == (audit_bars("pre."), AUDIT_TOLD, False)
    assert out.texts == [
        summary(report, GIVEN),
        "[green]the output topics are exactly the fold of the ingress log[/green]",
    ]
    [(table, _), _] = out.printed
    assert table.show_header is False


def divergence(n: int, actual: Coordinates | None, source: Coordinates | None) -> Divergence:
    return Divergence("differs", "committed", f"c{n}", n, actual, source)


def test_divergences_are_listed_up_to_the_limit_and_fail_the_audit(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, bars: FakeProgress
) -> None:
    found = [
        divergence(0, Coordinates("t.out", 1, 70), Coordinates("t.in", 0, 5)),
        divergence(1, None, Coordinates("t.in", 2, 6)),
        divergence(2, Coordinates("t.out", 0, 9), None),
    ]
    report = AuditReport(ingress_records=3, divergences=found, seconds=2.5)
    audited(monkeypatch, report)
    result = invoke("replay", "audit", "--bootstrap", "k:1", "--limit", "2")
    assert result.exit_code == 1
    assert out.texts == [
        summary(report),
        (
            "divergences (first 2)",
            [
                ("differs", "committed", "c0", "0", "t.out[1]@70", "t.in[0]@5"),
                ("differs", "committed", "c1", "1", "-", "t.in[2]@6"),
            ],
        ),
    ]
    table = out.printed[1][0]
    assert [(c.header, c.overflow) for c in table.columns] == [
        ("kind", "fold"), ("stream", "fold"), ("key", "fold"), ("#", "fold"),
        ("topic record (partition@offset)", "fold"), ("ingress source", "fold"),
    ]  # fmt: skip
    result = invoke("replay", "audit", "--bootstrap", "k:1")
    assert result.exit_code == 1
    assert out.texts[-1] == (
        "divergences (first 3)",
        [
            ("differs", "committed", "c0", "0", "t.out[1]@70", "t.in[0]@5"),
            ("differs", "committed", "c1", "1", "-", "t.in[2]@6"),
            ("differs", "committed", "c2", "2", "t.out[0]@9", "-"),
        ],
    )


def test_an_audit_lists_at_most_50_divergences_unless_told(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, bars: FakeProgress
) -> None:
    found = [divergence(n, None, None) for n in range(51)]
    audited(monkeypatch, AuditReport(divergences=found))
    assert invoke("replay", "audit", "--bootstrap", "k:1").exit_code == 1
    title, rows = out.texts[1]
    assert (title, len(rows), rows[-1][2]) == ("divergences (first 50)", 50, "c49")


def test_an_audit_without_a_bootstrap_stops_before_reading(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, bars: FakeProgress, shared_err: Recorder
) -> None:
    fake = audited(monkeypatch, AuditReport())
    result = invoke("replay", "audit")
    assert result.exit_code == 2
    assert shared_err.texts == [kafka_not_set("replay audit")]
    assert fake.calls == [] and out.printed == [] and bars.tasks == []


def test_an_audit_called_as_a_function_has_the_command_s_defaults(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, bars: FakeProgress
) -> None:
    """(typer passes every option; a caller in Python gets the function's own defaults)"""
    fake = audited(monkeypatch, AuditReport(divergences=[divergence(n, None, None) for n in range(51)]))
    with pytest.raises(typer.Exit) as exited:
        cli.audit_command(bootstrap="k:1")
    assert exited.value.exit_code == 1
    assert fake.calls == [("k:1", Topics(""))] and fake.exported == Limits()
    title, rows = out.texts[1]
    assert (title, len(rows)) == ("divergences (first 50)", 50)
    assert (bars.tasks, bars.updated) == (audit_bars(""), AUDIT_TOLD)


@pytest.mark.parametrize("err_is_a_terminal", [True, False])
def test_an_audit_draws_its_bars_on_the_error_console_only_and_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, err_is_a_terminal: bool
) -> None:
    """Not a terminal: not a character on stderr, not even a blank line."""
    audited(monkeypatch, AuditReport())
    printed, drawn = drawing_consoles(monkeypatch, err_is_a_terminal)
    result = invoke("replay", "audit", "--bootstrap", "k:1", "--topic-prefix", "p.")
    assert result.exit_code == 0, result.output
    if err_is_a_terminal:
        bars = [line.split() for line in seen(drawn).splitlines() if line.strip()]
        assert [(b[:-4], b[-3:-1]) for b in bars[-7:]] == [  # as the bars were last drawn
            (["folding", "p.turnledger.ingress"], ["9/9", "offsets"]),
            (["reading", "p.turnledger.committed"], ["0/4", "offsets"]),
            (["reading", "p.turnledger.manifests"], ["1/4", "offsets"]),
            (["reading", "p.turnledger.tool-calls"], ["2/4", "offsets"]),
            (["reading", "p.turnledger.quarantine"], ["3/4", "offsets"]),
            (["reading", "p.turnledger.previews"], ["2/3", "offsets"]),
            (["reading", "p.turnledger.rejections"], ["13/14", "offsets"]),
        ]
    else:
        assert drawn.getvalue() == ""
    assert "offsets" not in seen(printed) and "the output topics are exactly the fold" in seen(printed)


# ------------------------------------------------------------------------------------------- manifest


class FakeReproduce:
    def __init__(self, checks: list[ManifestCheck]) -> None:
        self.checks = checks
        self.calls: list[tuple[Any, ...]] = []

    async def __call__(
        self, bootstrap: str, topics: Topics, operation_id: Any, digest: Any, progress: Any
    ) -> Any:
        """Tells the progress of the three topics, out of their order (the bar is the topic's)."""
        self.calls.append((bootstrap, topics, operation_id, digest, load_limits()))
        progress(topics.ingress, 1, 9)
        progress(topics.manifests, 2, 2)
        progress(topics.committed, 0, 3)
        return self.checks


def manifest_bars(prefix: str) -> list[tuple[str, Any, dict[str, Any]]]:
    return [
        (f"reading {prefix}turnledger.{topic}", None, {"unit": "offsets"})
        for topic in ("manifests", "committed", "ingress")
    ]


MANIFEST_TOLD = [(43, 1, 9), (41, 2, 2), (42, 0, 3)]


def reproducing(monkeypatch: pytest.MonkeyPatch, checks: list[ManifestCheck]) -> FakeReproduce:
    fake = FakeReproduce(checks)
    monkeypatch.setattr("turnledger.replay.manifest_check.reproduce", fake)
    return fake


def manifest(op: str, checks: list[Check], error: str | None = None) -> ManifestCheck:
    return ManifestCheck(op, f"sha256:{op}", "openai-chat@1", 4, checks, error)


def test_each_reproduced_manifest_is_a_table_of_its_bindings(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    long = "x" * 80
    checks = [
        manifest("op-1", [Check("request bytes", "a" * 79, "a" * 79), Check("digest", long, long)]),
        manifest("op-1", [Check("tools", "t", "t")]),
    ]
    fake = reproducing(monkeypatch, checks)
    result = invoke("replay", "manifest", "op-1", "--bootstrap", "k:1", "--topic-prefix", "p.", *LIMIT_ARGS)
    assert result.exit_code == 0, result.output
    assert fake.calls == [("k:1", Topics("p."), "op-1", None, GIVEN)]
    assert err.texts == [f"size limits: {describe(GIVEN)}"]
    assert (bars.tasks, bars.updated, bars.open) == (manifest_bars("p."), MANIFEST_TOLD, False)
    assert out.texts == [
        (
            "op-1 sha256:op-1 (openai-chat@1, rev 4)",
            [
                ("request bytes", "[green]yes[/green]", "a" * 79),
                ("digest", "[green]yes[/green]", "x" * 77 + "..."),
            ],
        ),
        ("op-1 sha256:op-1 (openai-chat@1, rev 4)", [("tools", "[green]yes[/green]", "t")]),
        "[green]2 manifest(s) reproduced byte for byte[/green]",
    ]
    columns = out.printed[0][0].columns
    assert [(c.header, c.overflow) for c in columns] == [
        ("binding", "fold"), ("equal", "fold"), ("recorded", "fold"),
    ]  # fmt: skip


def test_a_manifest_check_draws_a_bar_a_topic_on_the_error_console_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reproducing(monkeypatch, [manifest("op-1", [Check("tools", "t", "t")])])
    printed, drawn = drawing_consoles(monkeypatch, err_is_a_terminal=True)
    result = invoke("replay", "manifest", "op-1", "--bootstrap", "k:1", "--topic-prefix", "p.")
    assert result.exit_code == 0, result.output
    bars = [line.split() for line in seen(drawn).splitlines() if line.startswith("reading ")]
    assert [(b[:2], b[3:5]) for b in bars[-3:]] == [  # as the bars were last drawn
        (["reading", "p.turnledger.manifests"], ["2/2", "offsets"]),
        (["reading", "p.turnledger.committed"], ["0/3", "offsets"]),
        (["reading", "p.turnledger.ingress"], ["1/9", "offsets"]),
    ]
    assert "offsets" not in seen(printed) and "1 manifest(s) reproduced byte for byte" in seen(printed)


def test_a_binding_that_differs_or_an_error_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    reproducing(monkeypatch, [manifest("op-2", [Check("digest", "sha256:a", "sha256:b")])])
    result = invoke("replay", "manifest", "--digest", DIGEST, "--bootstrap", "k:1")
    assert result.exit_code == 1
    assert out.texts == [
        ("op-2 sha256:op-2 (openai-chat@1, rev 4)", [("digest", "[red]NO[/red]", "sha256:a")])
    ]
    out.printed.clear()
    fake = reproducing(monkeypatch, [manifest("op-3", [Check("d", "1", "1")], error="turns missing")])
    result = invoke("replay", "manifest", "--digest", DIGEST, "--bootstrap", "k:1")
    assert result.exit_code == 1
    assert fake.calls == [("k:1", Topics(""), None, DIGEST, Limits())]
    assert out.texts[1:] == ["[red]turns missing[/red]"]


def test_a_manifest_needs_an_operation_or_a_digest_before_a_bootstrap(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, shared_err: Recorder, bars: FakeProgress
) -> None:
    fake = reproducing(monkeypatch, [])
    result = invoke("replay", "manifest")
    assert result.exit_code == 2
    assert err.texts == [
        f"size limits: {describe(Limits())}",
        "turnledger replay manifest: give an OPERATION_ID or --digest sha256:...",
    ]
    result = invoke("replay", "manifest", "op-1")
    assert result.exit_code == 2 and shared_err.texts == [kafka_not_set("replay manifest")]
    assert fake.calls == [] and out.printed == [] and bars.tasks == []


@pytest.mark.parametrize(
    "digest", ["bogus", "sha256:d", "sha256:" + "A" * 64, "sha256:" + "0" * 63, DIGEST + "0"]
)
def test_a_digest_no_manifest_can_have_is_refused_before_reading(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress, digest: str
) -> None:
    """It was read as any text: three topics read to their end, then 'no manifest found', exit 1."""
    fake = reproducing(monkeypatch, [])
    args = ["manifest", "--digest", digest, "--bootstrap", "k:1"]
    result = CliRunner().invoke(APPS["replay"], args, env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert (
        f"Invalid value for '--digest': {digest!r}: expected sha256: and 64 lowercase hex digits"
    ) in result.output
    assert fake.calls == [] and bars.tasks == []


def test_a_manifest_check_called_as_a_function_reads_topics_without_a_prefix(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    fake = reproducing(monkeypatch, [manifest("op-1", [Check("tools", "t", "t")])])
    cli.manifest_command("op-1", bootstrap="k:1")
    assert fake.calls == [("k:1", Topics(""), "op-1", None, Limits())]
    assert (bars.tasks, bars.updated) == (manifest_bars(""), MANIFEST_TOLD)
    assert out.texts[-1] == "[green]1 manifest(s) reproduced byte for byte[/green]"


@pytest.mark.parametrize(("args", "named"), [(["op-9"], "'op-9'"), (["--digest", DIGEST], repr(DIGEST))])
def test_no_manifest_found_is_an_exit_1_naming_what_was_asked(
    monkeypatch: pytest.MonkeyPatch,
    out: Recorder,
    err: Recorder,
    bars: FakeProgress,
    args: list[str],
    named: str,
) -> None:
    reproducing(monkeypatch, [])
    result = invoke("replay", "manifest", *args, "--bootstrap", "k:1")
    assert result.exit_code == 1
    assert err.texts[1:] == [f"no manifest found for {named} on the manifests topic"]
    assert out.printed == []


# -------------------------------------------------------------------------------------------- rebuild


class FakeRedis(RedisCluster):
    """Taken for a cluster client (a projection may be split); records its close."""

    def __init__(self) -> None:
        self.closed = 0

    async def aclose(self, *args: Any, **kwargs: Any) -> None:
        self.closed += 1


class Rebuilding:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, report: RebuildReport | Exception) -> None:
        self.redis = FakeRedis()
        self.report = report
        self.connected: list[str] = []
        self.discovered: list[tuple[str, Any]] = []
        self.calls: list[tuple[Any, ...]] = []
        monkeypatch.setattr(cli, "connect", self.connect)
        monkeypatch.setattr("turnledger.projections.shards.discover", self.discover)
        monkeypatch.setattr("turnledger.replay.rebuild.rebuild", self.rebuild)

    async def connect(self, url: str) -> FakeRedis:
        self.connected.append(url)
        return self.redis

    async def discover(self, prefix: str, redis: Any) -> ProjectionKeys:
        self.discovered.append((prefix, redis))
        return ProjectionKeys(prefix, one_slot=True, shards=2)

    async def rebuild(
        self, redis: Any, bootstrap: str, topics: Topics, keys: ProjectionKeys, *, verify: bool, progress: Any
    ) -> Any:
        """Tells the drop's progress (no total until it is over), the projection's, and the fold's and the
        comparison's (no total until both projections are read) when verifying."""
        assert redis is self.redis and self.redis.closed == 0
        self.calls.append((bootstrap, topics, keys, verify, load_limits()))
        if isinstance(self.report, Exception):
            raise self.report
        progress("dropping", 4, None)
        progress("dropping", 7, 7)
        progress("projecting", 0, 5)
        progress("projecting", 5, 5)
        if verify:
            progress("folding", 0, 8)
            progress("folding", 8, 8)
            progress("comparing", 9, None)
            progress("comparing", 12, 12)
        return self.report


def rebuild_bars(prefix: str, verify: bool, key_prefix: str = "tl:") -> list[tuple[str, Any, dict[str, Any]]]:
    dropping = (f"dropping the projection {key_prefix}", None, {"unit": "keys"})
    projecting = ("projecting the output topics", None, {"unit": "offsets"})
    folding = (f"folding {prefix}turnledger.ingress", None, {"unit": "offsets"})
    comparing = (f"comparing the projection {key_prefix} with the fresh fold's", None, {"unit": "keys"})
    return [dropping, projecting, folding, comparing] if verify else [dropping, projecting]


PROJECTING_TOLD = [(41, 4, None), (41, 7, 7), (42, 0, 5), (42, 5, 5)]
REBUILD_TOLD = [*PROJECTING_TOLD, (43, 0, 8), (43, 8, 8), (44, 9, None), (44, 12, 12)]


def rebuilt(verified: bool, differences: list[str] | None = None) -> RebuildReport:
    stats = ProjectorStats(applied=120, undecodable=3, seconds=4.256)
    return RebuildReport(7, stats, verified, folded_records=99, differences=differences or [])


def test_a_rebuild_drops_projects_and_verifies_as_the_projection_is_split(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    fake = Rebuilding(monkeypatch, rebuilt(True))
    result = invoke(
        "replay", "rebuild", "--redis-url", "redis://r:1/0", "--bootstrap", "k:1", "--topic-prefix", "p.",
        "--key-prefix", "kp:", *LIMIT_ARGS,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert fake.connected == ["redis://r:1/0"] and fake.discovered == [("kp:", fake.redis)]
    assert fake.calls == [("k:1", Topics("p."), ProjectionKeys("kp:", one_slot=True, shards=2), True, GIVEN)]
    assert fake.redis.closed == 1
    assert err.texts == [f"size limits of the fresh fold: {describe(GIVEN)}"]
    assert (bars.tasks, bars.updated, bars.open) == (rebuild_bars("p.", True, "kp:"), REBUILD_TOLD, False)
    assert out.texts == [
        "dropped 7 keys; projected 120 records (3 undecodable) in 4.26s",
        "[green]equal to a projection of a fresh fold (99 records)[/green]",
    ]


def test_a_rebuild_told_its_shards_splits_the_keys_so_and_without_verify_says_no_more(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    fake = Rebuilding(monkeypatch, rebuilt(False, ["never shown"]))
    result = invoke(
        "replay", "rebuild", "--redis-url", "u", "--bootstrap", "k:1", "--shards", "3", "--no-verify"
    )
    assert result.exit_code == 0, result.output
    assert fake.discovered == []
    assert fake.calls == [
        ("k:1", Topics(""), ProjectionKeys("tl:", one_slot=True, shards=3), False, Limits())
    ]
    assert err.texts == []
    assert (bars.tasks, bars.updated) == (rebuild_bars("", False), PROJECTING_TOLD)
    assert out.texts == ["dropped 7 keys; projected 120 records (3 undecodable) in 4.26s"]


def test_a_rebuild_that_differs_lists_the_first_50_differences_and_fails(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    Rebuilding(monkeypatch, rebuilt(True, [f"key {n} differs" for n in range(51)]))
    result = invoke("replay", "rebuild", "--redis-url", "u", "--bootstrap", "k:1")
    assert result.exit_code == 1
    assert out.texts[1:] == [f"[red]key {n} differs[/red]" for n in range(50)]


def test_a_failed_rebuild_still_closes_redis_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, shared_err: Recorder, bars: FakeProgress
) -> None:
    fake = Rebuilding(monkeypatch, ProjectionError("the layout is broken"))
    result = invoke("replay", "rebuild", "--redis-url", "u", "--bootstrap", "k:1")
    assert result.exit_code == 2
    assert shared_err.printed == [
        (
            "turnledger replay rebuild: the layout is broken",
            {"style": "red", "markup": False, "soft_wrap": True},
        )
    ]
    assert fake.redis.closed == 1 and out.printed == [] and bars.open is False


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (["--bootstrap", "k:1"], not_set("REDIS_URL", "--redis-url", "replay rebuild")),
        (["--redis-url", "u"], kafka_not_set("replay rebuild")),
        ([], not_set("REDIS_URL", "--redis-url", "replay rebuild")),
    ],
)
def test_a_rebuild_needs_redis_and_kafka(
    monkeypatch: pytest.MonkeyPatch,
    out: Recorder,
    err: Recorder,
    shared_err: Recorder,
    bars: FakeProgress,
    args: list[str],
    missing: str,
) -> None:
    fake = Rebuilding(monkeypatch, rebuilt(True))
    result = invoke("replay", "rebuild", *args)
    assert result.exit_code == 2 and shared_err.texts == [missing]
    assert fake.connected == [] and bars.tasks == []


def test_a_rebuild_called_as_a_function_verifies(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    fake = Rebuilding(monkeypatch, rebuilt(True))
    cli.rebuild_command(redis_url="u", bootstrap="k:1")
    assert fake.discovered == [("tl:", fake.redis)]
    assert fake.calls == [("k:1", Topics(""), ProjectionKeys("tl:", one_slot=True, shards=2), True, Limits())]
    assert err.texts == [f"size limits of the fresh fold: {describe(Limits())}"]
    assert out.texts[-1] == "[green]equal to a projection of a fresh fold (99 records)[/green]"
    assert (bars.tasks, bars.updated) == (rebuild_bars("", True), REBUILD_TOLD)


@pytest.mark.parametrize("err_is_a_terminal", [True, False])
def test_a_rebuild_draws_its_bars_on_the_error_console_only_and_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, err_is_a_terminal: bool
) -> None:
    """Not a terminal: the limits line alone on stderr, in one line, no bar and no blank line."""
    Rebuilding(monkeypatch, rebuilt(True))
    printed, drawn = drawing_consoles(monkeypatch, err_is_a_terminal)
    result = invoke("replay", "rebuild", "--redis-url", "u", "--bootstrap", "k:1", "--topic-prefix", "p.")
    assert result.exit_code == 0, result.output
    limits, limits_line = console_on(False)
    limits.print(f"size limits of the fresh fold: {describe(Limits())}", soft_wrap=True)
    if err_is_a_terminal:
        phases = ("dropping", "projecting", "folding", "comparing")
        bars = [line.split() for line in seen(drawn).splitlines() if line.startswith(phases)]
        assert [(b[:-4], b[-3:-1]) for b in bars[-4:]] == [  # as the bars were last drawn
            (["dropping", "the", "projection", "tl:"], ["7/7", "keys"]),
            (["projecting", "the", "output", "topics"], ["5/5", "offsets"]),
            (["folding", "p.turnledger.ingress"], ["8/8", "offsets"]),
            (["comparing", "the", "projection", "tl:", "with", "the", "fresh", "fold's"], ["12/12", "keys"]),
        ]
    else:
        assert drawn.getvalue() == limits_line.getvalue()
        assert drawn.getvalue().count("\n") == 1, "one line, not cut at the console's width"
    assert "offsets" not in seen(printed) and "equal to a projection of a fresh fold" in seen(printed)


def test_a_rebuild_in_no_slot_group_is_refused(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    fake = Rebuilding(monkeypatch, rebuilt(True))
    result = invoke("replay", "rebuild", "--redis-url", "u", "--bootstrap", "k:1", "--shards", "0")
    assert result.exit_code == 2 and fake.connected == []
    result = invoke("replay", "rebuild", "--redis-url", "u", "--bootstrap", "k:1", "--shards", "1")
    assert result.exit_code == 0 and fake.calls[0][2] == ProjectionKeys("tl:", one_slot=True)


# ---------------------------------------------------------------------------------------- shadow diff


def difference(kind: DiffKind, side: Side = Side.BOTH) -> Difference:
    return Difference(kind, "messages[1]", "detail of it", side)


def results() -> list[ShadowResult]:
    return [
        ShadowResult("op-1", 1, "sha256:1", "openai-chat@1", bytes_equal=True),
        ShadowResult(
            "op-2", 2, "sha256:2", "anthropic-messages@2",
            differences=[
                difference(DiffKind.VALUE_CHANGED),
                difference(DiffKind.EXTRA_FIELD, Side.LEGACY),
                difference(DiffKind.VALUE_CHANGED),
                difference(DiffKind.MISSING_FIELD, Side.OURS),
            ],
        ),
        ShadowResult("op-3", 4, ambiguous=["c1", "c2"]),
        ShadowResult("op-4", 5),
        ShadowResult("op-5", 6, "sha256:5", "gemini@1"),
    ]  # fmt: skip


SHADOW_ROWS = [
    ("1", "op-1", "openai-chat@1", "equal", "equal", ""),
    (
        "2", "op-2", "anthropic-messages@2", "differ", "differs",
        "extra field (legacy), missing field (ours), value changed",
    ),
    ("4", "op-3", "-", "differ", "ambiguous", ""),
    ("5", "op-4", "-", "differ", "no manifest", ""),
    ("6", "op-5", "gemini@1", "differ", "same meaning", ""),
]  # fmt: skip
COUNTS = "ambiguous: 1 · differs: 1 · equal: 1 · no manifest: 1 · same meaning: 1"
DETAILS = [
    "  op-2  [bold]value changed[/bold] messages[1] (both): detail of it",
    "  op-2  [bold]extra field[/bold] messages[1] (legacy): detail of it",
    "  op-2  [bold]value changed[/bold] messages[1] (both): detail of it",
    "  op-2  [bold]missing field[/bold] messages[1] (ours): detail of it",
    '  op-3  [bold]ambiguous[/bold]: conversations c1, c2 all have this operation id; add "conversationId" '
    "to line 4",
]


def test_the_shadow_report_is_a_row_per_line_the_counts_and_every_difference(out: Recorder) -> None:
    cli.print_shadow(results())
    assert out.texts == [("shadow diff: legacy vs manifests", SHADOW_ROWS), COUNTS, *DETAILS]
    columns = out.printed[0][0].columns
    assert [(c.header, c.overflow) for c in columns] == [
        ("line", "fold"), ("operation", "fold"), ("adapter", "fold"), ("bytes", "fold"),
        ("status", "fold"), ("differences", "fold"),
    ]  # fmt: skip
    out.printed.clear()
    cli.print_shadow(results(), details=False)
    assert out.texts == [("shadow diff: legacy vs manifests", SHADOW_ROWS), COUNTS]
    out.printed.clear()
    cli.print_shadow([ShadowResult("op-1", 1, "sha256:1", "a@1", bytes_equal=True)] * 2)
    assert out.texts[1:] == ["equal: 2"]


class Shadowing:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, found: list[ShadowResult]) -> None:
        self.found = found
        self.asked: list[tuple[Any, ...]] = []
        self.compared: list[tuple[Any, ...]] = []
        monkeypatch.setattr("turnledger.replay.manifest_check.latest_manifests", self.latest)
        monkeypatch.setattr("turnledger.replay.shadow.compare_all", self.compare_all)

    async def latest(self, bootstrap: str, topics: Topics, operation_ids: set[str], progress: Any) -> Any:
        self.asked.append((bootstrap, topics, operation_ids))
        progress(0, 4)
        progress(4, 4)
        return {("c1", "op-1"): "manifest"}

    def compare_all(self, items: list[LegacyRequest], manifests: Any, progress: Any) -> list[ShadowResult]:
        self.compared.append((items, manifests))
        progress(len(items), len(items))
        return self.found


def shadow_bars(prefix: str, lines: int) -> list[tuple[str, Any, dict[str, Any]]]:
    return [
        (f"reading {prefix}turnledger.manifests", None, {"unit": "offsets"}),
        ("comparing", lines, {"unit": "lines"}),
    ]


SHADOW_TOLD = [(41, 0, 4), (41, 4, 4), (42, 3, 3)]


def legacy_file(tmp_path: Path, *lines: bytes) -> str:
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


LINES = [
    b'{"operationId": "op-1", "request": {"a": 1}}',
    b'{"operationId": "op-2", "request": {}, "conversationId": "c2"}',
    b'{"operationId": "op-1", "request": {"b": 2}}',
]


def test_a_shadow_diff_compares_each_legacy_line_with_the_latest_manifests(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, tmp_path: Path, bars: FakeProgress
) -> None:
    fake = Shadowing(monkeypatch, results())
    legacy = legacy_file(tmp_path, *LINES)
    result = invoke("shadow", "diff", legacy, "--bootstrap", "k:1", "--topic-prefix", "p.")
    assert result.exit_code == 0, result.output
    assert fake.asked == [("k:1", Topics("p."), {"op-1", "op-2"})]
    assert fake.compared == [
        (
            [
                LegacyRequest("op-1", {"a": 1}, 1),
                LegacyRequest("op-2", {}, 2, "c2"),
                LegacyRequest("op-1", {"b": 2}, 3),
            ],
            {("c1", "op-1"): "manifest"},
        )
    ]
    assert out.texts == [("shadow diff: legacy vs manifests", SHADOW_ROWS), COUNTS, *DETAILS]
    assert (bars.tasks, bars.updated, bars.open) == (shadow_bars("p.", 3), SHADOW_TOLD, False)
    invoke("shadow", "diff", legacy, "--bootstrap", "k:1", "--no-details")
    assert out.texts[-1] == COUNTS


@pytest.mark.parametrize("err_is_a_terminal", [True, False])
def test_a_shadow_diff_draws_its_bars_on_the_error_console_only_and_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, err_is_a_terminal: bool
) -> None:
    Shadowing(monkeypatch, results())
    printed, drawn = drawing_consoles(monkeypatch, err_is_a_terminal)
    result = invoke(
        "shadow", "diff", legacy_file(tmp_path, *LINES), "--bootstrap", "k:1", "--topic-prefix", "p."
    )
    assert result.exit_code == 0, result.output
    if err_is_a_terminal:
        bars = [line.split() for line in seen(drawn).splitlines() if line.strip()]
        assert [(b[0], b[-3:-1]) for b in bars[-2:]] == [  # as the bars were last drawn
            ("reading", ["4/4", "offsets"]),
            ("comparing", ["3/3", "lines"]),
        ]
        assert bars[-2][1] == "p.turnledger.manifests"
    else:
        assert drawn.getvalue() == ""
    assert "offsets" not in seen(printed) and "shadow diff: legacy vs manifests" in seen(printed)


def test_a_shadow_diff_fails_on_a_difference_only_when_told(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, tmp_path: Path, bars: FakeProgress
) -> None:
    legacy = legacy_file(tmp_path, *LINES)
    Shadowing(monkeypatch, results())
    assert invoke("shadow", "diff", legacy, "--bootstrap", "k:1").exit_code == 0
    assert invoke("shadow", "diff", legacy, "--bootstrap", "k:1", "--fail-on-diff").exit_code == 1
    Shadowing(monkeypatch, [ShadowResult("op-1", 1, "sha256:1", "a@1", bytes_equal=True)])
    assert invoke("shadow", "diff", legacy, "--bootstrap", "k:1", "--fail-on-diff").exit_code == 0
    Shadowing(
        monkeypatch, [ShadowResult("op-1", 1, "sha256:1", "a@1", bytes_equal=True), ShadowResult("op-2", 2)]
    )
    assert invoke("shadow", "diff", legacy, "--bootstrap", "k:1", "--fail-on-diff").exit_code == 1


def test_a_legacy_file_that_is_not_json_lines_is_one_red_line_and_an_exit_2(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, tmp_path: Path, bars: FakeProgress
) -> None:
    fake = Shadowing(monkeypatch, results())
    legacy = legacy_file(tmp_path, LINES[0], b"[not] an object")
    result = invoke("shadow", "diff", legacy, "--bootstrap", "k:1")
    assert result.exit_code == 2
    [(line, kwargs)] = err.printed
    assert line.startswith(f"turnledger shadow diff: {legacy}:2: not JSON (") and line.endswith(
        '. Expected one JSON object per line: {"operationId": "...", "request": {...}}'
    )
    assert kwargs == {"style": "red", "markup": False, "soft_wrap": True}
    assert fake.asked == [] and out.printed == [] and bars.tasks == []


def test_a_shadow_diff_needs_a_bootstrap_and_a_file_that_exists(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, tmp_path: Path, shared_err: Recorder
) -> None:
    fake = Shadowing(monkeypatch, results())
    result = invoke("shadow", "diff", legacy_file(tmp_path, *LINES))
    assert result.exit_code == 2 and shared_err.texts == [kafka_not_set("shadow diff")]
    assert invoke("shadow", "diff", str(tmp_path / "none.jsonl"), "--bootstrap", "k:1").exit_code == 2
    assert invoke("shadow", "diff", str(tmp_path), "--bootstrap", "k:1").exit_code == 2
    assert fake.asked == []


def test_a_shadow_diff_called_as_a_function_lists_the_details_and_does_not_fail(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, tmp_path: Path, bars: FakeProgress
) -> None:
    fake = Shadowing(monkeypatch, results())
    cli.shadow_diff_command(Path(legacy_file(tmp_path, *LINES)), bootstrap="k:1")
    assert fake.asked == [("k:1", Topics(""), {"op-1", "op-2"})]
    assert (bars.tasks, bars.updated) == (shadow_bars("", 3), SHADOW_TOLD)
    assert out.texts == [("shadow diff: legacy vs manifests", SHADOW_ROWS), COUNTS, *DETAILS]


def test_shadow_is_a_group_even_with_one_command() -> None:
    result = invoke("shadow", "--help")
    assert result.exit_code == 0 and "diff" in result.output


# -------------------------------------------------------------------------------------------- metrics


def some_metrics(given_up: dict[str, str] | None = None) -> Metrics:
    return Metrics(orphaned_results=2, operations=9, committed=5, given_up=given_up or {})


class Measuring:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, metrics: Metrics) -> None:
        self.metrics = metrics
        self.read: list[tuple[str, str]] = []
        self.computed: list[tuple[Any, int]] = []
        monkeypatch.setattr("turnledger.replay.evidence.read_all", self.read_all)
        monkeypatch.setattr("turnledger.replay.metrics.compute", self.compute)
        monkeypatch.setattr(time, "time", lambda: 1_700_000_123.4567)

    async def read_all(self, bootstrap: str, prefix: str, *, progress: Any) -> str:
        """Tells the ingress topic's progress, then two output topics', out of their order (the bar is
        the topic's)."""
        self.read.append((bootstrap, prefix))
        topics = Topics(prefix)
        progress(topics.ingress, 0, 6)
        progress(topics.ingress, 6, 6)
        progress(topics.rejections, 1, 2)
        progress(topics.committed, 0, 0)
        return "evidence"

    def compute(self, evidence: Any, *, now_ms: int) -> Metrics:
        self.computed.append((evidence, now_ms))
        return self.metrics


def metrics_bars(prefix: str) -> list[tuple[str, Any, dict[str, Any]]]:
    return [
        (f"reading {prefix}turnledger.{stream}", None, {"unit": "offsets"})
        for stream in (
            "ingress", "committed", "manifests", "tool-calls", "quarantine", "previews", "rejections"
        )
    ]  # fmt: skip


METRICS_TOLD = [(41, 0, 6), (41, 6, 6), (47, 1, 2), (42, 0, 0)]


def test_the_metrics_are_computed_from_every_topic_now_and_printed_as_tables(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    from turnledger.replay.metrics_report import given_up_table, metrics_table

    metrics = some_metrics({"c1/op-1": "gave up after 3 attempts"})
    fake = Measuring(monkeypatch, metrics)
    result = invoke("metrics", "--bootstrap", "k:1", "--topic-prefix", "p.")
    assert result.exit_code == 0, result.output
    assert fake.read == [("k:1", "p.")] and fake.computed == [("evidence", 1_700_000_123_456)]
    assert (bars.tasks, bars.updated, bars.open) == (metrics_bars("p."), METRICS_TOLD, False)
    assert err.printed == []
    given = given_up_table(metrics)
    assert given is not None
    assert out.texts == ["operations 9, committed 5", rows_of(metrics_table(metrics)), rows_of(given)]
    assert result.stdout == ""


def test_metrics_without_a_worker_giving_up_print_no_table_for_it(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    from turnledger.replay.metrics_report import metrics_table

    Measuring(monkeypatch, some_metrics())
    assert invoke("metrics", "--bootstrap", "k:1").exit_code == 0
    assert out.texts == ["operations 9, committed 5", rows_of(metrics_table(some_metrics()))]


def test_metrics_as_json_are_one_object_with_sorted_keys(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    metrics = some_metrics()
    Measuring(monkeypatch, metrics)
    result = invoke("metrics", "--bootstrap", "k:1", "--json")
    assert result.exit_code == 0
    assert result.stdout == orjson.dumps(metrics_json(metrics), option=orjson.OPT_SORT_KEYS).decode() + "\n"
    keys = list(orjson.loads(result.stdout))
    assert keys == sorted(keys) and out.printed == []


def test_metrics_need_a_bootstrap(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, shared_err: Recorder, bars: FakeProgress
) -> None:
    fake = Measuring(monkeypatch, some_metrics())
    result = invoke("metrics")
    assert result.exit_code == 2 and shared_err.texts == [kafka_not_set("metrics")]
    assert fake.read == [] and bars.tasks == []


def test_metrics_called_as_a_function_print_tables_of_topics_without_a_prefix(
    monkeypatch: pytest.MonkeyPatch, out: Recorder, err: Recorder, bars: FakeProgress
) -> None:
    fake = Measuring(monkeypatch, some_metrics())
    cli.metrics_command(bootstrap="k:1")
    assert fake.read == [("k:1", "")]
    assert out.texts[0] == "operations 9, committed 5"
    assert (bars.tasks, bars.updated) == (metrics_bars(""), METRICS_TOLD)


@pytest.mark.parametrize("err_is_a_terminal", [True, False])
def test_metrics_draw_a_bar_a_topic_on_the_error_console_only_and_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, err_is_a_terminal: bool
) -> None:
    """Not a terminal: not a character on stderr, not even a blank line."""
    Measuring(monkeypatch, some_metrics())
    printed, drawn = drawing_consoles(monkeypatch, err_is_a_terminal)
    result = invoke("metrics", "--bootstrap", "k:1", "--topic-prefix", "p.")
    assert result.exit_code == 0, result.output
    if err_is_a_terminal:
        bars = [line.split() for line in seen(drawn).splitlines() if line.strip()]
        assert [(b[:-4], b[-3:-1]) for b in bars[-7:]] == [  # as the bars were last drawn
            (["reading", "p.turnledger.ingress"], ["6/6", "offsets"]),
            (["reading", "p.turnledger.committed"], ["0/0", "offsets"]),
            (["reading", "p.turnledger.manifests"], ["0/?", "offsets"]),
            (["reading", "p.turnledger.tool-calls"], ["0/?", "offsets"]),
            (["reading", "p.turnledger.quarantine"], ["0/?", "offsets"]),
            (["reading", "p.turnledger.previews"], ["0/?", "offsets"]),
            (["reading", "p.turnledger.rejections"], ["1/2", "offsets"]),
        ]
    else:
        assert drawn.getvalue() == ""
    assert "offsets" not in seen(printed) and "operations 9, committed 5" in seen(printed)


def test_the_consoles_are_stdout_and_stderr() -> None:
    assert isinstance(cli.console, Console) and not cli.console.stderr
    assert isinstance(cli.err, Console) and cli.err.stderr
