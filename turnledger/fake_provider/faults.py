"""Fault kinds, the server-level fault plan, the `x-fake-fault` header and fault resolution.

A fault is chosen per request, either scripted (the header, or the plan's per-request / always lists) or
drawn at random (the plan's rate per kind, from an RNG seeded by the server seed and the request identity,
so a random fault is as reproducible as the answer). The identity of a request with an Idempotency-Key
is the key: sent again, it is the same response with the same `CONTENT_FAULTS`, over a new connection
whose delivery faults are drawn again (seeded by the key and the connection's number). Resolution fills
in concrete values (which byte, which event) so the fault log says exactly what was done.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from turnledger.fake_provider.errors import BadRequestError

FAULT_HEADER = "x-fake-fault"


class FaultKind(StrEnum):
    """Fault kinds; the value is the name used in the `x-fake-fault` header."""

    #: Close the connection after exactly N bytes of response body (value: N).
    DISCONNECT = "disconnect_at_byte"
    #: Send the script's event number K (0-based) twice in a row (value: K).
    DUPLICATE = "duplicate_event"
    #: End the stream cleanly without its terminal event (message_stop / [DONE] / response.completed).
    MISSING_STOP = "missing_stop"
    #: Cut tool call K's argument JSON in the middle of a string, then stop normally (value: K).
    TRUNCATED_ARGS = "truncate_tool_args"
    #: Wait N milliseconds before every event (value: N).
    SLOW = "slow_ms"
    #: Replace event K and everything after it by the provider's error event (value: K; drawn at random,
    #: K >= 1). K = 0, scripted: the error is the whole stream, before anything names the response.
    ERROR_EVENT = "error_event"
    #: Before the stream, re-send N events the client already saw / of the previous stream (value: N).
    LATE_EVENTS = "late_events"
    #: Refuse the request with the API's HTTP 429, asking to retry after N milliseconds (value: N,
    #: default 1000; refusals.py). Scripted only: never drawn at random.
    RATE_LIMITED = "rate_limited"
    #: Refuse the request with HTTP status N (400-599, default 500) and the API's error for it
    #: (refusals.py). Scripted only: never drawn at random.
    HTTP_STATUS = "http_status"
    #: Stop the answer for a refusal after the first N words of its text (value: N, default 1; 0: before
    #: any text), with the API's own terminal events and refusal stop: Anthropic's `refusal`, OpenAI
    #: Chat's `content_filter`, Responses' `response.incomplete` for `content_filter`, Gemini's
    #: `SAFETY`, Bedrock's `guardrail_intervened`. The thinking streams whole, no tool call is sent
    #: (model.refused). Scripted only: never drawn at random.
    REFUSAL_AFTER = "refusal_after"
    #: End the answer at the output limit inside tool call K's arguments (value: K, default the last
    #: call; the calls after it never come), cut mid-string as `truncate_tool_args` cuts, with the API's
    #: own max-tokens stop: Anthropic's and Bedrock's `max_tokens`, OpenAI Chat's `length`, Responses'
    #: `response.incomplete` for `max_output_tokens` (the call's item never done), Gemini's `MAX_TOKENS`
    #: (a call cannot be cut on its wire: the calls before it, or no part at all). An answer without a
    #: call is left whole, the fault not recorded (model.cut_at_limit). Scripted only: never drawn.
    MAX_TOKENS_IN_CALL = "max_tokens_in_call"
    #: After the stream's last event (its final one, or the error event `error_event` put in its place),
    #: keep the connection open without ending the body, sending nothing, for N milliseconds (value: N;
    #: default: until the client closes it): a provider, or a proxy, that does not close after its final
    #: event. How each hold ended is in `FakeProvider.holds`. Scripted only: never drawn at random.
    HOLD_OPEN = "hold_open"
    #: Answer with thinking alone, no text and no tool call, stopped normally: Anthropic's thinking block
    #: and `end_turn`, Bedrock's `reasoningContent` and `end_turn`, Gemini's thought parts and `STOP` (on
    #: an empty text part), Responses' reasoning item and `response.completed`; OpenAI Chat streams no
    #: reasoning, so its answer is blank text and `stop`. The answer's own thinking, or thinking made up
    #: for it when the request did not ask to think (model.thinking_only). Takes no value. Scripted only:
    #: never drawn (a test or the demo must know which answer had nothing visible).
    THINKING_ONLY = "thinking_only"


DRAWN_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)[: list(FaultKind).index(FaultKind.RATE_LIMITED)]
"""The kinds a plan's `rates` draw at random: every kind before the refusals, in their order (a seeded
server's draws stay what they were before the refusals were added)."""


#: Faults that change what is generated (and so what a background response stores).
CONTENT_FAULTS = frozenset(
    {
        FaultKind.TRUNCATED_ARGS,
        FaultKind.ERROR_EVENT,
        FaultKind.REFUSAL_AFTER,
        FaultKind.MAX_TOKENS_IN_CALL,
        FaultKind.THINKING_ONLY,
    }
)

TAKES_NO_VALUE = frozenset({FaultKind.MISSING_STOP, FaultKind.THINKING_ONLY})
"""Kinds whose header item has no `=N`: a number there would be ignored, so it is refused."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    value: int | None = None

    def __str__(self) -> str:
        return self.kind.value if self.value is None else f"{self.kind.value}={self.value}"


class FaultRecord(NamedTuple):
    """One applied fault: which request, what exactly."""

    request_id: str
    fault: Fault


@dataclass
class ScriptCursor:
    """Where a server stands in its plan's scripted faults: how many requests it has counted
    (`FaultPlan.by_request`'s numbers), how many of them had no marked fault (`by_unmarked_request`'s)
    and which `first_with_marker` markers it has met."""

    requests: int = 0
    unmarked: int = 0
    markers_seen: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class FaultPlan:
    """Server-level faults.

    `rates`: probability per kind that a generation request gets that fault (independent draws; only
    the `DRAWN_KINDS`: a refusal is scripted, so a test knows which request got it).
    `by_request`: scripted faults for the n-th generation request (0-based arrival order).
    `by_unmarked_request`: scripted faults for the n-th generation request (0-based arrival order) among
    those that no marker below gives a fault: such a fault never lands on a marked request, so it cannot
    take the marked fault away (a refusal before the content fault a marked answer was to carry, a
    refusal stopping the answer of thinking alone a test waits for); it goes to the next request.
    `always`: scripted faults for every generation request.
    `by_marker`: scripted faults for every generation request whose body contains the marker text (a
    client can ask for, e.g., a slow stream for some conversations without a header).
    `first_with_marker`: scripted faults for the first generation request whose body contains the
    marker text, and for no later one (a fault for one conversation's first attempt, whatever other
    requests arrive before it; its retry carries the same marker and is left alone).
    `by_last_user_marker`: scripted faults for every generation request whose last turn is the user's
    text and whose last text part contains the marker: a conversation's answer to that turn, retries
    included, and not its tool rounds or later turns, which carry the marker in their history only,
    nor the answer to a turn the user added after it, which APIs that merge consecutive user turns
    (Anthropic, Bedrock, Gemini) send in the same message, after the marked text.
    A request with an `x-fake-fault` header uses only the header's faults (`none` for no fault at all).
    """

    rates: Mapping[FaultKind, float] = field(default_factory=dict)
    by_request: Mapping[int, tuple[Fault, ...]] = field(default_factory=dict)
    by_unmarked_request: Mapping[int, tuple[Fault, ...]] = field(default_factory=dict)
    always: tuple[Fault, ...] = ()
    by_marker: Mapping[str, tuple[Fault, ...]] = field(default_factory=dict)
    first_with_marker: Mapping[str, tuple[Fault, ...]] = field(default_factory=dict)
    by_last_user_marker: Mapping[str, tuple[Fault, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        scripted_only = sorted(k.value for k in self.rates if k not in DRAWN_KINDS)
        if scripted_only:
            raise ValueError(f"faults {scripted_only} are scripted only, not drawn at random")

    @classmethod
    def uniform(cls, rate: float, kinds: Iterable[FaultKind] = DRAWN_KINDS) -> FaultPlan:
        """Every kind in `kinds` with the same probability `rate`."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {rate}")
        return cls(rates={k: rate for k in kinds})

    def scripted(
        self, cursor: ScriptCursor, body: bytes = b"", last_user_text: str = ""
    ) -> tuple[Fault, ...]:
        """The scripted faults of the next request, `cursor` moved past it (counted for `by_request`, and
        for `by_unmarked_request` when no marker gives it a fault; the markers of `first_with_marker`
        this body contains are met). `last_user_text`: the last text part of the request's last turn
        when that turn is the user's text ("" otherwise)."""
        marked = tuple(
            f for marker, faults in self.by_marker.items() if marker.encode() in body for f in faults
        ) + tuple(
            f
            for marker, faults in self.by_last_user_marker.items()
            if marker in last_user_text
            for f in faults
        )
        first = tuple(
            f
            for marker, faults in self.first_with_marker.items()
            if marker not in cursor.markers_seen and marker.encode() in body
            for f in faults
        )
        cursor.markers_seen.update(m for m in self.first_with_marker if m.encode() in body)
        by_number = tuple(self.by_request.get(cursor.requests, ()))
        cursor.requests += 1
        if not marked and not first:
            by_number += tuple(self.by_unmarked_request.get(cursor.unmarked, ()))
            cursor.unmarked += 1
        return tuple(self.always) + by_number + marked + first

    def draw(self, rng: random.Random) -> tuple[Fault, ...]:
        """Random faults, values left open (resolved against the concrete stream)."""
        return tuple(Fault(kind) for kind in DRAWN_KINDS if rng.random() < self.rates.get(kind, 0.0))


def parse_fault_header(value: str) -> tuple[Fault, ...]:
    """Parse `disconnect_at_byte=300, duplicate_event=4` (comma or semicolon separated; `none` = none)."""
    faults: list[Fault] = []
    for raw in value.replace(";", ",").split(","):
        item = raw.strip()
        if not item or item == "none":
            continue
        name, _, arg = item.partition("=")
        try:
            kind = FaultKind(name.strip())
        except ValueError:
            known = ", ".join(k.value for k in FaultKind)
            raise BadRequestError(
                f"unknown fault {name.strip()!r} in {FAULT_HEADER}; known: {known}"
            ) from None
        if arg.strip() and kind in TAKES_NO_VALUE:
            raise BadRequestError(f"fault {kind.value!r} takes no value, got {arg.strip()!r}")
        if arg.strip():
            try:
                number = int(arg.strip())
            except ValueError:
                raise BadRequestError(f"fault {name.strip()!r} needs an integer, got {arg!r}") from None
            if number < 0:
                raise BadRequestError(f"fault {name.strip()!r} needs a non-negative integer")
            faults.append(Fault(kind, number))
        else:
            faults.append(Fault(kind))
    return tuple(faults)


@dataclass(frozen=True, slots=True)
class StreamShape:
    """What resolution needs to know about the stream a fault will hit."""

    n_events: int
    n_tool_calls: int
    has_previous: bool


def resolve(faults: Iterable[Fault], shape: StreamShape, rng: random.Random) -> tuple[Fault, ...]:
    """Give every fault a concrete value; drop faults that cannot apply (recorded only when applied).

    Byte offsets of DISCONNECT are resolved later, against the encoded bytes (see `resolve_disconnect`).
    """
    out: list[Fault] = []
    seen: set[FaultKind] = set()
    for f in faults:
        if f.kind in seen:
            continue
        seen.add(f.kind)
        mid = max(1, shape.n_events - 2)
        if f.kind in (FaultKind.DUPLICATE, FaultKind.ERROR_EVENT):
            v = f.value if f.value is not None else rng.randint(1, mid)
            out.append(Fault(f.kind, min(v, shape.n_events - 1)))
        elif f.kind in (FaultKind.TRUNCATED_ARGS, FaultKind.MAX_TOKENS_IN_CALL):
            if shape.n_tool_calls:
                v = f.value if f.value is not None else shape.n_tool_calls - 1
                out.append(Fault(f.kind, min(v, shape.n_tool_calls - 1)))
        elif f.kind is FaultKind.SLOW:
            out.append(Fault(f.kind, f.value if f.value is not None else rng.randint(5, 30)))
        elif f.kind is FaultKind.LATE_EVENTS:
            if shape.has_previous:
                out.append(Fault(f.kind, f.value if f.value is not None else rng.randint(1, 3)))
        else:
            out.append(f)
    return tuple(out)


def resolve_disconnect(fault: Fault, body_len: int, rng: random.Random) -> Fault:
    if fault.value is not None:
        return fault
    return Fault(fault.kind, rng.randint(1, max(1, body_len - 1)))


def truncate_mid_string(json_text: str) -> str:
    """Cut JSON text inside its last string literal (key or value), so the result can never parse.

    Strings are preferred because a cut there is what `max_tokens` and dropped streams really produce
    (`{"city": "Par`), and partial-JSON parsers silently drop such a tail. Without any string (`{}`)
    the text is cut in half, which is invalid too.
    """
    spans: list[tuple[int, int]] = []
    i, n = 0, len(json_text)
    while i < n:
        if json_text[i] == '"':
            start = i
            i += 1
            while i < n and json_text[i] != '"':
                i += 2 if json_text[i] == "\\" else 1
            spans.append((start, i))
        i += 1
    for start, end in reversed(spans):
        if end - start >= 2:  # at least one character inside the quotes
            cut = start + 1 + (end - start - 1) // 2
            if json_text[cut - 1] == "\\":
                cut -= 1
            return json_text[:cut]
    return json_text[: max(1, len(json_text) // 2)]
