"""`kafka/transaction_log.py`: the coordinator's records read byte for byte as Kafka's specs lay them
out, the partition of a transactional id as Kafka computes it, and what a report says of them."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka import TopicPartition

from turnledger.kafka.producer_states import ProducerState
from turnledger.kafka.transaction_log import (
    TransactionLogError,
    TxnLogEntry,
    TxnStatus,
    completed_outcome,
    entries_of,
    java_string_hash,
    parse_key,
    parse_value,
    partition_for,
    recorded,
)
from turnledger.processors.hanging import coordinator_says

PARTS = [("t.changelog", [0]), ("t.manifests", [0, 2])]


def key(transactional_id: str, version: int = 0) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", version, len(raw)) + raw


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def value_v0(pid: int, epoch: int, status: int, parts: list[tuple[str, list[int]]] | None) -> bytes:
    out = struct.pack(">hqhib", 0, pid, epoch, 60_000, status)
    if parts is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(parts))
        for topic, ids in parts:
            out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(ids))
            out += b"".join(struct.pack(">i", i) for i in ids)
    return out + struct.pack(">qq", 1_000, 900)


def value_v1(pid: int, epoch: int, status: int, parts: list[tuple[str, list[int]]] | None) -> bytes:
    """Version 1 as Kafka writes it, tagged fields included (previous producer id, tag 0, at the end;
    an empty tag section after each partition entry, one with an unknown tag after the first)."""
    out = struct.pack(">hqhib", 1, pid, epoch, 60_000, status)
    if parts is None:
        out += uvarint(0)
    else:
        out += uvarint(len(parts) + 1)
        for n, (topic, ids) in enumerate(parts):
            out += uvarint(len(topic) + 1) + topic.encode() + uvarint(len(ids) + 1)
            out += b"".join(struct.pack(">i", i) for i in ids)
            out += uvarint(0) if n else uvarint(1) + uvarint(9) + uvarint(2) + b"\x01\x02"
    out += struct.pack(">qq", 1_000, 900)
    return out + uvarint(1) + uvarint(0) + uvarint(8) + struct.pack(">q", pid)


@pytest.mark.parametrize("encode", [value_v0, value_v1], ids=["v0", "v1"])
def test_a_value_of_either_version_reads_as_written(encode: Any) -> None:
    entry = parse_value(encode(2, 0, 2, PARTS), offset=320)
    assert entry == TxnLogEntry(
        320,
        2,
        0,
        TxnStatus.PREPARE_COMMIT,
        frozenset({("t.changelog", 0), ("t.manifests", 0), ("t.manifests", 2)}),
    )
    assert parse_value(encode(2, 1, 0, None)).partitions == frozenset()


@pytest.mark.parametrize(
    "value",
    [
        struct.pack(">h", 2) + value_v0(2, 0, 4, [])[2:],  # a version this module does not know
        value_v0(2, 0, 9, []),  # no such status
        value_v0(2, 0, 4, PARTS)[:-3],  # cut short
        value_v1(2, 0, 4, PARTS)[:20],
    ],
    ids=["version", "status", "cut v0", "cut v1"],
)
def test_a_value_off_the_specs_is_refused_with_a_typed_error(value: bytes) -> None:
    with pytest.raises(TransactionLogError):
        parse_value(value)


def test_signed_fields_read_signed() -> None:
    """Kafka's int16/int64 are signed: a producer id of -1 (none) and a negative version read so."""
    assert parse_value(value_v0(-1, 0, 0, None)).producer_id == -1
    with pytest.raises(TransactionLogError, match=r"^value version -1$"):
        parse_value(struct.pack(">h", -1) + value_v0(2, 0, 4, [])[2:])
    assert parse_value(value_v0(2, 0, 2, [("t" * 200, [0])])).partitions == {("t" * 200, 0)}
    assert parse_value(value_v0(2, -1, 2, [("t", [-1])])).partitions == {("t", -1)}
    assert parse_value(value_v0(2, -1, 2, None)).producer_epoch == -1
    null_ids = struct.pack(">hqhib", 0, 2, 0, 1, 2) + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", -1)
    assert parse_value(null_ids + struct.pack(">qq", 1, 1)).partitions == frozenset()  # a null array
    with pytest.raises(TransactionLogError) as caught:
        parse_value(value_v0(2, 0, -1, None))
    assert str(caught.value) == "transaction status -1"


def test_only_keys_of_version_0_name_a_transactional_id() -> None:
    assert parse_key(key("app-ingress-0")) == "app-ingress-0"
    assert parse_key(key("app-ingress-0", version=1)) is None
    assert parse_key(None) is None and parse_key(b"\x00") is None
    assert parse_key(key("")) == ""  # 4 bytes: version and an empty id
    assert parse_key(struct.pack(">hh", 0, -1)) is None  # a null string is no id


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 97), ("Aa", 2112), ("BB", 2112), ("hello", 99162322), ("polygenelubricants", -(2**31))],
)
def test_the_hash_is_javas_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_the_hash_of_a_lone_surrogate_is_its_code_unit() -> None:
    assert java_string_hash("\ud800") == 0xD800  # Java strings are UTF-16 units, unpaired ones too


def test_entries_after_records_of_other_ids_and_tombstones_are_read() -> None:
    records = [
        (0, key("another"), value_v1(2, 0, 5, PARTS)),
        (1, key("tx"), None),
        (2, b"junk", b"junk"),
        (3, key("tx"), b"\x00\x09"),  # a value this module cannot read
        (4, key("tx"), value_v1(2, 0, 4, [])),
    ]
    assert [(e.offset, e.status) for e in entries_of(records, "tx")] == [(4, TxnStatus.COMPLETE_COMMIT)]


def test_the_partition_is_kafkas_abs_of_the_hash_modulo_the_count() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) is 0
    assert partition_for("😀", 7) == abs(java_string_hash("😀")) % 7  # UTF-16 code units, not code points
    assert java_string_hash("😀") == (31 * 0xD83D + 0xDE00)


def log(
    *entries: tuple[int, int, int, list[tuple[str, list[int]]] | None], name: str = "tx"
) -> list[TxnLogEntry]:
    records = [(i, key(name), value_v1(*e)) for i, e in enumerate(entries)]
    records += [
        (99, key("another"), value_v1(2, 0, 5, PARTS)),
        (100, key(name), None),
        (101, b"junk", b"junk"),
    ]
    return entries_of(records, name)


def test_what_was_recorded_last_for_the_producer_id_and_epoch() -> None:
    entries = log((2, 0, 1, PARTS), (2, 0, 2, PARTS), (2, 0, 4, []), (2, 1, 0, None))
    done = recorded(entries, 2, 0)
    assert (done.status, done.committed, done.aborted, done.offset) == (
        TxnStatus.COMPLETE_COMMIT,
        True,
        False,
        2,
    )
    assert ("t.manifests", 2) in done.partitions  # from the Prepare entry: the Complete one lists none
    assert recorded(entries, 2, 1).status is TxnStatus.EMPTY
    assert recorded(entries, 3, 0).status is None
    aborted = recorded(log((2, 0, 1, PARTS), (2, 0, 3, PARTS)), 2, 0)
    assert aborted.aborted and not aborted.committed


CHANGELOG_0 = TopicPartition("t.changelog", 0)
ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, EMPTY = 1, 2, 3, 4, 5, 0


@pytest.mark.parametrize(
    ("entries", "outcome"),
    [
        # a transaction that committed, then the next term's InitProducerId (a new epoch)
        ([(2, 0, ONGOING, PARTS), (2, 0, PREPARE_COMMIT, PARTS), (2, 0, COMPLETE_COMMIT, []),
          (2, 1, EMPTY, None)], TxnStatus.COMPLETE_COMMIT),
        ([(2, 0, ONGOING, PARTS), (2, 0, PREPARE_ABORT, PARTS), (2, 0, COMPLETE_ABORT, [])],
         TxnStatus.COMPLETE_ABORT),
        # an earlier transaction committed, the last one aborted: the last one decides
        ([(2, 0, PREPARE_COMMIT, PARTS), (2, 0, COMPLETE_COMMIT, []), (2, 0, ONGOING, PARTS),
          (2, 0, PREPARE_ABORT, PARTS), (2, 0, COMPLETE_ABORT, [])], TxnStatus.COMPLETE_ABORT),
        ([(2, 0, PREPARE_COMMIT, PARTS), (2, 0, COMPLETE_COMMIT, [])], TxnStatus.COMPLETE_COMMIT),
        # the last transaction did not write the changelog
        ([(2, 0, PREPARE_COMMIT, [("t.manifests", [0])]), (2, 0, COMPLETE_COMMIT, [])], None),
        # its Prepare compacted away: what is left before the Complete is an older entry
        ([(2, 0, ONGOING, PARTS), (2, 0, COMPLETE_COMMIT, [])], None),
        ([(2, 0, COMPLETE_COMMIT, [])], None),
        # a Prepare that does not match the Complete
        ([(2, 0, PREPARE_ABORT, PARTS), (2, 0, COMPLETE_COMMIT, [])], None),
        # the Prepare of another epoch (a fence) before it
        ([(2, 1, PREPARE_COMMIT, PARTS), (2, 0, COMPLETE_COMMIT, [])], None),
        # the last entry of the epoch is not a Complete: still going, preparing, or fenced
        ([(2, 0, PREPARE_COMMIT, PARTS), (2, 0, COMPLETE_COMMIT, []), (2, 0, ONGOING, PARTS)], None),
        ([(2, 0, ONGOING, PARTS), (2, 0, PREPARE_COMMIT, PARTS)], None),
        ([(2, 0, ONGOING, PARTS), (2, 1, PREPARE_ABORT, PARTS), (2, 1, COMPLETE_ABORT, [])], None),
        ([(3, 0, PREPARE_COMMIT, PARTS), (3, 0, COMPLETE_COMMIT, [])], None),  # another producer id
        ([], None),
    ],
)  # fmt: skip
def test_the_coordinators_log_proves_an_outcome_only_by_a_complete_right_after_its_prepare(
    entries: list[tuple[int, int, int, list[tuple[str, list[int]]] | None]], outcome: TxnStatus | None
) -> None:
    assert completed_outcome(log(*entries), 2, 0, CHANGELOG_0) is outcome
    assert completed_outcome(log(*entries), 2, 0, TopicPartition("t.changelog", 1)) is None  # not listed


def state(topic: str = "t.changelog", partition: int = 0) -> ProducerState:
    return ProducerState(TopicPartition(topic, partition), 2, 0, 0, 0, 301)


async def test_a_report_says_what_the_coordinator_recorded_or_why_it_cannot() -> None:
    class Log:
        def __init__(self, entries: list[TxnLogEntry] | Exception) -> None:
            self.entries = entries

        async def recorded(self, producer_id: int, producer_epoch: int) -> Any:
            if isinstance(self.entries, Exception):
                raise self.entries
            return recorded(self.entries, producer_id, producer_epoch)

    entries = log((2, 0, 2, PARTS), (2, 0, 4, []))
    said = await coordinator_says(Log(entries), state())
    assert said == (
        "the coordinator's log (offset 1) records COMPLETE_COMMIT for that producer id and epoch, and its "
        "transaction lists t.changelog-0"
    )
    assert "does not list t.changelog-1" in await coordinator_says(Log(entries), state(partition=1))
    assert "holds no record" in await coordinator_says(Log([]), state())
    assert "could not be read (OSError('down'))" in await coordinator_says(Log(OSError("down")), state())
    assert await coordinator_says(None, state()) == ""


def test_long_names_and_large_tagged_fields_read_through_multi_byte_varints() -> None:
    """A topic of 200 bytes, 130 partitions, tagged fields of 300 and 20,000 bytes, a tag of 2**28: the
    unsigned varints of version 1 in two, three and five bytes."""
    topic, ids = "t" * 200, list(range(130))
    out = struct.pack(">hqhib", 1, 2, 0, 60_000, 2)
    out += uvarint(3) + uvarint(len(topic) + 1) + topic.encode() + uvarint(len(ids) + 1)
    out += b"".join(struct.pack(">i", i) for i in ids)
    out += uvarint(2) + uvarint(200) + uvarint(300) + bytes(300)  # the entry's tagged fields: tag 200,
    out += uvarint(2**28) + uvarint(20_000) + bytes(20_000)  # and a 5-byte tag with a 3-byte size
    out += uvarint(2) + b"u" + uvarint(2) + struct.pack(">i", 1) + uvarint(0)  # then another topic
    out += struct.pack(">qq", 1_000, 900) + uvarint(0)
    entry = parse_value(out)
    assert entry.partitions == {(topic, i) for i in ids} | {("u", 1)}
    assert (entry.producer_id, entry.producer_epoch, entry.status) == (2, 0, TxnStatus.PREPARE_COMMIT)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (struct.pack(">hq", 1, 2), "value cut short"),
        (struct.pack(">hqhib", 1, 2, 0, 1, 2) + uvarint(2) + uvarint(50) + b"t", "string cut short"),
        (struct.pack(">hqhib", 0, 2, 0, 1, 2) + struct.pack(">ih", 1, -5), "string cut short"),
        (
            struct.pack(">hqhib", 1, 2, 0, 1, 2) + uvarint(2) + uvarint(2) + b"t" + uvarint(1) + uvarint(1)
            + uvarint(0) + uvarint(40) + bytes(3),
            "tagged field cut short",
        ),
        (struct.pack(">hqhib", 1, 2, 0, 1, 2) + b"\xff" * 6, "bad unsigned varint"),
        (struct.pack(">hqhib", 1, 2, 0, 1, 2) + b"\x80", "bad unsigned varint"),
    ],
    ids=["int cut", "string cut", "negative length", "tagged field cut", "varint too long", "varint cut"],
)  # fmt: skip
def test_each_way_a_value_is_cut_short_says_which(value: bytes, message: str) -> None:
    with pytest.raises(TransactionLogError) as caught:
        parse_value(value)
    assert str(caught.value) == message


def test_a_producer_id_and_epoch_never_recorded_lists_no_partitions() -> None:
    nothing = recorded([], 2, 0)
    assert (nothing.status, nothing.partitions, nothing.offset) == (None, frozenset(), None)
    assert recorded(log((2, 0, 4, [])), 2, 0).partitions == frozenset()
    assert nothing.describe(TopicPartition("t", 0)) == (
        "the coordinator's log holds no record of that producer id and epoch within the read"
    )
