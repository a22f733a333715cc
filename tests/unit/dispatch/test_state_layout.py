"""A conversation's state split over keys (format 6), only the parts that changed written.

Read back, the parts give an equal state whose JSON is the format-3 JSON byte for byte; an event
writes the keys of what it changed and nothing else; a format-3 changelog folds on exactly like
one written split; an aborted batch's parts never shadow what the store holds. (The chunks of
a streaming answer's contents: test_state_chunks.py.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import orjson
import pytest

from turnledger.codec import decode, encode
from turnledger.dispatch import state_layout, state_read
from turnledger.dispatch.engine import BatchEngine, encode_state, read_state
from turnledger.dispatch.part_rows import operation_fields, progress_fields
from turnledger.dispatch.state import STATE_FORMAT_VERSION, ConversationState, OperationState
from turnledger.dispatch.state_json import StateJson
from turnledger.dispatch.state_keys import (
    BLOCKS_TAG,
    CHUNK,
    HANDLES_TAG,
    SEPARATOR,
    SPLIT_FORMAT,
    TURNS_TAG,
    blocks_key,
    chunk_key,
    head_key,
    operation_key,
    progress_key,
    request_key,
    toolset_key,
)
from turnledger.dispatch.state_layout import graph_parts, state_parts, write_state
from turnledger.dispatch.stored import GraphParts, StateLayoutError, Stored, encode_part
from turnledger.model.base import Frozen
from turnledger.model.events import ConversationSnapshot, IngressEvent
from turnledger.model.tools import toolset_digest
from turnledger.processors.store import OverlayStore
from turnledger.records import SourceRecord
from turnledger.sequence.graph_state import CallRecord

from . import test_fold
from .scenario import Conversation, text_stream, tool_stream

PARIS = '{"city": "Paris"}'
FOLD_SCENARIOS = [
    fn
    for name, fn in inspect.getmembers(test_fold, inspect.isfunction)
    if name.startswith("test_") and not inspect.signature(fn).parameters
]


class Store(dict[str, bytes]):
    """A store that logs every write: (key, value or None for a delete)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.log: list[tuple[str, bytes | None]] = []

    def put(self, key: str, value: bytes) -> None:
        self[key] = value
        self.log.append((key, value))

    def delete(self, key: str) -> None:
        del self[key]
        self.log.append((key, None))


def weather_round() -> Conversation:
    """A conversation whose first answer called a tool, with the tool's result committed."""
    c = Conversation()
    c.user("weather in Paris?")
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": ', '"Paris"}'])]))
    c.tool_results(("call-1", "get_weather", PARIS))
    return c


def _round_trip(state: ConversationState, old: Stored | None = None) -> Stored:
    store = Store()
    stored = write_state(state, old or Stored(), StateJson(), store.put, store.delete)
    found = read_state(store, state.conversation_id)
    assert found is not None
    assert found == state
    assert found.model_dump_json() == state.model_dump_json()
    return stored


@pytest.mark.parametrize("scenario", FOLD_SCENARIOS, ids=lambda fn: fn.__name__)
def test_every_state_of_every_fold_scenario_reads_back_equal(
    scenario: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ConversationState] = []
    apply = Conversation.apply
    json, previous = StateJson(), [None]

    def checked(self: Conversation, event: IngressEvent) -> list[Frozen]:
        outputs = apply(self, event)
        _round_trip(self.state)
        seen.append(self.state)
        grown = graph_parts(self.state.graph, json, previous[0])  # built from the last graph's parts
        assert grown == graph_parts(self.state.graph, StateJson())
        previous[0] = grown  # type: ignore[call-overload]
        return outputs

    monkeypatch.setattr(Conversation, "apply", checked)
    scenario()
    assert seen


def _record(event: IngressEvent, offset: int) -> SourceRecord:
    return SourceRecord("turnledger.ingress", 0, offset, event.conversation_id.encode(), encode(event))


def _written(engine: BatchEngine, store: Store, event: IngressEvent, offset: int) -> list[str]:
    store.log.clear()
    engine.process_batch([_record(event, offset)], store)
    return [key for key, _ in store.log]


def test_an_event_writes_the_keys_of_what_it_changed() -> None:
    c = weather_round()
    c.request("op-2")
    engine, store = BatchEngine(), Store()
    written = [_written(engine, store, event, i) for i, event in enumerate(c.events)]
    conv, op, op2 = "conv-1", operation_key("conv-1", "op-1"), operation_key("conv-1", "op-2")
    progress, progress2 = progress_key(conv, "op-1"), progress_key(conv, "op-2")
    turns, handles = chunk_key(conv, TURNS_TAG, 0), chunk_key(conv, HANDLES_TAG, 0)
    toolset = toolset_key(conv, toolset_digest(c.state.operations["op-2"].request.tools))
    assert written == [
        [conv, turns, blocks_key(conv, 0)],  # the user turn: the head, its turn id, its revision's blocks
        # DispatchRequested: the head names a new operation, whose request names a new toolset
        [conv, op, progress, request_key(conv, "op-1"), toolset],
        [op, progress],  # DispatchAttempt: a new state, and its time
        [op, progress],  # DispatchSent
        [conv, handles, op, progress],  # HandleBound: the first handle (a chunk the head counts)
        # the tool call commits a turn; the final operation, the last, keeps its tools (no policy)
        [conv, turns, op, progress, blocks_key(conv, 1)],
        [conv, turns, blocks_key(conv, 2)],  # the tool result
        # the next operation settles op-1's request (no tools) and names the same toolset: not written
        [conv, request_key(conv, "op-1"), op2, progress2, request_key(conv, "op-2")],
    ]
    state = read_state(store, conv)
    assert state == c.state


def test_a_streamed_delta_writes_only_its_operation_and_not_its_request() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["Hel"], stop=False)[:3])
    engine, store = BatchEngine(), Store()
    for i, event in enumerate(c.events[:-1]):
        engine.process_batch([_record(event, i)], store)
    keys = _written(engine, store, c.events[-1], len(c.events))
    assert keys == [progress_key("conv-1", "op-1")]  # less than a chunk of content: in its progress
    part = decode(store[keys[0]])
    assert isinstance(part, ConversationSnapshot) and part.format_version == SPLIT_FORMAT
    op = c.state.operations["op-1"]
    assert op.manifest is not None and op.request.model_dump_json().encode() not in part.state
    assert op.manifest.manifest_digest.encode() not in part.state and b'"Hel"' in part.state
    own = decode(store[operation_key("conv-1", "op-1")])
    assert isinstance(own, ConversationSnapshot) and b'"Hel"' not in own.state
    progress, counts = part.state.split(b"\n")
    assert counts == b"[0]"
    fields = operation_fields(orjson.loads(own.state)) | progress_fields(orjson.loads(progress))
    assert sorted(fields) == sorted(set(OperationState.model_fields) - {"request"})  # every field once
    whole = {**fields, "request": op.request.model_dump(mode="json")}
    assert whole == orjson.loads(op.model_dump_json())


def test_a_format_3_changelog_folds_on_exactly_like_a_split_one() -> None:
    c = Conversation()
    c.user("weather in Paris?")
    c.dispatch_to_streaming()
    half = len(c.events)
    c.deltas(tool_stream([("call-1", "get_weather", ['{"city": "Paris"}'])]))
    c.tool_results(("call-1", "get_weather", PARIS))
    c.request("op-2")
    c.attempt("op-2")
    records = [_record(e, i) for i, e in enumerate(c.events)]
    split = Store()
    BatchEngine().process_batch(records[:half], split)
    state = read_state(split, "conv-1")
    assert state is not None
    old = Store({"conv-1": encode_state(state)})  # what a format-3 engine wrote
    assert decode(old["conv-1"]).format_version == STATE_FORMAT_VERSION  # type: ignore[attr-defined]
    out_old = BatchEngine().process_batch(records[half:], old)
    out_split = BatchEngine().process_batch(records[half:], split)
    assert [(o.stream, o.key, o.value) for o in out_old] == [(o.stream, o.key, o.value) for o in out_split]
    assert len(out_old) > 3
    assert dict(old) == dict(split)  # the head rewritten in place, split, with every part
    assert decode(old["conv-1"]).format_version == SPLIT_FORMAT  # type: ignore[attr-defined]
    assert read_state(old, "conv-1") == c.state


def test_an_aborted_batch_never_shadows_the_store() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["one"], stop=False))
    c.deltas(text_stream(["two"], stop=True)[4:])
    records = [_record(e, i) for i, e in enumerate(c.events)]
    engine, base = BatchEngine(), Store()
    engine.process_batch(records[:-2], base)
    aborted = OverlayStore(base)
    engine.process_batch(records[-2:-1], aborted)
    assert list(aborted.dirty) == [progress_key("conv-1", "op-1")]
    aborted.discard()  # the transaction aborted: the operation's progress is back to what it was
    retried = OverlayStore(base)
    outputs = engine.process_batch(records[-2:], retried)
    fresh = BatchEngine().process_batch(records[-2:], OverlayStore(base))
    assert [o.value for o in outputs] == [o.value for o in fresh]
    retried.commit()
    assert read_state(base, "conv-1") == c.state


def test_indexes_that_do_not_split_by_revision_stay_in_the_head() -> None:
    c = Conversation()
    c.user("one")
    c.user("two")
    stray = CallRecord(block_id="u1-b0", tool_name="t", argument_state="complete", revision=99)
    graph = c.state.graph.model_copy(update={"calls": {"stray": stray}})
    state = c.state.model_copy(update={"graph": graph})
    parts, _ = state_parts(state, StateJson())
    assert b'"stray"' in parts["conv-1"]
    assert all(b'"stray"' not in part for key, part in parts.items() if key != "conv-1")
    _round_trip(state)
    late, early = (stray.model_copy(update={"revision": r}) for r in (2, 1))
    graph = c.state.graph.model_copy(update={"calls": {"late": late, "early": early}})  # out of order
    state = c.state.model_copy(update={"graph": graph})
    parts, _ = state_parts(state, StateJson())
    assert b'"late"' in parts["conv-1"] and b'"early"' in parts["conv-1"]
    _round_trip(state)
    parts, _ = state_parts(c.state, StateJson())
    assert b'"u1-b0":0' not in parts["conv-1"] and b'"u1-b0":0' in parts[blocks_key("conv-1", 0)]
    _round_trip(c.state)


def test_a_conversation_id_holding_the_separator_keeps_its_state_whole() -> None:
    c = Conversation(conversation_id="odd\x1fo\x1fid")
    c.user("hello")
    c.dispatch_to_streaming()
    _round_trip(c.state)
    store = Store()
    stored = write_state(c.state, Stored(), StateJson(), store.put, store.delete)
    assert list(stored.parts) == list(store) == ["\x1f\x1fodd\x1fo\x1fid"] == [head_key("odd\x1fo\x1fid")]
    assert stored.current(store.get) and stored.format_version == STATE_FORMAT_VERSION
    snapshot = decode(store["\x1f\x1fodd\x1fo\x1fid"])
    assert isinstance(snapshot, ConversationSnapshot) and snapshot.format_version == STATE_FORMAT_VERSION


def test_an_id_equal_to_another_conversations_part_key_never_writes_over_that_part() -> None:
    victim = Conversation(conversation_id="odd")
    victim.user("hello")
    victim.dispatch_to_streaming()
    odd = Conversation(conversation_id=operation_key("odd", "op-1"))
    odd.user("hello")
    odd.dispatch_to_streaming()
    store = Store()
    write_state(victim.state, Stored(), StateJson(), store.put, store.delete)
    write_state(odd.state, Stored(), StateJson(), store.put, store.delete)
    assert read_state(store, "odd") == victim.state
    assert read_state(store, operation_key("odd", "op-1")) == odd.state
    assert len(store) == len(state_parts(victim.state, StateJson())[0]) + 1


def test_a_format_3_state_under_the_bare_id_is_read_and_moved_to_its_key() -> None:
    odd = Conversation(conversation_id="odd\x1fo\x1fid")
    odd.user("hello")
    store = Store({"odd\x1fo\x1fid": encode_state(odd.state)})
    found = state_read.read_state(store.get, "odd\x1fo\x1fid")
    assert found is not None and found[0] == odd.state
    write_state(odd.state, found[1], StateJson(), store.put, store.delete)
    assert sorted(store) == [head_key("odd\x1fo\x1fid")]
    assert store.log == [
        (head_key("odd\x1fo\x1fid"), store[head_key("odd\x1fo\x1fid")]),
        ("odd\x1fo\x1fid", None),
    ]


def test_another_conversations_part_under_the_bare_id_is_neither_read_nor_deleted() -> None:
    victim = Conversation(conversation_id="odd")
    victim.user("hello")
    victim.dispatch_to_streaming()
    store = Store()
    write_state(victim.state, Stored(), StateJson(), store.put, store.delete)
    odd_id = operation_key("odd", "op-1")
    assert odd_id in store
    assert state_read.read_state(store.get, odd_id) is None
    odd = Conversation(conversation_id=odd_id)
    odd.user("hello")
    write_state(odd.state, Stored(), StateJson(), store.put, store.delete)
    assert read_state(store, "odd") == victim.state
    assert read_state(store, odd_id) == odd.state


def test_a_missing_part_or_a_part_of_another_conversation_is_a_typed_error() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    store = Store()
    write_state(c.state, Stored(), StateJson(), store.put, store.delete)
    missing = Store(store)
    del missing[request_key("conv-1", "op-1")]
    with pytest.raises(StateLayoutError, match="does not hold"):
        read_state(missing, "conv-1")
    foreign = Store(store)
    foreign[operation_key("conv-1", "op-1")] = encode_part("conv-2", SPLIT_FORMAT, b"{}\n{}")
    with pytest.raises(StateLayoutError, match="a part of 'conv-2'"):
        read_state(foreign, "conv-1")
    whole = Store(store)
    whole[blocks_key("conv-1", 0)] = encode_state(c.state)
    with pytest.raises(StateLayoutError, match="not a part"):
        read_state(whole, "conv-1")


def test_an_operation_whose_parts_are_not_its_rows_is_a_typed_error() -> None:
    c = Conversation()
    c.user("hello")
    c.dispatch_to_streaming()
    c.deltas(text_stream(["Hel"], stop=False)[:3])
    store = Store()
    write_state(c.state, Stored(), StateJson(), store.put, store.delete)
    own, progress = operation_key("conv-1", "op-1"), progress_key("conv-1", "op-1")
    own_json, progress_json = decode(store[own]).state, decode(store[progress]).state  # type: ignore[attr-defined]
    without_progress = Store(store)
    del without_progress[progress]
    with pytest.raises(StateLayoutError, match="does not hold"):
        read_state(without_progress, "conv-1")
    row = orjson.loads(own_json)
    line, counts = progress_json.split(b"\n")
    snapshot = orjson.loads(line)[0]
    assert len(row) == 14 and len(row[2]) == 4 and len(snapshot) == 19 and snapshot[5][0][:2] == [0, "text"]

    def progress_with(index: int, value: object) -> bytes:
        changed = list(snapshot)
        changed[index] = value
        return orjson.dumps([changed, 1, 1]) + b"\n" + counts

    broken = {
        own: [
            own_json[:-1],  # not JSON
            own_json + b"\n[0]",  # two lines
            own_json[:-1] + b",0]",  # a value too many
            b"{}",
            orjson.dumps([*row[:2], row[2][:3], *row[3:]]),  # the manifest's row short of a value
        ],
        progress: [
            b"[1,2]\n" + counts,
            b"[7,1,1]\n" + counts,  # a snapshot neither a row nor an object
            orjson.dumps([snapshot[:-1], 1, 1]) + b"\n" + counts,
            progress_with(5, {"0": 1}),  # its blocks not a list
            progress_with(5, [snapshot[5][0][:7]]),  # a block short of a value
            progress_with(18, [0, 0, 0]),  # the counters short of one
        ],
    }
    for key, values in broken.items():
        for value in values:
            bad = Store(store)
            bad[key] = encode_part("conv-1", SPLIT_FORMAT, value)
            with pytest.raises(StateLayoutError, match="the parts of operation 'op-1' are not its rows"):
                read_state(bad, "conv-1")
    one_line = Store({**store, progress: encode_part("conv-1", SPLIT_FORMAT, line)})
    with pytest.raises(StateLayoutError, match="the part of operation 'op-1' has 1 lines"):
        read_state(one_line, "conv-1")
    format_6 = Store({k: encode_part("conv-1", 6, decode(v).state) for k, v in store.items()})  # type: ignore[attr-defined]
    with pytest.raises(StateLayoutError, match="the parts of operation 'op-1' are not its two lines each"):
        read_state(format_6, "conv-1")  # format-7 rows under a format-6 head
    format_5 = Store({k: encode_part("conv-1", 5, decode(v).state) for k, v in store.items()})  # type: ignore[attr-defined]
    with pytest.raises(StateLayoutError, match="the part of operation 'op-1' has 1 lines"):
        read_state(format_5, "conv-1")  # a format-7 part under a format-5 head


def test_a_part_no_longer_in_the_state_is_deleted() -> None:
    c = Conversation()
    c.user("hello")
    c.request("op-1")
    c.request("op-2")
    store = Store()
    stored = write_state(c.state, Stored(), StateJson(), store.put, store.delete)
    fewer = c.state.model_copy(update={"operations": {"op-2": c.state.operations["op-2"]}})
    store.log.clear()
    write_state(fewer, stored, StateJson(), store.put, store.delete)
    assert sorted(store.log, key=lambda kv: kv[0]) == [
        ("conv-1", store["conv-1"]),
        (operation_key("conv-1", "op-1"), None),
        (progress_key("conv-1", "op-1"), None),
        (request_key("conv-1", "op-1"), None),
    ]
    assert read_state(store, "conv-1") == fewer


def test_turn_ids_and_handles_past_a_chunk_write_only_the_last_chunk() -> None:
    c = Conversation()
    for turn in range(CHUNK + 1):
        c.user(f"turn {turn}")
    engine, store = BatchEngine(), Store()
    written = [_written(engine, store, event, i) for i, event in enumerate(c.events)]
    conv = "conv-1"
    assert written[CHUNK - 1] == [conv, chunk_key(conv, TURNS_TAG, 0), blocks_key(conv, CHUNK - 1)]
    assert written[CHUNK] == [conv, chunk_key(conv, TURNS_TAG, 1), blocks_key(conv, CHUNK)]
    first = decode(store[chunk_key(conv, TURNS_TAG, 0)])
    assert isinstance(first, ConversationSnapshot)
    assert first.state == orjson.dumps([f"u{i + 1}" for i in range(CHUNK)])
    handles = {f"h{i}": f"sha256:{i}" for i in range(CHUNK + 3)}
    state = c.state.model_copy(update={"handles": handles})
    stored = _round_trip(state)
    assert sorted(k for k in stored.parts if f"{SEPARATOR}{HANDLES_TAG}{SEPARATOR}" in k) == [
        chunk_key(conv, HANDLES_TAG, 0),
        chunk_key(conv, HANDLES_TAG, 1),
    ]


def _checking_parts_since(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every `parts_since` answer checked against `state_parts` (same keys, order and JSON);
    returns the count of (answered, declined) calls, filled as the engine writes."""
    counts = [0, 0]
    original = state_layout.parts_since

    def checked(state: ConversationState, json: StateJson, old: Stored) -> dict[str, bytes] | None:
        since = original(state, json, old)
        counts[since is None] += 1
        if since is not None:
            full, _ = state_parts(state, StateJson(), old.graph)
            assert list(since.items()) == list(full.items())
        return since

    monkeypatch.setattr(state_layout, "parts_since", checked)
    _checking_reused_parts(monkeypatch, counts)
    return counts


def _checking_reused_parts(monkeypatch: pytest.MonkeyPatch, counts: list[int]) -> None:
    """Make every `state_parts` that reuses parts of the last write checked against `state_parts`
    from scratch (same keys, order and JSON); counts those that reused any in `counts[2]`."""
    original = state_layout.state_parts
    counts.append(0)

    def checked(
        state: ConversationState,
        json: StateJson,
        graph: GraphParts | None = None,
        since: Stored | None = None,
    ) -> tuple[dict[str, bytes], GraphParts | None]:
        parts, graph_out = original(state, json, graph, since)
        full, _ = original(state, StateJson(), graph)
        assert list(parts.items()) == list(full.items())
        if since is not None and since.source is not None:
            counts[2] += any(part is since.parts.get(key) for key, part in parts.items())
        return parts, graph_out

    monkeypatch.setattr(state_layout, "state_parts", checked)


@pytest.mark.parametrize("scenario", FOLD_SCENARIOS, ids=lambda fn: fn.__name__)
def test_the_parts_of_only_what_changed_are_the_parts_of_the_whole_state(
    scenario: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fold scenario's events folded by the engine one batch per event: wherever `write_state`
    redoes only the parts of what changed, they are exactly the parts of the whole state."""
    recorded: list[IngressEvent] = []
    apply = Conversation.apply

    def recording(self: Conversation, event: IngressEvent) -> list[Frozen]:
        recorded.append(event)
        return apply(self, event)

    monkeypatch.setattr(Conversation, "apply", recording)
    scenario()
    counts = _checking_parts_since(monkeypatch)
    engine, store = BatchEngine(), Store()
    for offset, event in enumerate(recorded):
        engine.process_batch([_record(event, offset)], store)
    assert recorded and counts[0] >= 0  # a scenario of refusals alone writes nothing


def test_the_bench_workload_redoes_only_what_changed_and_reads_back_the_same_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.dispatch_workload import Mix, build

    workload = build(12, Mix(rounds=3), concurrency=12)
    records = [
        SourceRecord("turnledger.ingress", 0, i, e.conversation_id.encode(), v)
        for i, (e, v) in enumerate(zip(workload.events, workload.values, strict=True))
    ]
    reference_engine, reference = BatchEngine(), Store()
    from_scratch = state_layout.state_parts
    monkeypatch.setattr(state_layout, "parts_since", lambda *_: None)  # every part, every time
    monkeypatch.setattr(
        state_layout, "state_parts", lambda state, json, graph=None, since=None: from_scratch(state, json)
    )
    for i in range(0, len(records), 7):
        reference_engine.process_batch(records[i : i + 7], reference)
    monkeypatch.undo()
    counts = _checking_parts_since(monkeypatch)
    engine, store = BatchEngine(), Store()
    for i in range(0, len(records), 7):
        engine.process_batch(records[i : i + 7], store)
    assert counts[0] > 0 and counts[1] > 0  # answered (deltas, attempts), declined (turns, new operations)
    assert counts[2] > 0  # declined, and parts of the last write reused (the operations a turn leaves)
    assert store.log == reference.log  # the same writes, in the same order


def test_a_rewrite_takes_the_parts_of_what_did_not_change_from_the_last_write() -> None:
    """`state_parts(..., since=last write)`: the parts of what is the very object it was in the state
    last written are that write's bytes (`is`), everything else is serialized again; either way the
    parts are those of the whole state from scratch."""
    c = weather_round()
    first = c.state
    c.request("op-2")
    second = c.state
    conv, json, store = "conv-1", StateJson(), Store()
    keys = [operation_key(conv, "op-1"), progress_key(conv, "op-1"), request_key(conv, "op-1")]
    handles, turns = chunk_key(conv, HANDLES_TAG, 0), chunk_key(conv, TURNS_TAG, 0)
    settled = second.operations["op-1"]  # settled by op-2: its tools dropped
    assert settled.request is not first.operations["op-1"].request and second.graph is first.graph
    assert settled == first.operations["op-1"].model_copy(update={"request": settled.request})
    assert second.handles is first.handles and second.turn_ids is first.turn_ids and first.handles

    def parts(state: ConversationState, since: Stored) -> dict[str, bytes]:
        got, _ = state_parts(state, json, since.graph, since)
        assert list(got.items()) == list(state_parts(state, StateJson())[0].items())
        return got

    last = write_state(first, Stored(), json, store.put, store.delete)
    got = parts(second, last)
    assert all(got[key] is last.parts[key] for key in [keys[0], handles, turns])
    assert got[keys[1]] == last.parts[keys[1]] and got[keys[2]] != last.parts[keys[2]]

    last = write_state(second, last, json, store.put, store.delete)
    op = second.operations["op-1"]
    own, progress, request = keys
    changes: list[tuple[dict[str, object], set[str]]] = [
        ({"updated_at_ms": op.updated_at_ms + 1}, {progress}),
        ({"lease_owner": "worker-9"}, {own, progress}),
        ({"request": op.request.model_copy(update={})}, {progress, request}),
    ]
    for update, redone in changes:
        got = parts(second.with_operation(op.model_copy(update=update)), last)
        assert {key for key in keys if got[key] is not last.parts[key]} == redone, update

    c.user("and in Rome?")
    got = parts(c.state, last)
    runs = [key for key in last.parts if key.startswith(f"{conv}{SEPARATOR}{BLOCKS_TAG}{SEPARATOR}")]
    assert runs and all(got[key] is last.parts[key] for key in runs)  # the graph grown, not rebuilt
    assert got[turns] is not last.parts[turns] and got[handles] is last.parts[handles]

    other = Conversation(conversation_id="conv-2")
    other.user("hello")
    elsewhere = write_state(other.state, Stored(), json, store.put, store.delete)
    parts(second, elsewhere)  # another conversation's write lends nothing
