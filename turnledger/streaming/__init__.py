"""Provider stream parsers → normalized deltas → the block assembler (pure: no I/O).

Public API:
- `SseDecoder`, `SseEvent` (sse.py): incremental WHATWG SSE decoding;
- `parser_for(api, *, generation, response_handle=None, start_sequence=0)` → `StreamParser`;
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
from turnledger.streaming.parser import StreamParser
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
    "SseDecoder",
    "SseEvent",
    "StreamParser",
    "parser_for",
]
