"""The size limits a processor folds under (model/limits.py), from flags or the environment.

The pure core takes a `Limits` and reads nothing; this is where one is made. Every limit has a flag
and an environment variable (`--max-block-bytes` / `TURNLEDGER_MAX_BLOCK_BYTES`, ...), on
`turnledger process` and on the replay commands that fold the log again (`replay audit`, `replay
rebuild`, `replay manifest`). A replay must use the limits the processor used, as it must use its
model registry: a turn one accepted the other may refuse. So both read the same variables, the
processor logs the limits it runs with, and the replay commands print the ones they fold under; a
replay under other limits shows up as divergences (the refusals' details name the limit).

`turnledger process` writes the limits it resolved into its environment, so the default fold (which
calls `load_limits()`) and the children of `--processes N` fold under the same ones.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, fields
from typing import Annotated, Any

import typer

from turnledger.errors import ProcessorError
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.processors.env_int import parse_env_int

LIMIT_ENV: Mapping[str, str] = {f.name: f"TURNLEDGER_{f.name.upper()}" for f in fields(Limits)}
"""Limits field -> its environment variable: TURNLEDGER_MAX_BLOCK_BYTES, TURNLEDGER_MAX_TURN_BYTES, ..."""


class LimitsConfigError(ProcessorError, ValueError):
    """A size-limit variable that is not a positive integer."""


def load_limits(environ: Mapping[str, str] | None = None) -> Limits:
    """The defaults, each replaced by its TURNLEDGER_MAX_* variable when set."""
    env = os.environ if environ is None else environ
    values: dict[str, int] = {}
    for name, var in LIMIT_ENV.items():
        raw = env.get(var, "").strip()
        if not raw:
            continue
        values[name] = parse_env_int(var, raw, 1, LimitsConfigError)
    return Limits(**values)


def export_limits(limits: Limits, environ: MutableMapping[str, str] | None = None) -> None:
    """Write the limits into the environment (this process's fold and its children read them)."""
    env = os.environ if environ is None else environ
    for name, value in asdict(limits).items():
        env[LIMIT_ENV[name]] = str(value)


def describe(limits: Limits) -> str:
    """One line for logs and reports, e.g. `max_block_bytes=262144 ... (defaults)`."""
    text = " ".join(f"{name}={value}" for name, value in asdict(limits).items())
    return f"{text} (defaults)" if limits == DEFAULT_LIMITS else text


def _option(name: str, what: str) -> Any:
    default = getattr(DEFAULT_LIMITS, name)
    return typer.Option(
        f"--{name.replace('_', '-')}",
        envvar=LIMIT_ENV[name],
        min=1,
        show_default=False,
        rich_help_panel="Size limits (a replay must be given the processor's)",
        help=f"{what} Default {default:,}.",
    )


MaxBlockBytes = Annotated[
    int | None,
    _option(
        "max_block_bytes",
        "UTF-8 bytes of one block's text, arguments and signature (BLOCK_TOO_LARGE).",
    ),
]
MaxDeltasPerBlock = Annotated[
    int | None,
    _option("max_deltas_per_block", "Content deltas one streamed block may receive (TOO_MANY_DELTAS)."),
]
MaxBlocksPerTurn = Annotated[
    int | None,
    _option("max_blocks_per_turn", "Blocks of one turn or one streamed response (TOO_MANY_BLOCKS)."),
]
MaxRecordBytes = Annotated[
    int | None,
    _option(
        "max_record_bytes", "Bytes of one encoded ingress record, refused before decoding (RECORD_TOO_LARGE)."
    ),
]
MaxTurnBytes = Annotated[
    int | None,
    _option(
        "max_turn_bytes",
        "Bytes of the CommittedTurn record a turn is written as, checked before it commits (TURN_TOO_LARGE).",
    ),
]
MaxHeldDeltas = Annotated[
    int | None,
    _option(
        "max_held_deltas",
        "Deltas the assembler holds ahead of a sequence gap (TOO_MANY_HELD_DELTAS).",
    ),
]


def limits_of(
    max_block_bytes: int | None = None,
    max_deltas_per_block: int | None = None,
    max_blocks_per_turn: int | None = None,
    max_record_bytes: int | None = None,
    max_turn_bytes: int | None = None,
    max_held_deltas: int | None = None,
) -> Limits:
    """The limits of the given options (typer has already read their variables), defaults elsewhere."""
    given = {
        "max_block_bytes": max_block_bytes,
        "max_deltas_per_block": max_deltas_per_block,
        "max_blocks_per_turn": max_blocks_per_turn,
        "max_record_bytes": max_record_bytes,
        "max_turn_bytes": max_turn_bytes,
        "max_held_deltas": max_held_deltas,
    }
    return Limits(**{name: value for name, value in given.items() if value is not None})
