"""Fold pre-encoded ingress records through `BatchEngine` once and report time and an output digest.

Run as a script (`python bench/engine_runner.py RECORDS.pickle BATCH [--loop-only]`) so that whichever
`turnledger` is first on `PYTHONPATH` is the one measured: `bench_dispatch_engine --baseline`
points it at an exported older tree to compare engines in the same run on the same input.
The token counters are loaded before the clock starts, as the runtime does at start
(`preload_counters`; `TURNLEDGER_BENCH_LAZY_COUNTERS=1`: by the first dispatches, timed). Prints one
JSON line: cpu and wall seconds, events, the bytes and records the batches wrote to
the store (what a processor writes to the changelog), a sha256 over every output (stream, key,
value) and one over every conversation's final state as the engine reads it back (its JSON), to
prove two engines byte-identical in their outputs and equal in their state, whatever the layout
of that state on the changelog; and when the loop started (`started_at`, after the start barrier of
`BARRIER_ENV` if set). `decoded_digest` is over the outputs
decoded (their JSON, sorted keys) with every preview in its whole-text form (the text accumulated
per block, no `textOffset`): equal across a deliberate schema change that keeps what the records
say, e.g. previews as appended text at an offset (2221c272a5cd9382) against whole-text previews.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import pickle
import sys
import time
from typing import Any


def without_nones(value: Any) -> Any:
    """`value` with every field that holds None left out, at any depth: an optional field a newer
    schema added reads None in the older tree's records, so a tree before it compares equal where
    the two say the same."""
    if isinstance(value, dict):
        return {k: without_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nones(v) for v in value]
    return value


def decoded_digest(values: list[bytes]) -> str:
    """sha256 over the decoded outputs, previews as whole texts, fields that hold None left out
    (works with any tree's codec, and across an added optional field)."""
    import orjson

    from turnledger.codec import decode

    digest = hashlib.sha256()
    texts: dict[tuple[str, str, int, int], str] = {}
    for value in values:
        record = decode(value)
        data = record.model_dump(mode="json", by_alias=True)
        if type(record).__name__ == "PreviewUpdated":
            block = (
                data["conversationId"],
                data["operationId"],
                data["attemptGeneration"],
                data["blockIndex"],
            )
            offset = data.pop("textOffset", 0)
            data["text"] = texts[block] = texts.get(block, "")[:offset] + data["text"]
        digest.update(orjson.dumps(without_nones(data), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


class DictStore(dict[str, bytes]):
    """The engine's store, counting what a processor would write to the changelog: one record per
    key written (key and value bytes), a tombstone (key bytes) per key deleted."""

    changelog_bytes = 0
    changelog_records = 0
    rollback_stamp = object()
    """As the runtime's stores have (processors/store.py, `Lineage`): nothing is rolled back here."""

    def put(self, key: str, value: bytes) -> None:
        self[key] = value
        self.changelog_bytes += len(key.encode()) + len(value)
        self.changelog_records += 1

    def delete(self, key: str) -> None:
        self.pop(key, None)
        self.changelog_bytes += len(key.encode())
        self.changelog_records += 1


RESTORE_READS = 3
"""Every state is read back this many times and the fastest pass is reported: one pass takes ~0.2 s
at 300 conversations, where this machine's noise is of the order of the differences measured."""


def decoded_state_digest(store: DictStore, conversation_ids: list[str]) -> tuple[str, float]:
    """sha256 over every conversation's state JSON as the engine reads it back from the store, so
    that two layouts of the same state on the changelog compare equal; and the CPU seconds the
    reads took, the fastest of `RESTORE_READS` passes (what a processor pays to take the
    conversations over from the changelog, e.g. after a failover: its first event for each
    conversation reads the state so)."""
    import orjson

    from turnledger.dispatch import engine

    read_state = getattr(engine, "read_state", None)  # format 4; a baseline before it reads one key

    def read_all() -> list[Any]:
        if read_state is not None:
            return [read_state(store, conversation_id) for conversation_id in conversation_ids]
        values = [store.get(conversation_id) for conversation_id in conversation_ids]
        return [None if value is None else engine.decode_state(value) for value in values]

    times = []
    for _ in range(RESTORE_READS):
        cpu = time.process_time()
        states = read_all()
        times.append(time.process_time() - cpu)
    cpu = min(times)
    digest = hashlib.sha256()
    for conversation_id, state in zip(conversation_ids, states, strict=True):
        digest.update(conversation_id.encode())
        if state is None:
            digest.update(b"-")
        else:
            digest.update(
                orjson.dumps(without_nones(state.model_dump(mode="json")), option=orjson.OPT_SORT_KEYS)
            )
    return digest.hexdigest(), cpu


BARRIER_ENV = "TURNLEDGER_BENCH_BARRIER"
"""When set, the runner prints `ready` once its records and counters are loaded and starts the clock
only on a line from its stdin (`bench_dispatch_engine --processes`: runners that fold side by side
start together)."""


def wait_for_go() -> None:
    """The start barrier of `BARRIER_ENV`: say ready, wait for the go."""
    print("ready", flush=True)
    sys.stdin.readline()


def main(path: str, batch: int, loop_only: bool = False) -> None:
    """`loop_only`: fold the records and print only their count, the outputs' and the times, with no
    digest taken inside or after the loop, so that a count of the process's instructions
    (`bench_dispatch_engine --instructions`) is the engine's and the start-up's alone."""
    import turnledger
    from turnledger.dispatch.engine import BatchEngine, SourceRecord

    with open(path, "rb") as f:
        rows = pickle.load(f)
    records = [SourceRecord("turnledger.ingress", 0, i, key, value) for i, (key, value) in enumerate(rows)]
    engine, store = BatchEngine(), DictStore()
    digest = hashlib.sha256()
    outputs = 0
    values: list[bytes] = []
    if not os.environ.get("TURNLEDGER_BENCH_LAZY_COUNTERS"):
        # what the Kafka runtime does before its first batch (processors/dispatch_partition.py): the
        # token counters' vocabularies take ~0.45 s once per process, no cost of any event
        try:
            from turnledger.adapters.admission import preload_counters
        except ImportError:  # a tree from before it: its first dispatches load them
            pass
        else:
            preload_counters()
    gc.collect()
    if os.environ.get("TURNLEDGER_BENCH_TUNE_GC"):
        # what the Kafka runtime does once the state is restored (processors/partition.py)
        from turnledger.processors.gc_tuning import tune_gc

        tune_gc()
    if os.environ.get(BARRIER_ENV):
        wait_for_go()
    started_at = time.time()
    cpu, wall = time.process_time(), time.perf_counter()
    if loop_only:
        for i in range(0, len(records), batch):
            outputs += len(engine.process_batch(records[i : i + batch], store))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        result = {"turnledger": turnledger.__file__, "events": len(records), "outputs": outputs}
        print(json.dumps({**result, "cpu_s": cpu, "wall_s": wall}))
        return
    for i in range(0, len(records), batch):
        for out in engine.process_batch(records[i : i + batch], store):
            digest.update(out.stream.value.encode())
            digest.update(out.key or b"")
            digest.update(out.value)
            values.append(out.value)
            outputs += 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    conversation_ids = sorted({key.decode() for key, _ in rows})
    state_digest, restore_cpu = decoded_state_digest(store, conversation_ids)
    print(
        json.dumps(
            {
                "turnledger": turnledger.__file__,
                "events": len(records),
                "outputs": outputs,
                "cpu_s": cpu,
                "wall_s": wall,
                "started_at": started_at,
                "state_bytes": sum(len(v) for v in store.values()),
                "changelog_bytes": store.changelog_bytes,
                "changelog_records": store.changelog_records,
                "digest": digest.hexdigest(),
                "state_digest": state_digest,
                "restore_cpu_s": restore_cpu,
                "conversations": len(conversation_ids),
                "decoded_digest": decoded_digest(values),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), loop_only="--loop-only" in sys.argv[3:])
