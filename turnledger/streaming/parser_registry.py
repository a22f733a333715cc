"""`parser_for`: the one entry point from an API name to its stream parser."""

from __future__ import annotations

from collections.abc import Mapping

from turnledger.streaming.anthropic import AnthropicMessagesParser
from turnledger.streaming.bedrock import BedrockConverseParser
from turnledger.streaming.gemini import GeminiParser
from turnledger.streaming.openai_chat import OpenAIChatParser
from turnledger.streaming.openai_responses import OpenAIResponsesParser
from turnledger.streaming.parser import StreamParser

PARSERS: Mapping[str, type[StreamParser]] = {
    cls.api: cls
    for cls in (
        AnthropicMessagesParser,
        OpenAIChatParser,
        OpenAIResponsesParser,
        GeminiParser,
        BedrockConverseParser,
    )
}


def parser_for(
    api: str, *, generation: int, response_handle: str | None = None, start_sequence: int = 0
) -> StreamParser:
    """A fresh parser for one response stream of `api` (KeyError names the known APIs)."""
    try:
        cls = PARSERS[api]
    except KeyError:
        raise KeyError(f"unknown stream api {api!r}; known: {sorted(PARSERS)}") from None
    return cls(generation=generation, response_handle=response_handle, start_sequence=start_sequence)
