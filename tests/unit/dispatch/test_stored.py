"""`Stored` keeps each key's JSON, not its value: the value is rebuilt in place for the comparison.

A value is `snapshot_base(conversation, format) + length + JSON` (`holds`), byte for byte what
`encode_part` writes; a value that is not (another writer's bytes) is kept as read and compared
whole; whatever the store holds instead (a rolled-back value, another format, a missing key) makes
the cached state stale.
"""

from __future__ import annotations

import pytest

from turnledger.codec import decode, encode
from turnledger.codec.compiled import long_bytes
from turnledger.dispatch.state import STATE_FORMAT_VERSION
from turnledger.dispatch.state_json import StateJson
from turnledger.dispatch.state_keys import SPLIT_FORMAT, head_key, operation_key
from turnledger.dispatch.state_layout import write_state
from turnledger.dispatch.state_read import read_state
from turnledger.dispatch.stored import Stored, encode_part, holds, snapshot_base
from turnledger.model.events import ConversationSnapshot

from .scenario import Conversation, text_stream

LENGTHS = [0, 1, 63, 64, 65, 127, 128, 8191, 8192, 1_048_576]
IDS = ["c", "conv-1", "é" * 70, "x" * 200, "odd\x1fo\x1fid"]


def _avro_long_unminimal(n: int) -> bytes:
    """n as a varint one byte longer than needed (a decoder reads the same number)."""
    minimal = bytearray(long_bytes(n))
    minimal[-1] |= 0x80
    return bytes(minimal) + b"\x00"


@pytest.mark.parametrize("conversation_id", IDS)
@pytest.mark.parametrize("length", LENGTHS)
def test_the_value_is_the_base_then_the_length_then_the_json(conversation_id: str, length: int) -> None:
    """`encode_part` builds the value in place: it is the codec's encoding of the snapshot, byte for
    byte, and decodes to it."""
    part = bytes(i % 251 for i in range(length))
    for format_version in (-1, 0, 1, STATE_FORMAT_VERSION, SPLIT_FORMAT, 63, 64, 10_000, 2**40):
        snapshot = ConversationSnapshot(
            conversation_id=conversation_id, format_version=format_version, state=part
        )
        value = encode_part(conversation_id, format_version, part)
        base = snapshot_base(conversation_id, format_version)
        assert value == encode(snapshot) == encode_part(conversation_id, format_version, part, base)
        assert decode(value) == snapshot
        assert value == base + long_bytes(len(part)) + part
        assert holds(value, base, part)


def test_a_value_that_differs_anywhere_is_not_held() -> None:
    part = b'{"a":1}' * 20
    value = encode_part("conv-1", SPLIT_FORMAT, part)
    base = snapshot_base("conv-1", SPLIT_FORMAT)
    for i in range(len(value)):  # every byte: header, id, format, length, JSON
        changed = value[:i] + bytes([value[i] ^ 1]) + value[i + 1 :]
        assert not holds(changed, base, part), i
    assert not holds(value + b"}", base, part)
    assert not holds(value[:-1], base, part)
    assert not holds(value, snapshot_base("conv-1", STATE_FORMAT_VERSION), part)
    assert not holds(value, snapshot_base("conv-2", SPLIT_FORMAT), part)
    longer = base + _avro_long_unminimal(len(part)) + part
    assert not holds(longer, base, part)


def _written() -> tuple[Conversation, dict[str, bytes], Stored]:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["one"], stop=False))
    store: dict[str, bytes] = {}
    stored = write_state(c.state, Stored(), StateJson(), store.__setitem__, store.__delitem__)
    return c, store, stored


def test_what_is_written_is_kept_as_json_only_and_is_current() -> None:
    _, store, stored = _written()
    assert stored.raw is None and stored.conversation_id == "conv-1"
    assert stored.format_version == SPLIT_FORMAT and list(stored.parts) == list(store)
    assert not any(part is value for part, value in zip(stored.parts.values(), store.values(), strict=True))
    assert stored.current(store.get)
    assert stored.current(lambda key: bytes(bytearray(store[key])))  # equal bytes, not the same object


def test_a_value_rolled_back_reformatted_or_missing_is_not_current() -> None:
    _, store, stored = _written()
    key = operation_key("conv-1", "op-1")
    part = stored.parts[key]
    assert not stored.current({**store, key: encode_part("conv-1", SPLIT_FORMAT, part[:-1] + b" ")}.get)
    assert not stored.current({**store, key: encode_part("conv-1", STATE_FORMAT_VERSION, part)}.get)
    assert not stored.current({k: v for k, v in store.items() if k != key}.get)


def test_a_value_read_as_other_bytes_is_kept_whole_and_compared_whole() -> None:
    c, store, _ = _written()
    key = operation_key("conv-1", "op-1")
    part = read_state(store.get, "conv-1")[1].parts[key]  # type: ignore[index]
    odd = snapshot_base("conv-1", SPLIT_FORMAT) + _avro_long_unminimal(len(part)) + part
    store[key] = odd  # decodes to the same snapshot, but is not the encoding written here
    found = read_state(store.get, "conv-1")
    assert found is not None
    state, stored = found
    assert state == c.state
    assert stored.raw == {key: odd}
    assert stored.current(store.get)
    assert not stored.current({**store, key: encode_part("conv-1", SPLIT_FORMAT, part)}.get)
    again = write_state(state, stored, StateJson(), store.__setitem__, store.__delitem__)
    assert store[key] is odd and again.raw == {key: odd}  # unchanged: not written, still compared whole
    assert again.current(store.get)


def test_a_key_of_another_format_left_unwritten_is_compared_as_it_was_read() -> None:
    c = Conversation(conversation_id="odd\x1fid")
    c.user("hello")
    key = head_key("odd\x1fid")
    part = StateJson().of(c.state)
    older = STATE_FORMAT_VERSION - 1
    store = {key: encode_part("odd\x1fid", older, part)}
    read_as = Stored("odd\x1fid", older, {key: part})
    assert read_as.current(store.get)
    stored = write_state(c.state, read_as, StateJson(), store.__setitem__, store.__delitem__)
    assert store == {key: encode_part("odd\x1fid", older, part)}  # the JSON did not change: not written
    assert stored.format_version == STATE_FORMAT_VERSION and stored.raw == store
    assert stored.current(store.get)
