"""What typed classes would buy the fold's state work: one `Step.transition`, pydantic vs slotted classes.

    python -m bench.bench_typed_state [--steps 200000] [--repeats 5] [--compiled]

Issue 20's goal 1 asks the engine for ~1.9x fewer instructions than today, and the profile spreads
them thin; session 41 named typed classes in place of the pydantic state as the one lever of that size
left. This measures it where it is largest: the state step the fold takes on most events
(`Step.transition`: copy the operation with its new state and progress, end a finished attempt's
lease, settle a final one's request, put it in a copy of the conversation, emit the `DispatchDecision`),
on a real streaming operation of the bench mix, against the same step on the plain slotted classes of
`typed_state_mirror.py`, interpreted, and with `--compiled` also compiled by mypyc (into a temporary
directory; needs a C compiler). Reported: µs a step (the best of the repeats, CPU time) and the ratio
to today's. No turnledger code uses the mirror: it prices a rewrite, it is not one.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.dispatch_workload import Mix, build
from turnledger.dispatch.fold import fold
from turnledger.dispatch.state import ConversationState
from turnledger.dispatch.step import Step
from turnledger.model.events import DispatchState, HandleBound

MIRROR = Path(__file__).with_name("typed_state_mirror.py")


def streaming_conversation() -> tuple[ConversationState, HandleBound]:
    """A conversation of the bench mix folded up to its first HandleBound: its operation streams."""
    events = build(1, Mix(), concurrency=1).events
    state = ConversationState.empty(events[0].conversation_id)
    for event in events:
        state = fold(state, event).state
        if isinstance(event, HandleBound):
            return state, event
    raise RuntimeError("the workload's conversation never streamed")


def pydantic_steps(state: ConversationState, event: HandleBound, steps: int) -> int:
    step = Step(event=event, state=state)
    for i in range(steps):
        op = step.state.operations[event.operation_id]
        step.transition(op, DispatchState.STREAMING, assembler={"i": i}, lease_renewed_at_ms=1000 + i)
        if len(step.outputs) > 1000:
            step.outputs.clear()
    return steps


def mirrored(mirror: ModuleType, state: ConversationState) -> Any:
    """The state as the mirror's classes, field for field."""
    operations = {}
    for operation_id, op in state.operations.items():
        request = mirror.Request(op.request.deadline_at_ms, op.request.tools, op.request.policy)
        operations[operation_id] = mirror.Op(
            op.operation_id, str(op.state), request, op.manifest.manifest_digest if op.manifest else None,
            op.prepared_revision, op.attempt_generation, op.attempt_cancel_generation, op.idempotency_key,
            op.response_handle, op.attempt_terminated, op.assembler, op.committed_revision, op.updated_at_ms,
            op.lease_owner, op.lease_ms, op.lease_renewed_at_ms, op.resumable, op.replayable,
        )  # fmt: skip
    return mirror.Conv(state.conversation_id, state.graph.revision, state.cancel_generation, operations)


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiled_mirror(workdir: Path) -> ModuleType:
    """The mirror compiled by mypyc into `workdir`, loaded from its extension module."""
    source = workdir / MIRROR.name
    source.write_text(MIRROR.read_text())
    subprocess.run(
        [sys.executable, "-m", "mypyc", source.name], cwd=workdir, check=True, capture_output=True, text=True
    )
    (extension,) = workdir.glob(f"{MIRROR.stem}.*.so")
    return load(MIRROR.stem, extension)


def best_us(run: Callable[[], int], steps: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        assert run() == steps
        best = min(best, time.process_time() - began)
    return best / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compiled", action="store_true", help="also the mirror compiled by mypyc")
    args = parser.parse_args(argv)
    state, event = streaming_conversation()
    steps, repeats, operation_id = args.steps, args.repeats, event.operation_id
    rows = {"pydantic state (today)": best_us(lambda: pydantic_steps(state, event, steps), steps, repeats)}
    interpreted = load("typed_state_interpreted", MIRROR)
    conv = mirrored(interpreted, state)
    rows["slotted classes, interpreted"] = best_us(
        lambda: interpreted.run(conv, operation_id, steps, event.event_id), steps, repeats
    )
    if args.compiled:
        with tempfile.TemporaryDirectory(prefix="bench-typed-") as tmp:
            native = compiled_mirror(Path(tmp))
            native_conv = mirrored(native, state)
            rows["slotted classes, compiled by mypyc"] = best_us(
                lambda: native.run(native_conv, operation_id, steps, event.event_id), steps, repeats
            )
    today = rows["pydantic state (today)"]
    print(f"\none Step.transition of a streaming operation, {steps:,} steps, best of {repeats} (CPU time)\n")
    print("| state as | µs a step | vs today |\n|---|---:|---:|")
    for name, us in rows.items():
        print(f"| {name} | {us:.2f} | {today / us:.2f}x |")


if __name__ == "__main__":
    main()
