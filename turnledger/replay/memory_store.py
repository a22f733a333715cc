"""An in-memory state store for folding the ingress log outside the processor."""

from __future__ import annotations


class MemoryStore:
    """The engine's `StateAccess` over a dict. Conversation ids are unique across partitions,
    so one store serves every partition of a replay."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def put(self, key: str, value: bytes) -> None:
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)
