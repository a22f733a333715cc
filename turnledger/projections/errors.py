"""Typed failures of the projector and replay tools; each message says what was tried and how to fix it."""

from __future__ import annotations

from turnledger.errors import ProjectionError

__all__ = ["AmbiguousOperationError", "ProjectionError"]


class AmbiguousOperationError(ProjectionError):
    def __init__(self, operation_id: str, conversations: list[str]) -> None:
        self.operation_id = operation_id
        self.conversations = conversations
        super().__init__(
            f"operation id {operation_id!r} exists in {len(conversations)} conversations "
            f"({', '.join(repr(c) for c in conversations)}); operation ids are unique per conversation "
            "only. Name the conversation (--conversation)."
        )
