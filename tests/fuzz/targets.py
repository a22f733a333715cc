"""The mutation fuzzer's targets: a corpus of valid inputs each, its mutations, and its oracle.

Corpora are real: the recorded provider streams (tests/fixtures/streams), streams the fake provider
scripts for text, thinking and parallel tool-call answers in every API, the deltas the parsers make of
them, and the records (ingress events and outputs) the fold's happy paths produce, Avro-encoded.
Oracles are those of the hypothesis tests beside them (test_fuzz_decoders.py, test_fuzz_streams.py):

- Avro: compiled reader and fastavro decode alike, or refuse alike with the same CodecError and reason.
- SSE decoder: never raises, and the events do not depend on where the bytes were cut.
- AWS event-stream decoder: messages or EventStreamError, the same however the bytes were cut.
- Parsers: never raise; deltas numbered 0, 1, 2, ...; a PROVIDER_ERROR delta has an error type; the
  deltas do not depend on where the bytes were cut.
- Assembler: Complete (every tool call known, strict JSON, schema-valid) or Incomplete with a ReasonCode.
- Fold: the promises of tests/unit/dispatch/test_fold_properties.py hold after the interleaving.
"""

from __future__ import annotations

import functools
import json
import random
import re
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from tests.fuzz.mutation import Target, chunks, mutate_bytes, mutate_list
from turnledger.codec import Codec, SchemaRegistry
from turnledger.codec.errors import CodecError
from turnledger.fake_provider import anthropic_messages, bedrock, gemini, openai_chat, openai_responses
from turnledger.fake_provider.api import ApiSpec, ScriptContext
from turnledger.fake_provider.model import Answer, ToolCall
from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.reasons import ReasonCode
from turnledger.streaming import BlockAssembler, parser_for
from turnledger.streaming.eventstream import EventStreamDecoder, EventStreamError, encode_message
from turnledger.streaming.outcomes import Complete, Incomplete
from turnledger.streaming.sse import SseDecoder
from turnledger.streaming.strict_arguments import validate_arguments

FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "streams"
API_BY_PREFIX = {
    "anthropic": "anthropic-messages",
    "openai_chat": "openai-chat",
    "openai_responses": "openai-responses",
    "gemini": "gemini",
}
SPECS: dict[str, ApiSpec] = {
    s.name: s
    for s in (anthropic_messages.SPEC, openai_chat.SPEC, openai_responses.SPEC, gemini.SPEC, bedrock.SPEC)
}
ANSWERS = (
    Answer(text="Hello there, it is sunny in Paris today."),
    Answer(text="Let me check.", thinking="The user wants the weather; call the tool."),
    Answer(
        text="Checking both.",
        tool_calls=(
            ToolCall("get_weather", {"location": "Paris", "unit": "celsius"}),
            ToolCall("get_time", {"timezone": "Europe/Paris"}),
        ),
    ),
    Answer(tool_calls=(ToolCall("get_weather", {"location": 'Zürich ☃ "quoted" \\ back'}),)),
)
SSE_TOKENS = (
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"data: ",
    b"data:",
    b"event: ",
    b"id: ",
    b"retry: 1",
    b": ",
    b"[DONE]",
)
JSON_TOKENS = (
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"true",
    b"-0",
    b"1e999",
    b"18446744073709551616",
    b"\\u",
    b"\\ud800",
    b'"type"',
    b'"index"',
    b'"delta"',
    b'"text"',
    b'"input"',
    b'"arguments"',
    b"\xc3\x28",
)


# ------------------------------------------------------------------ corpora


def _split_events(data: bytes) -> tuple[bytes, ...]:
    return tuple(re.findall(rb".*?(?:\r\n\r\n|\n\n)", data, re.S))


def _context(seed: int) -> ScriptContext:
    return ScriptContext(
        seed=seed, basis=f"fuzz-{seed}", model="fake-model", input_tokens=12, rng=random.Random(seed)
    )


@functools.cache
def provider_streams(api: str) -> tuple[tuple[bytes, ...], ...]:
    """Each stream as its events' wire bytes (SSE events, or event-stream messages for Bedrock)."""
    streams = [
        tuple(e.encode() for e in SPECS[api].script(answer, _context(seed)))
        for seed, answer in enumerate(ANSWERS)
    ]
    if api != "bedrock-converse":
        names = sorted(p for p in FIXTURES.glob("*.sse") if _api_of(p.name) == api)
        streams += [_split_events(p.read_bytes()) for p in names]
        streams.append(tuple(SPECS[api].error_event(_context(0), 1).encode() for _ in range(1)))
    else:
        streams.append((SPECS[api].error_event(_context(0), 1).encode(),))
    return tuple(s for s in streams if s)


def _api_of(name: str) -> str | None:
    return next((api for prefix, api in API_BY_PREFIX.items() if name.startswith(prefix)), None)


@functools.cache
def all_sse_bodies() -> tuple[bytes, ...]:
    return tuple(b"".join(s) for api in API_BY_PREFIX.values() for s in provider_streams(api))


def _parse(api: str, data: bytes) -> list[NormalizedDelta]:
    parser = parser_for(api, generation=1)
    return parser.feed(data) + parser.flush()


@functools.cache
def delta_runs() -> tuple[tuple[NormalizedDelta, ...], ...]:
    """What the parsers make of every corpus stream: real delta runs, most of them complete."""
    return tuple(tuple(_parse(api, b"".join(stream))) for api in SPECS for stream in provider_streams(api))


@functools.cache
def avro_records() -> tuple[bytes, ...]:
    """Every ingress event and output of the fold's happy paths, and the corpus deltas, encoded."""
    from tests.unit.dispatch import test_fold_properties as props
    from tests.unit.dispatch.scenario import Conversation

    records: list[Any] = []
    for script in fold_scripts():
        c = Conversation()
        apply = c.apply

        def recording(event: Any, apply: Any = apply) -> Any:
            records.append(event)
            return apply(event)

        c.apply = recording  # type: ignore[method-assign]
        c.user("weather?")
        for step in script:
            props._run(c, step)
        records.extend(c.outputs)
    records.extend(d for run in delta_runs()[::3] for d in run[:8])
    encoded = {COMPILED.encode(r) for r in records}
    return tuple(sorted(encoded, key=lambda b: (len(b), b)))


COMPILED = Codec(SchemaRegistry.from_files())
FASTAVRO = Codec(SchemaRegistry.from_files(compiled=False))


# ------------------------------------------------------------------ Avro


def _decode(codec: Codec, data: bytes) -> tuple[str, object]:
    try:
        return "decoded", codec.decode(data)
    except CodecError as exc:
        return type(exc).__name__, exc.reason


def check_avro(rng: random.Random, data: bytes) -> str:
    compiled, reference = _decode(COMPILED, data), _decode(FASTAVRO, data)
    assert compiled == reference, f"compiled {compiled!r} != fastavro {reference!r}"
    return compiled[0]


def mutate_avro(rng: random.Random, data: bytes, corpus: Sequence[bytes]) -> bytes:
    if rng.random() < 0.1:  # keep the header and fingerprint, zero or randomise the body
        body = bytes(len(data) - 10) if rng.random() < 0.5 else rng.randbytes(len(data) - 10)
        return data[:10] + body
    return mutate_bytes(
        rng, data, corpus, (b"\x00", b"\x01", b"\x02", b"\x7f", b"\xff\xff\xff\xff\x0f", b"\xc3\x01")
    )


# ------------------------------------------------------------------ SSE


def _sse_events(parts: Sequence[bytes]) -> list[Any]:
    decoder = SseDecoder()
    events = []
    for part in parts:
        events += decoder.feed(part)
    return events + decoder.flush()


def check_sse(rng: random.Random, data: bytes) -> str:
    whole = _sse_events([data])
    assert _sse_events(chunks(rng, data)) == whole, "events depend on the chunking"
    return "events" if whole else "no event"


def mutate_sse(rng: random.Random, data: bytes, corpus: Sequence[bytes]) -> bytes:
    return mutate_bytes(rng, data, corpus, SSE_TOKENS + JSON_TOKENS)


# ------------------------------------------------------------------ AWS event stream


def forge_crcs(frame: bytes) -> bytes:
    """Recompute both CRCs of a (mutated) frame, so the decoder must judge its lengths and headers."""
    if len(frame) < 16:
        return frame
    prelude = frame[:8] + struct.pack(">I", zlib.crc32(frame[:8]))
    body = prelude + frame[12:-4]
    return body + struct.pack(">I", zlib.crc32(body))


def _fix_lengths(frame: bytes) -> bytes:
    """Rewrite the total length to the frame's size (a mutated frame otherwise fails on length alone)."""
    if len(frame) < 16:
        return frame
    return struct.pack(">I", len(frame)) + frame[4:]


def mutate_frames(
    rng: random.Random, frames: tuple[bytes, ...], corpus: Sequence[tuple[bytes, ...]]
) -> tuple[bytes, ...]:
    """Frame-aware: mutate one message (often re-lengthed and re-CRC'd so it passes the framing) and
    the message list; sometimes the joined bytes as well."""
    out = (
        mutate_list(rng, frames, [f for s in corpus for f in s], max_edits=3)
        if rng.random() < 0.5
        else list(frames)
    )
    if out and rng.random() < 0.8:
        at = rng.randrange(len(out))
        frame = mutate_bytes(
            rng, out[at], [f for s in corpus for f in s], (*JSON_TOKENS, b"\x07", b"\x00\x00")
        )
        if rng.random() < 0.6:
            frame = forge_crcs(_fix_lengths(frame) if rng.random() < 0.7 else frame)
        out[at] = frame
    if rng.random() < 0.15:
        return (mutate_bytes(rng, b"".join(out), [b"".join(s) for s in corpus]),)
    return tuple(out)


def _event_stream(parts: Sequence[bytes]) -> tuple[str, list[Any]]:
    decoder = EventStreamDecoder()
    messages: list[Any] = []
    try:
        for part in parts:
            messages += decoder.feed(part)
    except EventStreamError as exc:
        return "EventStreamError", messages + list(exc.decoded)
    return ("decoded" if messages else "incomplete"), messages


def check_event_stream(rng: random.Random, frames: tuple[bytes, ...]) -> str:
    """Messages, or EventStreamError after the messages before the bad bytes: the same however cut."""
    data = b"".join(frames)
    outcome, messages = _event_stream([data])
    assert _event_stream(chunks(rng, data)) == (outcome, messages), "the outcome depends on the chunking"
    return outcome


# ------------------------------------------------------------------ parsers


def _deltas(api: str, parts: Sequence[bytes]) -> list[NormalizedDelta]:
    parser = parser_for(api, generation=1)
    deltas: list[NormalizedDelta] = []
    for part in parts:
        deltas += parser.feed(part)
    return deltas + parser.flush()


PARSER_ERRORS = frozenset({"undecodable_event", "malformed_event"})


def _outcome(deltas: list[NormalizedDelta]) -> str:
    """`clean`, or the typed PROVIDER_ERROR deltas: the parser's own kinds, and `provider` for an error
    event of the provider's (its type is the provider's text, mutated, so not counted by name)."""
    errors = {
        d.error_type if d.error_type in PARSER_ERRORS else "provider"
        for d in deltas
        if d.type is DeltaType.PROVIDER_ERROR
    }
    return f"errors {'+'.join(sorted(errors))}" if errors else "clean"


def check_parser(api: str, rng: random.Random, events: tuple[bytes, ...]) -> str:
    data = b"".join(events)
    deltas = _deltas(api, chunks(rng, data))
    assert [d.delta_sequence for d in deltas] == list(range(len(deltas))), "deltas misnumbered"
    for d in deltas:
        assert d.type is not DeltaType.PROVIDER_ERROR or d.error_type, f"untyped provider error {d}"
    assert deltas == _deltas(api, [data]), "deltas depend on the chunking"
    return _outcome(deltas)


def _known_event(rng: random.Random) -> bytes:
    """A JSON event whose type is one a parser knows, with fields from the corpus shuffled in."""
    kinds = [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "error",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.output_text.delta",
        "response.completed",
        "response.failed",
        "response.incomplete",
    ]
    fields: dict[str, Any] = {"type": rng.choice(kinds)}
    for key in rng.sample(
        ["index", "delta", "content_block", "item", "output_index", "choices", "candidates"], 2
    ):
        fields[key] = rng.choice(
            [
                None,
                0,
                1,
                -1,
                2**70,
                "x",
                [],
                {},
                {"type": "text_delta", "text": "hi"},
                {"type": "input_json_delta", "partial_json": '{"a'},
                [{"index": 0, "delta": {}}],
            ]
        )
    return b"data: " + json.dumps(fields).encode() + b"\n\n"


def mutate_sse_events(
    rng: random.Random, events: tuple[bytes, ...], corpus: Sequence[tuple[bytes, ...]]
) -> tuple[bytes, ...]:
    """Events dropped, repeated, swapped, taken from other streams, or invented; then, often, the
    bytes of one event or of the whole stream mutated."""
    pool = [e for s in corpus for e in s]
    out = mutate_list(rng, events, pool, _known_event) if rng.random() < 0.7 else list(events)
    if out and rng.random() < 0.6:
        at = rng.randrange(len(out))
        out[at] = mutate_bytes(rng, out[at], pool, JSON_TOKENS + SSE_TOKENS)
    if rng.random() < 0.2:
        return (mutate_bytes(rng, b"".join(out), [b"".join(s) for s in corpus], SSE_TOKENS + JSON_TOKENS),)
    return tuple(out)


def check_bedrock(rng: random.Random, frames: tuple[bytes, ...]) -> str:
    return check_parser("bedrock-converse", rng, frames)


def mutate_bedrock(
    rng: random.Random, frames: tuple[bytes, ...], corpus: Sequence[tuple[bytes, ...]]
) -> tuple[bytes, ...]:
    if rng.random() < 0.3:  # a JSON payload replaced, under a valid frame
        out = list(frames)
        at = rng.randrange(len(out))
        kind = rng.choice(
            [
                "messageStart",
                "contentBlockStart",
                "contentBlockDelta",
                "contentBlockStop",
                "messageStop",
                "metadata",
                "other",
            ]
        )
        payload = mutate_bytes(
            rng,
            json.dumps(
                {
                    "contentBlockIndex": rng.randint(-1, 2),
                    "delta": {"toolUse": {"input": '{"a": 1}'}},
                    "start": {},
                }
            ).encode(),
            [b'{"contentBlockIndex": 0}'],
            JSON_TOKENS,
        )
        headers = {":message-type": "event", ":event-type": kind, ":content-type": "application/json"}
        out[at] = encode_message(headers, payload)
        return tuple(out)
    return mutate_frames(rng, frames, corpus)


# ------------------------------------------------------------------ assembler

TOOLS = None  # filled lazily from tests/unit/streaming/support.py (get_weather, get_time)
TEXTS = ('{"location": "Paris"}', '{"timezone":', ' "UTC"}', "{", "}", "nu", "1.", '"x"', "", "\ud800", "{}")


def _tools() -> Any:
    from tests.unit.streaming.support import TOOLS as tools

    return tools


def _field_edit(rng: random.Random, delta: NormalizedDelta) -> NormalizedDelta:
    kind = rng.randrange(8)
    if kind == 0:
        return delta.model_copy(update={"delta_sequence": max(0, delta.delta_sequence + rng.randint(-3, 3))})
    if kind == 1:
        return delta.model_copy(update={"block_index": rng.randint(-1, 3)})
    if kind == 2:
        return delta.model_copy(update={"type": rng.choice(list(DeltaType))})
    if kind == 3:
        text = (delta.text or "").encode("utf-8", "surrogatepass")
        mutated = mutate_bytes(rng, text, [], JSON_TOKENS).decode("utf-8", "surrogateescape")
        return delta.model_copy(update={"text": mutated})
    if kind == 4:
        return delta.model_copy(update={"text": rng.choice(TEXTS)})
    if kind == 5:
        return delta.model_copy(
            update={
                "call_id": rng.choice([None, "", "call_1", "toolu_x"]),
                "tool_name": rng.choice([None, "get_weather", "get_time", "nope"]),
            }
        )
    if kind == 6:
        return delta.model_copy(update={"stop_reason": rng.choice([None, *StopReason])})
    return delta.model_copy(update={"generation": 2} if rng.random() < 0.5 else {"response_handle": "other"})


def mutate_deltas(
    rng: random.Random, run: tuple[NormalizedDelta, ...], corpus: Sequence[tuple[NormalizedDelta, ...]]
) -> tuple[NormalizedDelta, ...]:
    out = (
        mutate_list(rng, run, [d for r in corpus for d in r], max_edits=4)
        if rng.random() < 0.7
        else list(run)
    )
    for _ in range(rng.randint(0, 3)):
        if out:
            at = rng.randrange(len(out))
            out[at] = _field_edit(rng, out[at])
    if rng.random() < 0.5:  # renumber, so the edits reach the fold rather than the gap check
        out = [d.model_copy(update={"delta_sequence": n}) for n, d in enumerate(out)]
    return tuple(out)


def check_assembler(rng: random.Random, run: tuple[NormalizedDelta, ...]) -> str:
    tools = _tools()
    assembler = BlockAssembler(tools)
    for delta in run:
        assembler.feed(delta)
    outcome = assembler.finish()
    if isinstance(outcome, Complete):
        for block in outcome.blocks:
            if block.kind == "tool_call":
                assert block.tool_name in tools and block.arguments is not None
                validate_arguments(block.arguments, tools[block.tool_name].input_schema)
        assert assembler.partial_tool_dispatches == 0
        return "Complete"
    assert isinstance(outcome, Incomplete) and isinstance(outcome.reason, ReasonCode), outcome
    return f"Incomplete {outcome.reason.value}"


# ------------------------------------------------------------------ fold interleavings


@functools.cache
def fold_scripts() -> tuple[tuple[tuple[Any, ...], ...], ...]:
    from tests.unit.dispatch import test_fold_properties as props

    one = [tuple(props._happy_path("op-1", which, 1)) for which in range(3)]
    two = [
        tuple(props._happy_path("op-1", a, 1) + props._happy_path("op-2", b, 1))
        for a in range(3)
        for b in range(3)
    ]
    return tuple(one + two)


def _action(rng: random.Random) -> tuple[Any, ...]:
    """One step of any kind, as tests/unit/dispatch/test_fold_properties.py's `action` draws them."""
    from turnledger.model.events import StreamOutcome

    op = rng.choice(["op-1", "op-2"])
    gen = rng.randint(1, 3)
    worker = rng.choice(["w1", "w2"])
    table = [
        lambda: ("user",),
        lambda: ("request", op),
        lambda: ("attempt", op, rng.randint(-1, 1)),
        lambda: ("sent", op, gen),
        lambda: ("bind", op, gen, rng.random() < 0.5),
        lambda: ("deltas", op, gen, rng.randint(0, 2), rng.randint(0, 9), rng.randint(1, 10)),
        lambda: ("ended", op, gen, rng.choice(list(StreamOutcome))),
        lambda: ("recovered", op, gen),
        lambda: ("resume", op, gen),
        lambda: ("terminated", op, gen),
        lambda: ("cancel", rng.choice([None, "op-1", "op-2"])),
        lambda: ("results", rng.choice(["c1", "c2", "c9"])),
        lambda: ("renew", op, gen, worker),
        lambda: ("claim", op, worker),
        lambda: ("advance", rng.choice([1_000, 29_000, 31_000, 700_000])),
        lambda: ("replay", op, gen, worker),
        lambda: ("attempt_as", op, worker, rng.random() < 0.5),
    ]
    return rng.choice(table)()


def mutate_script(
    rng: random.Random, script: tuple[Any, ...], corpus: Sequence[tuple[Any, ...]]
) -> tuple[Any, ...]:
    return tuple(mutate_list(rng, script, [s for c in corpus for s in c], _action, max_edits=12))


def check_fold(rng: random.Random, script: tuple[Any, ...]) -> str:
    from tests.unit.dispatch import test_fold_properties as props

    props.test_promises_hold_under_any_interleaving.hypothesis.inner_test(list(script))
    return "promises held"


# ------------------------------------------------------------------ the table


def _sse_parser_target(api: str) -> Target[tuple[bytes, ...]]:
    return Target(
        f"parser {api}",
        lambda: provider_streams(api),
        mutate_sse_events,
        functools.partial(check_parser, api),
    )


TARGETS: dict[str, Target[Any]] = {
    t.name: t
    for t in [
        Target(
            "avro decode",
            avro_records,
            mutate_avro,
            check_avro,
            ("avro decode (compiled)", "avro decode (fastavro)"),
        ),
        Target("sse decoder", all_sse_bodies, mutate_sse, check_sse),
        Target(
            "aws event-stream decoder",
            lambda: provider_streams("bedrock-converse"),
            mutate_frames,
            check_event_stream,
        ),
        *(_sse_parser_target(api) for api in API_BY_PREFIX.values()),
        Target(
            "parser bedrock-converse",
            lambda: provider_streams("bedrock-converse"),
            mutate_bedrock,
            check_bedrock,
        ),
        Target("block assembler", delta_runs, mutate_deltas, check_assembler),
        Target("fold interleavings", fold_scripts, mutate_script, check_fold),
    ]
}
