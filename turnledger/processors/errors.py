"""Typed failures of the Kafka runtime; each message says what was tried and how to fix it."""

from __future__ import annotations

from turnledger.errors import ProcessorError, TurnledgerError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_FENCED = 3
"""Exit statuses of `turnledger process` (and of each of its child processes)."""

__all__ = [
    "EXIT_FAILED",
    "EXIT_FENCED",
    "EXIT_USAGE",
    "ChildRefusedError",
    "PoisonHookError",
    "ProcessesFailedError",
    "ProcessorError",
    "ProducerFencedError",
    "TooManyAbortsError",
    "TopicMismatchError",
]


class TopicMismatchError(ProcessorError):
    """An existing topic is incompatible with what the runtime needs (partition count, cleanup policy)."""


class ProducerFencedError(ProcessorError):
    """A newer processor owns this partition: our transactional.id was initialised again elsewhere."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        super().__init__(
            f"producer {transactional_id!r} was fenced: another processor initialised the same "
            "transactional.id, so it now owns this partition. This task stopped without writing."
        )


class PoisonHookError(ProcessorError):
    """The caller's on_poison hook raised; the batch is not committed so no input is silently dropped."""


class TooManyAbortsError(ProcessorError):
    """The same batch failed to commit too many times in a row; retrying further would loop forever."""


class ProcessesFailedError(ProcessorError):
    """A child process of `turnledger process --processes N` failed or died; the others were stopped."""

    def __init__(self, message: str, exit_code: int) -> None:
        self.exit_code = exit_code
        super().__init__(message)


class ChildRefusedError(TurnledgerError):
    """Every child of `turnledger process --processes N` that failed met what one process says in one line
    by `speaker` (`cli_refusals.PROCESS_ENDINGS`): their messages, each once, so that `process` ends with
    the line and status of one process. Not a `ProcessorError`, which `process` says as a failure (exit 1)."""

    def __init__(self, speaker: str, messages: list[str]) -> None:
        self.speaker = speaker
        self.messages = list(dict.fromkeys(messages))
        super().__init__("; ".join(self.messages))

    @property
    def line(self) -> str:
        return f"{self.speaker}: {self}"
