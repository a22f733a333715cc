"""Restoring changelog states of earlier formats: 1 (whole manifests) and 2 (no leases) into 3.

The format-1 fixture was written before leases existed: an attempt open in it is restored with
a lease of unknown owner (`LEGACY_LEASE_OWNER`), where the current fold names the worker. That is
one difference allowed between a restored state (and what it folds on to) and a current one. The
other: assembler snapshots count the content deltas of each block (`deltas`, for the size limits)
since the size limits; an older snapshot restores with none counted, so its counts start there.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from turnledger.codec import decode, encode
from turnledger.dispatch.engine import BatchEngine, StateDecodeError, decode_state, encode_state, read_state
from turnledger.dispatch.migrate import UPGRADES, UnreadableStateFormat, upgrade_state
from turnledger.dispatch.state import (
    LEGACY_LEASE_OWNER,
    ConversationState,
    ManifestSeal,
    settled_state,
)
from turnledger.dispatch.state_keys import SEPARATOR, SPLIT_FORMAT
from turnledger.model.events import DEFAULT_LEASE_MS, ConversationSnapshot, DispatchDecision
from turnledger.records import SourceRecord

from .scenario import Conversation, text_stream

FIXTURE = Path(__file__).parents[2] / "fixtures" / "state" / "changelog_v1.json"
"""Written by the format-1 engine (commit 6968522) folding the first 187 events of a 6-conversation
bench workload: states with committed, streaming and prepared operations, tool turns included;
`later_events` are the rest of that workload."""


class _Store(dict[str, bytes]):
    def put(self, key: str, value: bytes) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        del self[key]

    def conversations(self) -> list[str]:
        """The conversations it holds a state of: their heads' keys (format 4 splits a state)."""
        return sorted(key for key in self if SEPARATOR not in key)

    def state(self, conversation_id: str) -> ConversationState:
        state = read_state(self, conversation_id)
        assert state is not None, conversation_id
        return state


def _fixture() -> tuple[list[bytes], dict[str, bytes], list[bytes]]:
    """Events folded by the format-1 engine, the states it wrote, and the events after them."""
    raw = json.loads(FIXTURE.read_text())
    events = [base64.b64decode(v) for v in raw["events"]]
    later = [base64.b64decode(v) for v in raw["later_events"]]
    return events, {k: base64.b64decode(v) for k, v in raw["snapshots_v1"].items()}, later


def _records(values: list[bytes]) -> list[SourceRecord]:
    return [SourceRecord("turnledger.ingress", 0, i, _key(v), v) for i, v in enumerate(values)]


def test_format_1_states_restore_to_what_the_current_fold_builds() -> None:
    events, snapshots_v1, _ = _fixture()
    store = _Store()
    BatchEngine().process_batch(_records(events), store)
    assert store.conversations() == sorted(snapshots_v1)
    for conversation_id, v1 in snapshots_v1.items():
        snapshot = decode(v1)
        assert isinstance(snapshot, ConversationSnapshot) and snapshot.format_version == 1
        restored = decode_state(v1)
        current = _without_delta_counts(store.state(conversation_id))
        restored = _settled(restored)
        assert restored == _unknown_owners(current, restored)
        open_before_leases = [
            op for op in restored.operations.values() if op.lease_owner == LEGACY_LEASE_OWNER
        ]
        assert all(op.may_produce_output and op.lease_ms == DEFAULT_LEASE_MS for op in open_before_leases)
        assert encode_state(restored) == encode_state(_unknown_owners(current, restored))


def test_a_restored_format_1_state_folds_on_exactly_like_a_current_one() -> None:
    events, snapshots_v1, later = _fixture()
    current = _Store()
    BatchEngine().process_batch(_records(events), current)
    from_v1 = _Store(snapshots_v1)
    out_v1 = BatchEngine().process_batch(_records(later), from_v1)
    out_current = BatchEngine().process_batch(_records(later), current)
    assert len(out_v1) > len(later)  # the rest of every conversation: commits, manifests, previews
    assert [(o.stream, o.key) for o in out_v1] == [(o.stream, o.key) for o in out_current]
    differing = [(a.record, b.record) for a, b in zip(out_v1, out_current, strict=True) if a.value != b.value]
    for restored_out, current_out in differing:  # only decisions of attempts open before leases
        assert isinstance(restored_out, DispatchDecision) and isinstance(current_out, DispatchDecision)
        assert restored_out.lease_owner == LEGACY_LEASE_OWNER
        assert restored_out == current_out.model_copy(update={"lease_owner": LEGACY_LEASE_OWNER})
    assert len(differing) < len(out_v1) // 2
    restored_states = {k: _settled(_without_delta_counts(from_v1.state(k))) for k in from_v1.conversations()}
    current_states = {k: _without_delta_counts(current.state(k)) for k in current.conversations()}
    assert sorted(restored_states) == sorted(current_states)
    for key, restored in restored_states.items():
        assert restored == _unknown_owners(current_states[key], restored)


def _without_delta_counts(state: ConversationState) -> ConversationState:
    """The state with the assemblers' per-block delta counts left out (a format-1 snapshot has none)."""
    operations = {
        op_id: op
        if op.assembler is None
        else op.model_copy(
            update={
                "assembler": {
                    **op.assembler,
                    "blocks": [{k: v for k, v in b.items() if k != "deltas"} for b in op.assembler["blocks"]],
                }
            }
        )
        for op_id, op in state.operations.items()
    }
    return state.model_copy(update={"operations": operations})


def _settled(state: ConversationState) -> ConversationState:
    """The state with its final operations' requests as the current fold keeps them (`settled_state`):
    an operation that was final when its state was written keeps its whole request when restored."""
    return settled_state(state)


def _unknown_owners(current: ConversationState, restored: ConversationState) -> ConversationState:
    """`current` with the lease owner unknown wherever the restored state could not know it."""
    operations = {
        op_id: op.model_copy(update={"lease_owner": LEGACY_LEASE_OWNER})
        if restored.operations[op_id].lease_owner == LEGACY_LEASE_OWNER
        else op
        for op_id, op in current.operations.items()
    }
    return current.model_copy(update={"operations": operations})


def test_an_operation_keeps_a_seal_whatever_the_length_of_the_history() -> None:
    sizes = []
    for turns in (1, 12):
        c = Conversation()
        for i in range(turns):
            c.user(f"earlier turn {i} " * 20)
        c.dispatch_to_streaming()
        c.deltas(text_stream(["answer"], stop=True))
        op = c.state.operations["op-1"]
        assert isinstance(op.manifest, ManifestSeal)
        sizes.append(len(op.manifest.model_dump_json()))
    assert sizes[1] - sizes[0] == len(str(12)) - len(str(1))  # only the revision number is longer


def test_a_state_of_an_unknown_format_is_a_typed_error() -> None:
    c = Conversation()
    c.user("hi")
    future = ConversationSnapshot(
        conversation_id=c.state.conversation_id,
        format_version=SPLIT_FORMAT + 1,
        state=c.state.model_dump_json(),
    )
    with pytest.raises(StateDecodeError, match=f"state format {SPLIT_FORMAT + 1}"):
        decode_state(encode(future))
    with pytest.raises(StateDecodeError, match=f"state format {SPLIT_FORMAT + 1}"):
        read_state(_Store({c.state.conversation_id: encode(future)}), c.state.conversation_id)


def _key(value: bytes) -> bytes:
    return str(decode(value).conversation_id).encode()  # type: ignore[attr-defined]


def test_format_2_gives_a_lease_to_exactly_the_attempts_that_may_still_produce_output() -> None:
    """An attempt open before leases existed gets a lease of unknown owner, renewed by its last event;
    a never-attempted, a terminated or a final operation gets none."""

    def operation(state: str, generation: int, terminated: bool) -> dict[str, object]:
        return {
            "state": state,
            "attempt_generation": generation,
            "attempt_terminated": terminated,
            "updated_at_ms": 7,
        }

    upgraded = UPGRADES[2](
        {
            "format_version": 2,
            "operations": {
                "streaming": operation("STREAMING", 1, False),
                "unknown-open": operation("UNKNOWN", 2, False),
                "cancelled-open": operation("CANCELLED", 1, False),
                "unknown-terminated": operation("UNKNOWN", 2, True),
                "cancelled-never-attempted": operation("CANCELLED", 0, False),
                "committed": operation("COMMITTED", 1, False),
            },
        }
    )
    assert upgraded["format_version"] == 3
    leased = {name: op.get("lease_owner") for name, op in upgraded["operations"].items()}
    assert {name for name, owner in leased.items() if owner is not None} == {
        "streaming",
        "unknown-open",
        "cancelled-open",
    }
    assert set(leased.values()) == {LEGACY_LEASE_OWNER, None}
    assert upgraded["operations"]["unknown-open"]["lease_renewed_at_ms"] == 7
    assert upgraded["operations"]["unknown-open"]["lease_ms"] == DEFAULT_LEASE_MS


def test_an_unreadable_format_names_what_this_release_reads() -> None:
    with pytest.raises(UnreadableStateFormat) as refused:
        upgrade_state(9, "{}")
    assert str(refused.value) == "state format 9 (this release reads [1, 2, 3])"
