"""Provider stream parsers → normalized deltas → the block assembler (pure: no I/O).

Public API:
- `SseDecoder`, `SseEvent` (sse.py): incremental WHATWG SSE decoding;
- `parser_for(api, *, generation, response_handle=None, start_sequence=0)` → `StreamParser`;
- `parse_event`, `ParsedEvent` (parser.py): one SSE event's JSON, parsed once, for `StreamParser.feed_sse`;
- `BlockAssembler` (assembler.py) and its results (outcomes.py).
"""

from turnledger.streaming.assembler import BlockAssembler
from turnledger.streaming.outcomes import (
    AssemblyOutcome,
    CandidateBlock,
    Complete,
    FeedResult,
    FeedStatus,
    Incomplete,
)
from turnledger.streaming.parser import ParsedEvent, StreamParser, parse_event
from turnledger.streaming.parser_registry import PARSERS, parser_for
from turnledger.streaming.sse import SseDecoder, SseEvent

__all__ = [
    "PARSERS",
    "AssemblyOutcome",
    "BlockAssembler",
    "CandidateBlock",
    "Complete",
    "FeedResult",
    "FeedStatus",
    "Incomplete",
    "ParsedEvent",
    "SseDecoder",
    "SseEvent",
    "StreamParser",
    "parse_event",
    "parser_for",
]
