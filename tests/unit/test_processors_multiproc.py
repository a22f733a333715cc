"""`--processes N`: how the owned partitions are dealt over the children, and their exit statuses."""

from __future__ import annotations

import logging
import signal

import pytest

from turnledger.processors.config import ProcessorConfig
from turnledger.processors.errors import EXIT_FAILED, EXIT_FENCED, EXIT_USAGE
from turnledger.processors.multiproc import CANCEL, STOP, ProcessGroup, split_round_robin, worst_exit


@pytest.mark.parametrize(
    ("partitions", "processes", "groups"),
    [
        ([0, 1, 2, 3, 4], 2, [[0, 2, 4], [1, 3]]),
        ([0, 1, 2, 3], 4, [[0], [1], [2], [3]]),
        ([3, 5, 8], 1, [[3, 5, 8]]),
        ([0, 1], 2, [[0], [1]]),
        ([7, 1, 4], 2, [[7, 4], [1]]),  # dealt in the given order
    ],
)
def test_round_robin(partitions: list[int], processes: int, groups: list[list[int]]) -> None:
    assert split_round_robin(partitions, processes) == groups


@pytest.mark.parametrize(("partitions", "processes"), [([0, 1], 8), ([5], 3), ([0, 1, 2], 3), ([0, 1, 2], 5)])
def test_processes_capped_to_one_per_partition(partitions: list[int], processes: int) -> None:
    groups = split_round_robin(partitions, processes)
    assert len(groups) == min(processes, len(partitions))
    assert all(len(g) == 1 for g in groups) or processes < len(partitions)
    assert sorted(p for g in groups for p in g) == sorted(partitions)


def test_every_partition_exactly_once_and_balanced() -> None:
    partitions = list(range(37))
    for n in range(1, 40):
        groups = split_round_robin(partitions, n)
        assert sorted(p for g in groups for p in g) == partitions
        sizes = [len(g) for g in groups]
        assert max(sizes) - min(sizes) <= 1


def test_zero_processes_rejected() -> None:
    with pytest.raises(ValueError, match=r"^processes must be at least 1, got 0$"):
        split_round_robin([0, 1], 0)


def test_group_uses_the_capped_split() -> None:
    group = ProcessGroup(ProcessorConfig(bootstrap="x:1"), "m:f", [0, 1, 2], 8)
    assert group.groups == [[0], [1], [2]]


def test_group_members_get_no_partition_lists() -> None:
    group = ProcessGroup(ProcessorConfig(bootstrap="x:1"), "m:f", None, 3)
    assert group.groups == [None, None, None]


def test_worst_exit() -> None:
    assert worst_exit([]) == 0
    assert worst_exit([0, 0]) == 0
    assert worst_exit([0, EXIT_FENCED]) == EXIT_FENCED
    assert worst_exit([EXIT_FENCED, EXIT_USAGE, 0]) == EXIT_USAGE
    assert worst_exit([EXIT_USAGE, EXIT_FAILED, EXIT_FENCED]) == EXIT_FAILED
    assert worst_exit([0, 9]) == 9  # unknown statuses count as failures


class Child:
    """A child process as the group tells it what to do."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def tell(self, message: str) -> None:
        self.told.append(message)


def test_the_first_signal_commits_even_when_the_group_is_already_stopping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The supervisor stops the others when one process failed; a SIGTERM then is the operator's first
    and must let them commit, only a second one cancels."""
    group = ProcessGroup(ProcessorConfig(bootstrap="x:1"), "m:f", [0, 1], 2)
    child = Child()
    group.children = [child]  # type: ignore[list-item]
    group.stop()
    caplog.set_level(logging.INFO, "turnledger.processors.multiproc")
    group._on_signal(signal.SIGTERM)
    assert child.told == [STOP, STOP] and not group._cancelled
    group._on_signal(signal.SIGINT)
    assert child.told == [STOP, STOP, CANCEL] and group._cancelled
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "received SIGTERM: asking the processes to commit their open batches and stop"),
        (logging.WARNING, "received SIGINT again: cancelling the children without committing"),
    ]
