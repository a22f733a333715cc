"""The worker's local journal: which attempts this worker id owns, so a restart can recover them.

DispatchDecisions do not name the worker (only the DispatchAttempt on the ingress
topic does), and scanning the whole ingress log at start-up to find one's own
attempts does not scale. So the worker writes one JSON line, flushed and fsynced,
BEFORE each step that creates ownership or a handle: the intent before the
DispatchAttempt (`after` = the generation that was active before it), the accepted
generation, the bound handle, and `done` when the operation is settled. On restart
the last line per operation tells what it owned; the manifests topic tells where the
operation stands.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from turnledger.gateway.board import OperationKey


@dataclass(frozen=True, slots=True)
class JournalEntry:
    operation_id: str
    conversation_id: str
    after: int  # the attempt generation active before this worker's attempt
    generation: int | None = None  # accepted generation, once known
    handle: str | None = None
    done: bool = False

    @property
    def key(self) -> OperationKey:
        return (self.conversation_id, self.operation_id)


class WorkerJournal:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[OperationKey, JournalEntry] = {}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._entries = _load(path)
            self._file = path.open("a", encoding="utf-8")
            if self._file.tell() and not path.read_bytes().endswith(b"\n"):
                self._file.write("\n")  # end a line torn by a crash: the next entry starts its own

    def open_entries(self) -> list[JournalEntry]:
        return [e for e in self._entries.values() if not e.done]

    def get(self, key: OperationKey) -> JournalEntry | None:
        return self._entries.get(key)

    def write(self, entry: JournalEntry) -> None:
        self._entries[entry.key] = entry
        if entry.done:
            # keep memory bounded: a done entry is only needed on disk until compaction
            self._entries.pop(entry.key)
        if self.path is not None:
            self._file.write(json.dumps(asdict(entry), separators=(",", ":")) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self.path is not None:
            self._file.close()


def _load(path: Path) -> dict[OperationKey, JournalEntry]:
    entries: dict[OperationKey, JournalEntry] = {}
    if not path.exists():
        return entries
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = JournalEntry(**json.loads(line))
        except (ValueError, TypeError):
            continue  # a line torn by a crash mid-write: the step it announced never happened
        if entry.done:
            entries.pop(entry.key, None)
        else:
            entries[entry.key] = entry
    return entries
