"""What every API module provides, and the per-request context its scripts are built from."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnledger.fake_provider.eventstream import EventStreamEvent
from turnledger.fake_provider.ids import make_id
from turnledger.fake_provider.model import Answer, Conversation
from turnledger.fake_provider.signatures import SignatureRule
from turnledger.fake_provider.sse import SseEvent

WireEvent = SseEvent | EventStreamEvent
"""One event on the wire: an SSE event, or an AWS event-stream message (Bedrock)."""


@dataclass
class ScriptContext:
    """Everything a stream script needs besides the answer; ids derive from (seed, basis)."""

    seed: int
    basis: str
    model: str
    input_tokens: int
    rng: random.Random
    #: call index → the truncated argument text that replaces its JSON (truncate_tool_args fault)
    truncated: dict[int, str] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)
    background: bool = False
    #: the server's strict signatures are on: the API signs as its strict models do (Gemini 3 every
    #: answer's first call, thinking or not)
    strict_signatures: bool = False

    def id(self, prefix: str, label: str, length: int = 24) -> str:
        return make_id(prefix, self.seed, self.basis, label, length)

    def arguments(self, answer: Answer, k: int) -> str:
        return self.truncated.get(k, answer.tool_calls[k].arguments_json)


@dataclass(frozen=True)
class ApiSpec:
    """One provider API: request parsing, the stream script, the error event and bodies."""

    name: str
    parse: Callable[[dict[str, Any]], Conversation]
    script: Callable[[Answer, ScriptContext], Sequence[WireEvent]]
    #: the provider error event that replaces script event `index` (error_event fault)
    error_event: Callable[[ScriptContext, int], WireEvent]
    #: the non-streaming response body
    final_object: Callable[[Answer, ScriptContext], dict[str, Any]]
    #: an HTTP error body in this API's shape: (message, error type, param, code)
    error_body: Callable[[str, str, str | None, str | None], dict[str, Any]]
    #: can events of an earlier stream be told from this one's? (not on a stream without ids: Bedrock)
    late_events: bool = True
    #: how the API mints and checks reasoning signatures (None: it has none)
    signatures: SignatureRule | None = None
    #: does the API stream the model's reasoning? (OpenAI Chat does not: `model.thinking_only`)
    streams_thinking: bool = True
    #: the headers of an HTTP error answer of this status (Bedrock names its type in `x-amzn-errortype`)
    error_headers: Callable[[int], dict[str, str]] = field(default=lambda status: {})


def output_tokens(answer: Answer) -> int:
    chars = len(answer.text) + len(answer.thinking) + sum(len(c.arguments_json) for c in answer.tool_calls)
    return max(1, chars // 4)
