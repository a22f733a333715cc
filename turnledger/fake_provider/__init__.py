"""A loopback fake model provider for demos and tests.

Speaks the real SSE wire formats of Anthropic Messages, OpenAI Chat Completions and OpenAI Responses
(background mode and resume included), answers deterministically from (seed, request bytes), and injects
scripted or seeded-random faults: disconnect at byte N, duplicated events, missing stop, truncated tool
arguments, slow streams, provider error events, late events after a reconnect.
"""

from turnledger.fake_provider.errors import BadRequestError, FakeProviderError, NonLoopbackBindError
from turnledger.fake_provider.faults import FAULT_HEADER, Fault, FaultKind, FaultPlan, FaultRecord
from turnledger.fake_provider.server import FakeProvider, ReceivedRequest

__all__ = [
    "FAULT_HEADER",
    "BadRequestError",
    "FakeProvider",
    "FakeProviderError",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FaultRecord",
    "NonLoopbackBindError",
    "ReceivedRequest",
]
