"""What a processor is configured with, what it counts, and how each partition's ownership ended."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from turnledger.kafka.group_timing import check_heartbeat
from turnledger.processors.gc_tuning import GC_GEN0_THRESHOLD
from turnledger.retry import FOREVER, Backoff
from turnledger.topology import Topics


def transactional_id(app_id: str, topic: str, partition: int) -> str:
    """The one transactional.id for this (app, input topic, partition): stable across restarts and
    machines, so whoever starts processing the partition fences whoever processed it before."""
    return f"{app_id}-{topic}-{partition}"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Consumer-group membership of `--ownership group` (see `processors/ownership.py`)."""

    session_timeout_ms: int = 10_000
    """A member that has not heartbeated for this long is declared dead and its partitions move. The
    broker accepts 6 s..30 min by default (group.min/max.session.timeout.ms)."""
    heartbeat_interval_ms: int = 3_000
    rebalance_timeout_ms: int | None = None
    """How long the group waits for members to rejoin during a rebalance; None: the session timeout.
    A member's revocation (committing its open batches) must fit in it."""

    def __post_init__(self) -> None:
        check_heartbeat(self.heartbeat_interval_ms, self.session_timeout_ms)

    @property
    def revocation_budget_s(self) -> float:
        """How long a revocation may take before the partitions' open work is cancelled (a margin
        below the rebalance timeout, so the member is not thrown out of the group for being slow)."""
        timeout_ms = self.rebalance_timeout_ms or self.session_timeout_ms
        return max(0.5, timeout_ms / 1000 * 0.6)


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    bootstrap: str
    app_id: str = "turnledger"
    topics: Topics = field(default_factory=Topics)
    batch_max_records: int = 500
    batch_max_ms: int = 100
    state_dir: Path | None = None
    group_id: str | None = None
    """The consumer group: where committed offsets live and, with group ownership, whose members share
    the partitions; defaults to `app_id`. Keep it dedicated to the processor: the broker accepts v0
    transactional offset commits from anyone for the group."""
    group: GroupSettings = field(default_factory=GroupSettings)
    transaction_timeout_ms: int = 60_000
    """How long the coordinator lets a transaction stay open before aborting it and bumping the epoch,
    which to the producer looks exactly like being fenced. It must outlast a broker restart in the
    middle of a commit, or every such restart would fence the partition's own producer. A processor
    that dies mid-transaction holds read_committed readers back (the LSO) only until its successor's
    InitProducerId aborts the transaction: at once on restart, after the session timeout in a group."""
    idle_poll_ms: int = 100
    pipelined_commits: bool = True
    """Fold the next batch while the previous one's transaction commits (processors/partition.py)."""
    group_commit: bool = False
    """With pipelined commits, a batch closes as soon as the commit before it has ended (at the latest
    `batch_max_ms` after its first record): a batch is what arrived during one commit. Off (the
    default), every batch stays open `batch_max_ms` (or until `batch_max_records`). Opt-in for its cost:
    more CPU per record at load (more, smaller transactions; `bench/bench_capacity.py`: 0.82 of a core
    against the window's 0.77 at 500 streams in session 19, 25-40% more before the window folded
    while gathering). The chaos test runs one of its two processors with it."""
    producer_retry_backoff_ms: int = 20
    """aiokafka's default is 100 ms. A produce or a transactional request the broker answers with a
    retriable error (a coordinator moving, CONCURRENT_TRANSACTIONS while the previous transaction's
    markers are written, KIP-890's verification) waits this long before it is sent again, and the
    whole batch with it. The commit sends the consumed offset before the records, so the
    verification no longer refuses our produces (`PartitionTransactions.commit`)."""
    producer_max_batch_bytes: int = 512 * 1024
    """aiokafka's default 16 KiB makes `send()` wait for the previous batch of a partition to drain, which
    inside a transaction means waiting for AddPartitionsToTxn; stays below the broker's 1 MB default."""
    max_consecutive_aborts: int = 10
    """Transactions that failed for a reason other than an outage, in a row, before the partition gives
    up: retrying a batch that can never commit would loop forever."""
    retry_backoff_ms: int = 200
    outage: Backoff = FOREVER
    """How Kafka outages are ridden out; `max_outage_s` bounds one outage (None: any length)."""
    gc_gen0_threshold: int | None = GC_GEN0_THRESHOLD
    """After the state is restored, `tune_gc` freezes the heap and raises the gen0 threshold to this;
    None leaves the interpreter's GC settings alone."""

    @property
    def offsets_group(self) -> str:
        return self.group_id or self.app_id

    def __post_init__(self) -> None:
        if self.batch_max_records < 1 or self.batch_max_ms < 1:
            raise ValueError("batch_max_records and batch_max_ms must be positive")


@dataclass(slots=True)
class ProcessorMetrics:
    records_in: int = 0
    outputs_out: int = 0
    changelog_out: int = 0
    batches: int = 0
    poison_records: int = 0
    aborted_batches: int = 0
    restored_records: int = 0
    restores: int = 0
    restore_seconds_last: float = 0.0
    ownerships: int = 0
    """How often the partition was taken (assignment, or starting over after an outage)."""
    txn_commit_seconds_total: float = 0.0
    txn_commit_seconds_max: float = 0.0

    def observe_commit(self, seconds: float) -> None:
        self.txn_commit_seconds_total += seconds
        self.txn_commit_seconds_max = max(self.txn_commit_seconds_max, seconds)


class ProcessorExit(enum.Enum):
    STOPPED = "stopped"  # stop(), SIGTERM or a revocation: the open batch was committed
    FENCED = "fenced"  # another processor initialised this partition's transactional.id
