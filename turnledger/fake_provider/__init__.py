"""A loopback fake model provider for demos and tests.

Speaks the real wire formats of Anthropic Messages, OpenAI Chat Completions, OpenAI Responses
(background mode and resume included), Gemini streamGenerateContent (SSE) and Bedrock ConverseStream (the
binary AWS event stream), checks each API's credential as the real API does (`FakeKeys`), answers
deterministically from (seed, request bytes), and injects
scripted or seeded-random faults: disconnect at byte N, duplicated events, missing stop, truncated tool
arguments, slow streams, provider error events, late events after a reconnect; and scripted refusals only:
HTTP 429 and error statuses (refusals.py), an answer stopped for a refusal (`refusal_after`); and,
scripted only too, an answer cut at the output limit inside a call (`max_tokens_in_call`), a
connection held open after the stream's last event (`hold_open`, how each hold ended in
`FakeProvider.holds`), and an answer of thinking alone (`thinking_only`).
"""

from turnledger.fake_provider.auth import FakeKeys
from turnledger.fake_provider.errors import BadRequestError, FakeProviderError, NonLoopbackBindError
from turnledger.fake_provider.faults import FAULT_HEADER, Fault, FaultKind, FaultPlan, FaultRecord
from turnledger.fake_provider.server import FakeProvider, ReceivedRequest

__all__ = [
    "FAULT_HEADER",
    "BadRequestError",
    "FakeKeys",
    "FakeProvider",
    "FakeProviderError",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FaultRecord",
    "NonLoopbackBindError",
    "ReceivedRequest",
]
