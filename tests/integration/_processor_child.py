"""A processor in its own process, for the crash, fencing and SIGTERM tests.

    python -m tests.integration._processor_child app --bootstrap B --prefix P --partitions 0,1 ...
    python -m tests.integration._processor_child cli <arguments of `turnledger process`>

`app` runs `ProcessorApp` with the test module's counter fold (statically, or with `--group` as a
member of the consumer group) and test hooks:
`--dump-ready DIR` writes each partition's restored state and committed offset to
DIR/ready-<partition>.json before its first batch; `--events FILE` appends one JSON line per
partition term that became ready (pid, partition, committed offset, restore seconds, wall time)
and one when the process pauses itself; `--kill-in-commit N` SIGKILLs this process inside the
N-th transaction commit, after the batch's records reached the broker but before the commit (a
crash mid-transaction, deterministically); `--stop-in-commit N` SIGSTOPs it there instead (a
zombie once resumed with SIGCONT).
Exit codes follow `turnledger process`: 0 stopped, 1 failed, 3 fenced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from tests.integration.test_processor_eos import counter_fold
from turnledger.processors.app import ProcessorApp
from turnledger.processors.cli import EXIT_FAILED, EXIT_FENCED, parse_partitions, process
from turnledger.processors.config import GroupSettings, ProcessorConfig, ProcessorExit
from turnledger.processors.contract import PartitionFold
from turnledger.processors.dispatch_partition import DispatchPartitionFold
from turnledger.processors.partition import PartitionProcessor
from turnledger.retry import Backoff
from turnledger.topology import Topics


def _dump_ready(directory: Path, processor: PartitionProcessor) -> None:
    state = {key: value.decode() for key, value in processor.store.items()}  # type: ignore[attr-defined]
    doc = {"partition": processor.partition, "committed_offset": processor.committed_offset, "state": state}
    tmp = directory / f".ready-{processor.partition}.json"
    tmp.write_text(json.dumps(doc))
    tmp.rename(directory / f"ready-{processor.partition}.json")


def _event(path: Path, **fields: object) -> None:
    with path.open("a") as f:
        f.write(json.dumps({"pid": os.getpid(), "t": time.time(), **fields}) + "\n")


def _signal_in_commit(
    processor: PartitionProcessor, nth: int, counter: list[int], sig: signal.Signals, events: Path | None
) -> None:
    """Send `sig` to this process inside the `nth` commit (counted over the whole process, once)."""
    producer = processor._producer
    assert producer is not None
    commit = producer.commit_transaction

    async def commit_or_signal() -> None:
        counter[0] += 1
        if counter[0] == nth:
            await producer.flush()
            logging.getLogger(__name__).warning(
                "%s inside commit #%d (partition %d)", sig.name, counter[0], processor.partition
            )
            if events is not None:
                _event(events, event="signal", signal=sig.name, partition=processor.partition)
            os.kill(os.getpid(), sig)
        await commit()

    producer.commit_transaction = commit_or_signal  # type: ignore[method-assign]


def run_app(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--partitions", default="all")
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--batch-max-records", type=int, default=500)
    parser.add_argument("--batch-max-ms", type=int, default=100)
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--dump-ready", type=Path)
    parser.add_argument("--kill-in-commit", type=int, default=0)
    parser.add_argument("--stop-in-commit", type=int, default=0)
    parser.add_argument("--events", type=Path)
    parser.add_argument("--group", action="store_true")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    parser.add_argument("--max-outage", type=float)
    parser.add_argument("--fold", choices=["counter", "dispatch"], default="counter")
    args = parser.parse_args(argv)
    topics = Topics(args.prefix)
    config = ProcessorConfig(
        bootstrap=args.bootstrap,
        app_id=args.app_id,
        topics=topics,
        batch_max_records=args.batch_max_records,
        batch_max_ms=args.batch_max_ms,
        state_dir=args.state_dir,
        group=GroupSettings(
            session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=args.heartbeat_interval_ms
        ),
        outage=Backoff(max_s=2.0, max_outage_s=args.max_outage),
    )
    commits = [0]

    def on_ready(processor: PartitionProcessor) -> None:
        if args.dump_ready is not None:
            _dump_ready(args.dump_ready, processor)
        if args.events is not None:
            _event(
                args.events,
                event="ready",
                partition=processor.partition,
                committed_offset=processor.committed_offset,
                restore_seconds=processor.metrics.restore_seconds_last,
            )
        if args.kill_in_commit:
            _signal_in_commit(processor, args.kill_in_commit, commits, signal.SIGKILL, args.events)
        if args.stop_in_commit:
            _signal_in_commit(processor, args.stop_in_commit, commits, signal.SIGSTOP, args.events)

    def fold_for(partition: int) -> PartitionFold:
        if args.fold == "dispatch":
            return DispatchPartitionFold(topics, partition)
        return counter_fold(topics, partition)

    app = ProcessorApp(
        config,
        fold_for,
        partitions=None if args.group else parse_partitions(args.partitions),
        on_ready=on_ready,
        group=args.group,
    )
    try:
        results = asyncio.run(app.run())
    except Exception:
        logging.getLogger(__name__).exception("processor failed")
        return EXIT_FAILED
    if args.group:
        return 0
    return EXIT_FENCED if ProcessorExit.FENCED in results.values() else 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "app":
        return run_app(rest)
    import typer

    command = typer.Typer(add_completion=False)
    command.command()(process)
    code = command(rest, standalone_mode=False)  # click returns the exit code instead of exiting
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
