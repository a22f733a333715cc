"""The scripted "model": an API-neutral view of a request and the deterministic answer to it.

Each API module parses its own request shape into a `Conversation`; `decide` then picks the answer:
tools offered and a user message last → 1 to 3 parallel calls with schema-valid arguments; tool results last →
text that names every result; otherwise plain text. Every choice comes from an RNG seeded with the server
seed and the request bytes, so the same request always gets the same answer.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from turnledger.fake_provider.schema_args import generate


class LastTurn(Enum):
    USER_TEXT = "user_text"
    TOOL_RESULTS = "tool_results"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    call_id: str
    tool_name: str | None
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Conversation:
    """What the scripted model needs from a request, whatever the API."""

    model: str
    tools: tuple[ToolSpec, ...]
    last: LastTurn
    user_text: str = ""
    """The last turn's text when it is the user's: its text parts joined."""
    last_user_part: str = ""
    """The last text part of that turn: the user's latest words where an API merges consecutive user
    turns into one (Anthropic, Bedrock, Gemini), `FaultPlan.by_last_user_marker`."""
    results: tuple[ToolResult, ...] = ()
    allow_tools: bool = True
    parallel: bool = True
    thinking: bool = False
    max_calls: int = 3


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Answer:
    """The model's reply: optional thinking, optional text, zero or more tool calls. `refused`: the
    provider stopped it for a refusal (the `refusal_after` fault); each API ends it with its own
    refusal stop. `limited`: the output limit cut its last call (the `max_tokens_in_call` fault); each
    API ends it with its own max-tokens stop."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    refused: bool = False
    limited: bool = False

    @property
    def is_tool_use(self) -> bool:
        return bool(self.tool_calls)


def decide(conv: Conversation, rng: random.Random) -> Answer:
    thinking = _thinking(rng) if conv.thinking else ""
    if conv.last is LastTurn.USER_TEXT and conv.tools and conv.allow_tools:
        n = rng.randint(1, max(1, min(3, conv.max_calls))) if conv.parallel else 1
        calls = []
        for _ in range(n):
            tool = rng.choice(conv.tools)
            calls.append(ToolCall(tool.name, generate(tool.schema, rng)))
        return Answer(tool_calls=tuple(calls), thinking=thinking)
    if conv.last is LastTurn.TOOL_RESULTS and conv.results:
        parts = []
        for r in conv.results:
            who = r.tool_name or "tool"
            verb = "failed with" if r.is_error else "returned"
            parts.append(f"{who} ({r.call_id}) {verb}: {_clip(r.content)}")
        return Answer(text="Here is what the tools said. " + " ".join(parts) + " Done.", thinking=thinking)
    words = [rng.choice(_FILLER) for _ in range(rng.randint(6, 14))]
    topic = _clip(conv.user_text, 60) if conv.user_text else "your request"
    return Answer(text=f"About {topic}: " + " ".join(words) + ".", thinking=thinking)


DEFAULT_REFUSAL_WORDS = 1


def refused(answer: Answer, words: int | None) -> tuple[Answer, int]:
    """The answer as the provider stops it for a refusal (the `refusal_after` fault), and the words
    of its text kept: its thinking whole, the first `words` words of its text (default 1, at most
    all of them, 0 for none), no tool call, since the refusal ends the answer where it comes."""
    tokens = answer.text.split(" ") if answer.text else []
    kept = min(DEFAULT_REFUSAL_WORDS if words is None else words, len(tokens))
    return Answer(text=" ".join(tokens[:kept]), thinking=answer.thinking, refused=True), kept


def cut_at_limit(answer: Answer, call: int) -> Answer:
    """The answer as the output limit cuts it inside call `call` (the `max_tokens_in_call` fault): its
    thinking and text whole, the calls up to that one, which is the last; the server cuts its arguments."""
    return replace(answer, tool_calls=answer.tool_calls[: call + 1], limited=True)


BLANK_TEXT = "\n\n"
"""The text of an answer of thinking alone where the API streams no reasoning (OpenAI Chat)."""


def thinking_only(answer: Answer, rng: random.Random, *, streams_thinking: bool) -> Answer:
    """The answer as the `thinking_only` fault gives it: its thinking alone (thinking drawn from `rng`
    when it had none), no text, no call. An API that streams no reasoning sends blank text instead
    (`BLANK_TEXT`), the thinking kept for the usage it counts."""
    thinking = answer.thinking or _thinking(rng)
    return Answer(thinking=thinking) if streams_thinking else Answer(text=BLANK_TEXT, thinking=thinking)


def _thinking(rng: random.Random) -> str:
    return "Considering the request; " + " ".join(rng.choice(_FILLER) for _ in range(8)) + "."


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def split_text(text: str, rng: random.Random, max_words: int = 3) -> list[str]:
    """Split text into deltas of 1..max_words words, keeping every character (whitespace included)."""
    pieces: list[str] = []
    tokens = text.split(" ")
    i = 0
    while i < len(tokens):
        k = rng.randint(1, max_words)
        chunk = " ".join(tokens[i : i + k])
        i += k
        pieces.append(chunk + (" " if i < len(tokens) else ""))
    return [p for p in pieces if p] or [""]


def split_json(text: str, rng: random.Random) -> list[str]:
    """Split an argument JSON string into fragments of 4..16 characters, as providers stream them."""
    out: list[str] = []
    i = 0
    while i < len(text):
        k = rng.randint(4, 16)
        out.append(text[i : i + k])
        i += k
    return out or [""]


def last_text_part(content: Any) -> str:
    """The last text part of a string or of a list of parts ("" without one)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for part in reversed(content):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                return str(part["text"])
            if isinstance(part, str):
                return part
    return ""


def content_text(content: Any) -> str:
    """Text of a string or of a list of text parts (any API's `text`/`input_text`/`output_text` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return " ".join(texts)
    return "" if content is None else json.dumps(content, sort_keys=True)


_FILLER = (
    "the", "ledger", "is", "consistent", "and", "every", "turn", "was", "recorded", "once", "streams",
    "may", "break", "but", "history", "stays", "canonical", "tools", "answer", "in", "order",
)  # fmt: skip
