"""Fold pre-encoded ingress records through `BatchEngine` once and report time and an output digest.

Run as a script (`python bench/engine_runner.py RECORDS.pickle BATCH`) so that whichever
`turnledger` is first on `PYTHONPATH` is the one measured: `bench_dispatch_engine --baseline`
points it at an exported older tree to compare engines in the same run on the same input.
Prints one JSON line: cpu and wall seconds, events, a sha256 over every output (stream,
key, value) and one over the final store, to prove two engines byte-identical (or, for a
change of the state format, identical in their outputs). `decoded_digest` is over the outputs
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


def decoded_digest(values: list[bytes]) -> str:
    """sha256 over the decoded outputs, previews as whole texts (works with any tree's codec)."""
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
        digest.update(orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


class DictStore(dict[str, bytes]):
    def put(self, key: str, value: bytes) -> None:
        self[key] = value


def main(path: str, batch: int) -> None:
    import turnledger
    from turnledger.dispatch.engine import BatchEngine, SourceRecord

    with open(path, "rb") as f:
        rows = pickle.load(f)
    records = [SourceRecord("turnledger.ingress", 0, i, key, value) for i, (key, value) in enumerate(rows)]
    engine, store = BatchEngine(), DictStore()
    digest = hashlib.sha256()
    state_digest = hashlib.sha256()
    outputs = 0
    values: list[bytes] = []
    gc.collect()
    if os.environ.get("TURNLEDGER_BENCH_TUNE_GC"):
        # what the Kafka runtime does once the state is restored (processors/partition.py)
        from turnledger.processors.gc_tuning import tune_gc

        tune_gc()
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(0, len(records), batch):
        for out in engine.process_batch(records[i : i + batch], store):
            digest.update(out.stream.value.encode())
            digest.update(out.key or b"")
            digest.update(out.value)
            values.append(out.value)
            outputs += 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    for key in sorted(store):
        state_digest.update(key.encode())
        state_digest.update(store[key])
    print(
        json.dumps(
            {
                "turnledger": turnledger.__file__,
                "events": len(records),
                "outputs": outputs,
                "cpu_s": cpu,
                "wall_s": wall,
                "state_bytes": sum(len(v) for v in store.values()),
                "digest": digest.hexdigest(),
                "state_digest": state_digest.hexdigest(),
                "decoded_digest": decoded_digest(values),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
