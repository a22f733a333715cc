"""The pure batch engine: ingress record bytes in, encoded output records and state out.

It decodes, routes each event to its conversation's fold and encodes everything
with the Avro codec. Still pure: state comes and goes
through a `StateAccess` the runtime supplies, and nothing here knows about Kafka.
Replay uses the same engine, which is why folding the log again is byte-identical.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from turnledger.adapters.admission import ModelRegistry, builtin_registry
from turnledger.adapters.prefix import RenderCache
from turnledger.codec import CodecError, decode
from turnledger.dispatch import state_read
from turnledger.dispatch.cache_sizes import STATE_CACHE_SIZE
from turnledger.dispatch.fold import fold
from turnledger.dispatch.live_assemblers import LiveAssemblers
from turnledger.dispatch.manifest_blocks import ListingCache
from turnledger.dispatch.state import STATE_FORMAT_VERSION, ConversationState, settled_state
from turnledger.dispatch.state_json import StateJson
from turnledger.dispatch.state_keys import SPLIT_FORMATS
from turnledger.dispatch.state_layout import write_state
from turnledger.dispatch.state_read import decode_snapshot, decode_whole
from turnledger.dispatch.stored import StateDecodeError, Stored, encode_part
from turnledger.dispatch.turn_size import EncodedRecords
from turnledger.errors import TurnledgerError
from turnledger.model.base import Frozen
from turnledger.model.events import (
    CommittedTurn,
    DispatchDecision,
    IngressEvent,
    ManifestIssued,
    PreviewRetracted,
    PreviewUpdated,
    Quarantined,
    Rejected,
    ToolCallReady,
)
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode
from turnledger.records import SourceRecord
from turnledger.topology import Stream

STREAM_OF: Mapping[type[Frozen], Stream] = {
    CommittedTurn: Stream.COMMITTED,
    ManifestIssued: Stream.MANIFESTS,
    DispatchDecision: Stream.MANIFESTS,
    ToolCallReady: Stream.TOOL_CALLS,
    PreviewUpdated: Stream.PREVIEWS,
    PreviewRetracted: Stream.PREVIEWS,
    Quarantined: Stream.QUARANTINE,
    Rejected: Stream.REJECTIONS,
}


@dataclass(frozen=True, slots=True)
class EncodedOutput:
    stream: Stream
    key: bytes | None
    value: bytes
    record: Frozen


class StateAccess(Protocol):
    """The store a batch reads and writes through. It may also have a `rollback_stamp`: an object
    that stays the same (by identity) for as long as no write made through the store can have been
    dropped (an aborted transaction's), and is replaced when one may have been
    (processors/store.py, `Lineage`). Without one, every cached state is checked against the store
    before it is used (`Stored.current`)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...


def encode_state(state: ConversationState, json: StateJson | None = None) -> bytes:
    """The whole state as one format-3 snapshot (how a state was written before format 4 split it)."""
    return encode_part(state.conversation_id, STATE_FORMAT_VERSION, (json or StateJson()).of(state))


def decode_state(value: bytes) -> ConversationState:
    """A state written whole (formats 1 to 3); a split head (format 4 to 6) needs its parts (`read_state`)."""
    snapshot = decode_snapshot(value)
    if snapshot.format_version in SPLIT_FORMATS:
        raise StateDecodeError(
            f"a format-{snapshot.format_version} head: its state is split over keys (read it with read_state)"
        )
    return decode_whole(snapshot)


def read_state(store: StateAccess, conversation_id: str) -> ConversationState | None:
    """The conversation's state as the store holds it, in either layout (None: no state yet)."""
    found = state_read.read_state(store.get, conversation_id)
    return None if found is None else found[0]


class BatchEngine:
    """Folds batches of ingress records. Owns the fold's caches; none of them changes an output.

    - decoded states, bounded, with the exact bytes of every key they were read from or written to
      (`Stored`), so a store rolled back by an aborted transaction is never shadowed by a stale
      decoded state, and a change writes only the parts whose JSON differs (`state_layout.py`);
    - the live assemblers of streaming attempts (`LiveAssemblers`);
    - the changelog JSON of unchanged parts of the states (`StateJson`);
    - the rendered prefix of each conversation's last request per adapter (`RenderCache`), at most
      as many as states (an entry keeps its blocks alive after its state is evicted);
    - the block list of each long conversation's last manifest (`ListingCache`), likewise.
    """

    def __init__(
        self,
        cache_size: int = STATE_CACHE_SIZE,
        models: ModelRegistry | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        """`models`: the model registry admission counts against (the built-in one when None); `limits`:
        the size limits (model/limits.py). A replay must use the ones the processor used."""
        self._models = models or builtin_registry()
        self._limits = limits
        self._cache: OrderedDict[str, tuple[Stored, ConversationState, object | None]] = OrderedDict()
        self._cache_size = cache_size
        self._live = LiveAssemblers()
        self._state_json = StateJson()
        self._renders = RenderCache(max_entries=cache_size)  # no prefix long outlives its state
        self._listings = ListingCache(max_entries=cache_size)

    def process_batch(self, records: Sequence[SourceRecord], store: StateAccess) -> list[EncodedOutput]:
        """Fold `records` as one batch: their encoded outputs, in order, and each changed
        conversation's state written to `store` once."""
        batch = self.open_batch(store)
        outputs = batch.fold(records)
        batch.close()
        return outputs

    def open_batch(self, store: StateAccess) -> BatchInProgress:
        """A batch to fold piece by piece as its records arrive (`BatchInProgress`)."""
        return BatchInProgress(self, store)

    def _apply(
        self,
        record: SourceRecord,
        store: StateAccess,
        stamp: object | None,
        states: dict[str, ConversationState],
        stored: dict[str, Stored],
        changed: set[str],
        encoded: EncodedRecords,
    ) -> list[Frozen]:
        event = _decode_event(record, self._limits)
        if isinstance(event, Rejected):
            return [event]
        conversation_id = event.conversation_id
        state = states.get(conversation_id)
        if state is None:
            state, stored[conversation_id] = self._load(conversation_id, store, stamp)
        try:
            result = fold(
                state, event, self._live, self._models, self._limits, self._renders, encoded, self._listings
            )
        except Exception as exc:  # a bug must cost one event, not the partition, and replay alike
            return [_fold_failed(event, record, exc)]
        if result.state is not state:
            states[conversation_id] = result.state
            changed.add(conversation_id)
        else:
            states.setdefault(conversation_id, state)
        return [_with_source(out, record) for out in result.outputs]

    def _load(
        self, conversation_id: str, store: StateAccess, stamp: object | None
    ) -> tuple[ConversationState, Stored]:
        """The cached state when the store still holds what it was read from or written as: known
        when the store's rollback stamp is the one it was cached under (`StateAccess`), else checked
        key by key; otherwise the state read from the store, its final operations' requests settled
        (`settled_state`: an earlier release kept them whole)."""
        cached = self._cache.get(conversation_id)
        if cached is not None:
            stored, state, cached_under = cached
            if stamp is not None and cached_under is stamp:
                self._cache.move_to_end(conversation_id)
                return state, stored
            if stored.current(store.get):
                self._remember(conversation_id, stored, state, stamp)
                return state, stored
        found = state_read.read_state(store.get, conversation_id)
        if found is None:
            return ConversationState.empty(conversation_id), Stored()
        state, stored = found
        state = settled_state(state)
        self._remember(conversation_id, stored, state, stamp)
        return state, stored

    def _remember(
        self, conversation_id: str, stored: Stored, state: ConversationState, stamp: object | None
    ) -> None:
        self._cache[conversation_id] = (stored, state, stamp)
        self._cache.move_to_end(conversation_id)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


class BatchClosedError(TurnledgerError):
    """A batch was folded or closed again after its close."""


class BatchInProgress:
    """One batch, folded in as many pieces as its records arrive in: `fold` applies records and
    returns their encoded outputs at once, `close` writes each changed conversation's state once.

    The pieces give exactly the outputs and the writes of `process_batch` over the whole batch: an
    event's outputs depend on the states and the events before it, never on where a piece ends, and
    the states are written only at the close. So the runtime folds a batch while it is still being
    gathered and leaves only the writes for when it closes (processors/partition.py), instead of
    holding the event loop for the whole fold then. Reads go to the store as the pieces need them. A
    batch whose `fold` or `close` raised is thrown away with the store's writes; the engine's cache
    holds a state only as read from the store or as a close wrote it, checked against the store
    before it is used again (`BatchEngine._load`)."""

    __slots__ = ("_changed", "_encoded", "_engine", "_open", "_stamp", "_states", "_store", "_stored")

    def __init__(self, engine: BatchEngine, store: StateAccess) -> None:
        self._engine = engine
        self._store = store
        self._stamp = getattr(store, "rollback_stamp", None)
        self._states: dict[str, ConversationState] = {}
        self._stored: dict[str, Stored] = {}
        self._changed: set[str] = set()
        self._encoded = EncodedRecords()
        self._open = True

    def fold(self, records: Sequence[SourceRecord]) -> list[EncodedOutput]:
        """Apply `records` after those folded before; their outputs, encoded, in order."""
        if not self._open:
            raise BatchClosedError("records folded into a batch after its close")
        apply, store, stamp = self._engine._apply, self._store, self._stamp
        states, stored, changed, encoded = self._states, self._stored, self._changed, self._encoded
        outputs: list[Frozen] = []
        for record in records:
            outputs.extend(apply(record, store, stamp, states, stored, changed, encoded))
        return [_encode_output(out, encoded) for out in outputs]

    def close(self) -> None:
        """Write the state of every conversation the batch changed, in conversation order."""
        if not self._open:
            raise BatchClosedError("a batch closed twice")
        self._open = False
        engine, store, stamp, states = self._engine, self._store, self._stamp, self._states
        for conversation_id in sorted(self._changed):
            state = states[conversation_id]
            now = write_state(
                state, self._stored[conversation_id], engine._state_json, store.put, _deleter(store)
            )
            engine._remember(conversation_id, now, state, stamp)


def _deleter(store: StateAccess) -> Callable[[str], None]:
    """`store.delete`, looked up only when a key is deleted. Operations and blocks stay in the state;
    what the fold drops is the content chunks of an assembler (at a commit, a retraction, a new
    attempt), so a store of `get` and `put` alone works until an answer it streamed ends."""

    def delete(key: str) -> None:
        store.delete(key)

    return delete


def _decode_event(record: SourceRecord, limits: Limits) -> IngressEvent | Rejected:
    def rejected(reason: ReasonCode, detail: str, event: IngressEvent | None = None) -> Rejected:
        return Rejected(
            conversation_id=event.conversation_id if event else _key_text(record.key),
            reason=reason,
            detail=detail,
            event_type=type(event).__name__ if event else None,
            event_id=event.event_id if event else None,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            occurred_at_ms=event.occurred_at_ms if event else 0,
        )

    if record.value is None:
        return rejected(ReasonCode.UNDECODABLE_RECORD, "record without a value")
    if len(record.value) > limits.max_record_bytes:
        detail = f"record of {len(record.value)} bytes, at most {limits.max_record_bytes}"
        return rejected(ReasonCode.RECORD_TOO_LARGE, detail)
    try:
        event = decode(record.value)
    except CodecError as exc:
        return rejected(exc.reason, str(exc))
    if not isinstance(event, IngressEvent):
        return rejected(ReasonCode.INVALID_EVENT, f"{type(event).__name__} is not an ingress event")
    if _key_text(record.key) != event.conversation_id:
        detail = f"record key {_key_text(record.key)!r} is not the conversation id"
        return rejected(ReasonCode.KEY_MISMATCH, detail, event)
    return event


def _fold_failed(event: IngressEvent, record: SourceRecord, exc: Exception) -> Rejected:
    """The fold raised: the event is refused and the state left as it was.

    Handled here rather than by the runtime's poison hook so that a replay of the
    log meets the same failure at the same record and emits the same bytes.
    """
    return Rejected(
        conversation_id=event.conversation_id,
        operation_id=getattr(event, "operation_id", None),
        reason=ReasonCode.FOLD_FAILED,
        detail=f"{type(exc).__name__}: {exc}"[:2000],
        event_type=type(event).__name__,
        event_id=event.event_id,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        occurred_at_ms=event.occurred_at_ms,
    )


def _key_text(key: bytes | None) -> str | None:
    if key is None:
        return None
    return key.decode("utf-8", errors="replace")


def _with_source(out: Frozen, record: SourceRecord) -> Frozen:
    if isinstance(out, Rejected):
        return out.model_copy(
            update={
                "source_topic": record.topic,
                "source_partition": record.partition,
                "source_offset": record.offset,
            }
        )
    return out


def _encode_output(out: Frozen, encoded: EncodedRecords) -> EncodedOutput:
    key = _conversation_of(out).encode("utf-8")
    return EncodedOutput(stream=STREAM_OF[type(out)], key=key, value=encoded.take(out), record=out)


def _conversation_of(out: Frozen) -> str:
    if isinstance(out, ManifestIssued):
        return out.manifest.conversation_id
    conversation_id: str | None = getattr(out, "conversation_id", None)
    return conversation_id or ""
