"""The demo processor's fold: the lead's `DispatchFold` (the dispatch engine on the Kafka runtime)."""

from __future__ import annotations

from collections.abc import Callable

from turnledger.processors.dispatch_fold import DispatchFold
from turnledger.processors.topics import Topics


def fold_factory(prefix: str) -> Callable[[int], DispatchFold]:
    """factory(partition) for ProcessorApp."""
    topics = Topics(prefix=prefix)
    return lambda partition: DispatchFold(topics=topics, partition=partition)
