"""The worker's journal: one exact JSON line per step, the last line per operation on restart, torn lines
skipped, done entries forgotten (gateway/journal.py)."""

from __future__ import annotations

import json
from pathlib import Path

from turnledger.gateway.journal import JournalEntry, WorkerJournal


def test_an_entry_is_keyed_by_conversation_then_operation() -> None:
    """The key is the board's `OperationKey`: (conversation id, operation id)."""
    assert JournalEntry("op-1", "c1", 0).key == ("c1", "op-1")


def test_each_write_is_one_compact_json_line_on_disk_before_the_journal_closes(tmp_path: Path) -> None:
    """A write is on disk at once (flushed), as one compact JSON line naming every field."""
    path = tmp_path / "deep" / "er" / "worker.jsonl"  # the parents are made
    journal = WorkerJournal(path)
    journal.write(JournalEntry("op-1", "c1", 2))
    journal.write(JournalEntry("op-1", "c1", 2, generation=3, handle="h-1"))
    assert path.read_text(encoding="utf-8") == (
        '{"operation_id":"op-1","conversation_id":"c1","after":2,"generation":null,"handle":null,"done":false}\n'
        '{"operation_id":"op-1","conversation_id":"c1","after":2,"generation":3,"handle":"h-1","done":false}\n'
    )
    journal.close()
    assert journal._file.closed


def test_a_journal_opened_again_appends_to_the_file(tmp_path: Path) -> None:
    """A restart appends to the same file (never truncates it); its lines are ASCII (JSON escapes)."""
    path = tmp_path / "worker.jsonl"
    first = WorkerJournal(path)
    first.write(JournalEntry("op-1", "c1", 0))
    first.close()
    second = WorkerJournal(path)
    second.write(JournalEntry("op-é", "c1", 0, handle="h-é"))
    second.close()
    lines = path.read_bytes().decode("utf-8").splitlines()
    assert [json.loads(line)["operation_id"] for line in lines] == ["op-1", "op-é"]
    assert lines[1] == (
        '{"operation_id":"op-\\u00e9","conversation_id":"c1","after":0,"generation":null,'
        '"handle":"h-\\u00e9","done":false}'
    )


def test_the_open_entries_are_the_last_of_each_operation_not_done(tmp_path: Path) -> None:
    """In memory: a later entry of an operation replaces the earlier, a done one drops it."""
    journal = WorkerJournal(tmp_path / "worker.jsonl")
    a0, a1 = JournalEntry("op-a", "c1", 0), JournalEntry("op-a", "c1", 0, generation=1)
    b0 = JournalEntry("op-b", "c2", 4)
    for entry in (a0, b0, a1):
        journal.write(entry)
    assert journal.open_entries() == [a1, b0]
    assert journal.get(("c1", "op-a")) == a1 and journal.get(("c2", "op-b")) == b0
    journal.write(JournalEntry("op-a", "c1", 0, generation=1, done=True))
    assert journal.open_entries() == [b0]
    assert journal.get(("c1", "op-a")) is None
    journal.close()


def test_a_restart_recovers_the_last_line_of_each_open_operation(tmp_path: Path) -> None:
    """On restart the file says what was owned: the last line per operation, done ones gone."""
    path = tmp_path / "worker.jsonl"
    journal = WorkerJournal(path)
    journal.write(JournalEntry("op-a", "c1", 0))
    journal.write(JournalEntry("op-b", "c1", 1))
    journal.write(JournalEntry("op-a", "c1", 0, generation=1, handle="h-a"))
    journal.write(JournalEntry("op-b", "c1", 1, generation=2, done=True))
    journal.close()
    again = WorkerJournal(path)
    assert again.open_entries() == [JournalEntry("op-a", "c1", 0, generation=1, handle="h-a")]
    again.close()


def test_a_done_line_of_an_operation_never_opened_is_skipped(tmp_path: Path) -> None:
    """A done line whose opening lines were compacted away (or never written) is not an error."""
    path = tmp_path / "worker.jsonl"
    path.write_text(
        '{"operation_id":"op-x","conversation_id":"c1","after":0,"done":true}\n'
        '{"operation_id":"op-y","conversation_id":"c1","after":0}\n',
        encoding="utf-8",
    )
    journal = WorkerJournal(path)
    assert journal.open_entries() == [JournalEntry("op-y", "c1", 0)]
    journal.close()


def test_torn_and_foreign_lines_are_skipped_and_the_lines_after_them_read(tmp_path: Path) -> None:
    """A line torn by a crash (not JSON) or not an entry (unknown or missing fields) announced a step
    that never happened: it is skipped, and every line after it still counts."""
    path = tmp_path / "worker.jsonl"
    path.write_text(
        '{"operation_id":"op-a","conversation_id":"c1","af\n'  # torn mid-write: ValueError
        '{"operation_id":"op-b","conversation_id":"c1","after":0,"colour":"red"}\n'  # TypeError
        '{"operation_id":"op-c"}\n'  # TypeError: fields missing
        '{"operation_id":"op-d","conversation_id":"c1","after":5}\n',
        encoding="utf-8",
    )
    journal = WorkerJournal(path)
    assert journal.open_entries() == [JournalEntry("op-d", "c1", 5)]
    journal.close()


def test_a_journal_without_a_path_keeps_entries_in_memory_only(tmp_path: Path) -> None:
    """`WorkerJournal(None)` (a worker without a journal) writes no file, and closing it is a no-op."""
    journal = WorkerJournal(None)
    entry = JournalEntry("op-1", "c1", 0)
    journal.write(entry)
    assert journal.open_entries() == [entry] and journal.path is None
    journal.close()
    assert list(tmp_path.iterdir()) == []


def test_a_journal_is_read_as_utf_8_whatever_the_locale(tmp_path: Path, ascii_locale: None) -> None:
    """JSON text is UTF-8: a line with characters outside ASCII (the journal itself escapes them, a
    line written by another tool need not) is read as such under a locale that is not UTF-8."""
    path = tmp_path / "worker.jsonl"
    path.write_bytes('{"operation_id":"op-é","conversation_id":"c1","after":0}\n'.encode())
    journal = WorkerJournal(path)
    assert journal.open_entries() == [JournalEntry("op-é", "c1", 0)]
    journal.close()


def test_an_entry_written_after_a_torn_line_survives_the_next_restart(tmp_path: Path) -> None:
    """A crash mid-write leaves a line without its newline; the restarted worker's next entry must start
    a line of its own, or the next restart reads it glued to the torn one and skips it (the worker
    would forget an attempt it owns)."""
    path = tmp_path / "worker.jsonl"
    path.write_text('{"operation_id":"op-a","conversation_id":"c1","after":0}\n{"operation_id":"op-b","con')
    restarted = WorkerJournal(path)
    restarted.write(JournalEntry("op-c", "c1", 3))
    restarted.close()
    again = WorkerJournal(path)
    assert again.open_entries() == [JournalEntry("op-a", "c1", 0), JournalEntry("op-c", "c1", 3)]
    again.close()
    assert path.read_text().splitlines()[1:] == [
        '{"operation_id":"op-b","con',
        '{"operation_id":"op-c","conversation_id":"c1","after":3,"generation":null,"handle":null,"done":false}',
    ]
