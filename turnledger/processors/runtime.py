"""The names the Kafka runtime used to export from this one module, which is now split by job:

`config` (ProcessorConfig, ProcessorExit, transactional_id), `batching` (collect_batch), `folding`
(fold_batch), `transaction` (one batch as one transaction), `partition` (PartitionProcessor),
`feed` (a partition of the shared consumer), `ownership` (static or group), `app` (ProcessorApp),
`gc_tuning`. Kept as re-exports so that code written against the old path still imports; new code
imports from the parts.
"""

from turnledger.processors.app import ProcessorApp
from turnledger.processors.batching import Fetch, collect_batch
from turnledger.processors.config import (
    GroupSettings,
    ProcessorConfig,
    ProcessorExit,
    ProcessorMetrics,
    transactional_id,
)
from turnledger.processors.folding import FoldOutcome, fold_batch
from turnledger.processors.gc_tuning import GC_GEN0_THRESHOLD, tune_gc
from turnledger.processors.ownership import owned_partitions
from turnledger.processors.partition import PartitionProcessor, ReadyHook

__all__ = [
    "GC_GEN0_THRESHOLD",
    "Fetch",
    "FoldOutcome",
    "GroupSettings",
    "PartitionProcessor",
    "ProcessorApp",
    "ProcessorConfig",
    "ProcessorExit",
    "ProcessorMetrics",
    "ReadyHook",
    "collect_batch",
    "fold_batch",
    "owned_partitions",
    "transactional_id",
    "tune_gc",
]
