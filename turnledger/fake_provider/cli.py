"""`turnledger fake-provider`: run the fake provider in the foreground until interrupted.

Register in turnledger/cli.py with:
    from turnledger.fake_provider.cli import fake_provider
    app.command("fake-provider")(fake_provider)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from pathlib import Path
from typing import Annotated, TextIO

import typer

from turnledger.fake_provider.faults import Fault, FaultKind, FaultPlan
from turnledger.fake_provider.server import FakeProvider, ReceivedRequest


def fake_provider(
    port: int = typer.Option(
        8790, "--port", min=0, max=65535, help="TCP port on 127.0.0.1 (0 picks a free one)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of answers, ids and random faults."),
    fault_rate: float = typer.Option(
        0.0, "--fault-rate", min=0.0, max=1.0, help="Probability of each fault kind per request."
    ),
    request_log: Annotated[
        Path | None,
        typer.Option(
            "--request-log",
            dir_okay=False,
            help="Append every request received as a JSON line (id, method, path, headers, body in "
            "base64), for checkers that compare what was sent with what the ledger accepted.",
        ),
    ] = None,
    slow: Annotated[
        list[str] | None,
        typer.Option(
            "--slow",
            metavar="TEXT=MS",
            help="Answer a request whose last user turn contains TEXT with MS milliseconds between its "
            "stream's events (its retries too; repeatable): room for a client to cancel or speak mid-stream.",
        ),
    ] = None,
) -> None:
    """Serve Anthropic Messages, OpenAI Chat and Responses, Gemini and Bedrock ConverseStream on loopback,
    with faults. Requests need each API's credential: the fake's keys are printed as variables a
    worker reads (test keys, not secrets)."""
    plan = fault_plan(fault_rate, slow or [])
    log = _opened(request_log)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(port, seed, plan, log))
    finally:
        if log is not None:
            log.close()


def fault_plan(fault_rate: float, slow: list[str]) -> FaultPlan:
    """The plan the options ask for: every drawn kind at `fault_rate`, and the `--slow` answers."""
    rates = FaultPlan.uniform(fault_rate).rates if fault_rate > 0 else {}
    return FaultPlan(rates=rates, by_last_user_marker=_slow_markers(slow))


def _slow_markers(given: list[str]) -> dict[str, tuple[Fault, ...]]:
    """`--slow TEXT=MS` values as the plan's `by_last_user_marker`, or a usage error naming the one
    that is not TEXT=MS with TEXT not empty and MS a whole number of milliseconds from 0."""
    markers: dict[str, tuple[Fault, ...]] = {}
    for value in given:
        text, _, ms = value.rpartition("=")
        if not text or not ms.isdigit():
            raise typer.BadParameter(
                f"{value!r}: expected TEXT=MS, some text and a whole number of milliseconds",
                param_hint="--slow",
            )
        markers[text] = (Fault(FaultKind.SLOW, int(ms)),)
    return markers


def _opened(request_log: Path | None) -> TextIO | None:
    """The request log opened for appending before anything listens, or a usage error saying why not."""
    if request_log is None:
        return None
    try:
        return request_log.open("a", encoding="utf-8")
    except OSError as exc:
        said = f"cannot append to {request_log}: {exc.strerror or exc}"
        raise typer.BadParameter(said, param_hint="--request-log") from exc


async def _serve(port: int, seed: int, plan: FaultPlan, log: TextIO | None) -> None:
    def on_request(request: ReceivedRequest) -> None:
        if log is not None:
            body = base64.b64encode(request.body).decode()
            line = {"id": request.request_id, "method": request.method, "path": request.path}
            log.write(json.dumps({**line, "headers": request.headers, "body": body}) + "\n")
            log.flush()

    provider = FakeProvider(port=port, seed=seed, fault_plan=plan, on_request=on_request)
    try:
        await provider.start()
    except OSError as exc:
        said = f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc} (0 picks a free port)"
        raise typer.BadParameter(said, param_hint="--port") from exc
    try:
        typer.echo(f"fake provider listening on {provider.base_url} (seed={seed}); its test keys:", err=True)
        for name, value in provider.keys.as_env().items():
            typer.echo(f"export {name}={value}", err=True)
        await asyncio.Event().wait()
    finally:
        await provider.stop()
