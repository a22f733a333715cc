"""Validator, digest and codec timings, as ratios measured in one run.

Run: `python bench/bench_sequence.py`. Prints a markdown table. Each figure is the
median of several repeats of a timed loop (time.perf_counter).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from turnledger.codec import decode, encode
from turnledger.model.deltas import DeltaType, NormalizedDelta
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    DispatchState,
    StreamDeltas,
    SubmittedBlock,
)
from turnledger.model.graph import Block, sequence_digest
from turnledger.sequence import GraphState, Invalid, argument_digest_of, submit, validate_blocks

REPEATS = 7


def timed(fn: Callable[[], Any], loops: int) -> float:
    """Median seconds per call over REPEATS runs of `loops` calls."""
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        runs.append((time.perf_counter() - start) / loops)
    return statistics.median(runs)


def round_turns(r: int) -> list[list[SubmittedBlock]]:
    """One user question, an assistant turn with two parallel calls, their results: 5 blocks."""
    args = [f'{{"q": "question {r}", "page": {i}}}' for i in range(2)]
    calls = [
        SubmittedBlock(
            id=f"c{r}-{i}",
            role="assistant",
            kind="tool_call",
            trust_label="model",
            call_id=f"call-{r}-{i}",
            tool_name="search",
            arguments=args[i],
            generation=1,
        )
        for i in range(2)
    ]
    results = [
        SubmittedBlock(
            id=f"r{r}-{i}",
            role="tool",
            kind="tool_result",
            trust_label="tool",
            call_id=f"call-{r}-{i}",
            tool_name="search",
            argument_digest=argument_digest_of(args[i]),
            generation=1,
            result_status="success",
            text="result " * 20,
        )
        for i in range(2)
    ]
    user = SubmittedBlock(
        id=f"u{r}", role="user", kind="text", trust_label="user", text="please look it up " * 5
    )
    return [[user], calls, results]


def conversation(blocks: int) -> GraphState:
    state = GraphState.empty("conv-bench")
    r = 0
    while len(state.blocks) < blocks:
        for i, turn in enumerate(round_turns(r)):
            applied = submit(state, f"t{r}-{i}", turn)
            assert not isinstance(applied, Invalid), applied
            state = applied
        r += 1
    return state


def sequence_rows() -> list[tuple[str, float, str]]:
    rows = []
    for size in (10, 100, 1000):
        state = conversation(size)
        blocks: tuple[Block, ...] = state.blocks
        loops = max(1, 2000 // size)
        t = timed(lambda b=blocks: validate_blocks("conv-bench", b), loops)
        rows.append(
            (
                f"validate + digest, {len(blocks)} blocks (whole history, turn by turn)",
                t,
                f"{t / len(blocks) * 1e6:.1f} µs/block",
            )
        )
        d = timed(lambda s=state: sequence_digest("conv-bench", s.revision, s.blocks), loops)
        rows.append((f"sequence digest from scratch, {len(blocks)} blocks", d, ""))
    big = conversation(1000)
    whole = timed(lambda: validate_blocks("conv-bench", big.blocks), 2)
    turn = [
        SubmittedBlock(id="u-new", role="user", kind="text", trust_label="user", text="one more question")
    ]
    t = timed(lambda: submit(big, "t-new", turn), 200)
    rows.append(
        (
            f"append one turn (1 block) to {len(big.blocks)} blocks",
            t,
            f"{whole / t:.0f}x faster than revalidating",
        )
    )
    results = round_turns(10_000)
    pending = submit(submit(big, "ta", results[0]), "tb", results[1])  # type: ignore[arg-type]
    assert isinstance(pending, GraphState)
    t = timed(lambda: submit(pending, "tc", results[2]), 200)
    rows.append((f"append a 2-result turn to {len(pending.blocks)} blocks", t, ""))
    return rows


def records() -> dict[str, Any]:
    state = conversation(10)
    deltas = tuple(
        NormalizedDelta(
            response_handle="resp-1",
            generation=1,
            block_index=0,
            delta_sequence=i,
            type=DeltaType.TEXT_DELTA,
            text="some streamed words ",
        )
        for i in range(10)
    )
    return {
        "DispatchDecision": DispatchDecision(
            conversation_id="conv-bench",
            operation_id="op-1",
            state=DispatchState.DISPATCHING,
            previous_state=DispatchState.PREPARED,
            conversation_revision=12,
            cancel_generation=0,
            attempt_generation=1,
            idempotency_key="idem-1",
            manifest_digest="sha256:" + "a" * 64,
            source_event_id="ev-1",
            occurred_at_ms=1_700_000_000_000,
        ),
        "CommittedTurn (3 blocks)": CommittedTurn(
            conversation_id="conv-bench",
            revision=3,
            turn_id="t0-1",
            source_event_id="ev-2",
            blocks=state.blocks[:3],
            occurred_at_ms=1_700_000_000_000,
        ),
        "StreamDeltas (10 deltas)": StreamDeltas(
            conversation_id="conv-bench",
            event_id="ev-3",
            occurred_at_ms=1,
            operation_id="op-1",
            attempt_generation=1,
            deltas=deltas,
        ),
    }


def codec_rows() -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for name, record in records().items():
        data = encode(record)
        as_dict = record.to_json_dict()
        text = orjson.dumps(as_dict)
        enc = timed(lambda r=record: encode(r), 2000)
        dec = timed(lambda d=data: decode(d), 2000)
        jenc = timed(lambda d=as_dict: orjson.dumps(d), 20000)
        jdec = timed(lambda t=text: orjson.loads(t), 20000)
        rows.append(
            (
                name,
                f"{len(data)} / {len(text)}",
                f"{enc * 1e6:.1f} / {jenc * 1e6:.2f}",
                f"{enc / jenc:.0f}x",
                f"{dec * 1e6:.1f} / {jdec * 1e6:.2f}",
                f"{dec / jdec:.0f}x",
            )
        )
    return rows


def main() -> None:
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed runs per row (median)")
    REPEATS = parser.parse_args().repeats
    print("| operation | median | note |")
    print("|---|---:|---|")
    for label, seconds, note in sequence_rows():
        print(f"| {label} | {seconds * 1e6:,.1f} µs | {note} |")
    print()
    print(
        "| record | bytes avro / json | encode µs avro / orjson | ratio | decode µs avro / orjson | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in codec_rows():
        print("| " + " | ".join(row) + " |")
    print()
    print("Avro encode/decode = pydantic model ↔ single-object bytes (model_dump/validate included);")
    print("orjson = dumps/loads of the same record's to_json_dict() only.")


if __name__ == "__main__":
    main()
