"""The `turnledger` command line: one typer app, one sub-app per layer."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="turnledger",
    help="turnledger: the canonical ledger between LLM gateways and model providers.",
    no_args_is_help=True,
    add_completion=False,
)


def _register() -> None:
    from turnledger.demo.cli import demo
    from turnledger.devstack.cli import dev_app
    from turnledger.fake_provider.cli import fake_provider
    from turnledger.gateway.cli import legacy_app, tool_executor, worker
    from turnledger.processors.cli import process
    from turnledger.projections.cli import history_command, project_command, status_command
    from turnledger.replay.cli import metrics_command, replay_app, shadow_app
    from turnledger.serve.cli import serve_command

    app.add_typer(dev_app, name="dev")
    app.command("fake-provider")(fake_provider)
    app.command("process")(process)
    app.command("project")(project_command)
    app.command("history")(history_command)
    app.command("status")(status_command)
    app.add_typer(replay_app, name="replay")
    app.add_typer(shadow_app, name="shadow")
    app.command("metrics")(metrics_command)
    app.command("worker")(worker)
    app.command("tool-executor")(tool_executor)
    app.add_typer(legacy_app, name="legacy")
    app.command("demo")(demo)
    app.command("serve")(serve_command)


def main() -> None:
    """Every command; a refusal (`cli_refusals.REFUSALS`: a Kafka or Redis setting that cannot work, a
    broker or Redis refusing our login or TLS, a metrics port that cannot be listened on, a size limit or a
    model registry override that cannot be read) is said in one line (exit 2) by whichever command met it."""
    from turnledger.cli_refusals import EXIT_REFUSED, REFUSALS

    _register()
    try:
        app()
    except REFUSALS.families as exc:
        typer.echo(REFUSALS.line(exc), err=True)
        raise SystemExit(EXIT_REFUSED) from None


if __name__ == "__main__":
    main()
