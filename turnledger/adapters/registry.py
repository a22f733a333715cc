"""Adapter registry: adapter id (`api@version`) → adapter.

Every version that may still be configured is registered, including retired ones
kept for rollback (`anthropic-messages@0`, which predates thinking and scoped input
kinds): rolling back must still read the same graph and pause on kinds it does not
know. `LATEST` names the current version of each API.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from turnledger.adapters.anthropic_messages import (
    ANTHROPIC_MESSAGES_V0,
    ANTHROPIC_MESSAGES_V1,
    ANTHROPIC_MESSAGES_V2,
    ANTHROPIC_MESSAGES_V3,
)
from turnledger.adapters.base import Adapter, UnknownAdapterError
from turnledger.adapters.bedrock_converse import BEDROCK_CONVERSE_V1, BEDROCK_CONVERSE_V2
from turnledger.adapters.gemini import GEMINI_V1, GEMINI_V2, GEMINI_V3
from turnledger.adapters.openai_chat import OPENAI_CHAT_V1, OPENAI_CHAT_V2
from turnledger.adapters.openai_responses import (
    OPENAI_RESPONSES_V1,
    OPENAI_RESPONSES_V2,
    OPENAI_RESPONSES_V3,
    OPENAI_RESPONSES_V4,
)

_ALL: tuple[Adapter, ...] = (
    OPENAI_CHAT_V1,
    OPENAI_RESPONSES_V1,
    ANTHROPIC_MESSAGES_V1,
    GEMINI_V1,
    BEDROCK_CONVERSE_V1,
    ANTHROPIC_MESSAGES_V0,
    # version 2: call ids each API accepts (adapters/call_ids.py); version 1 renders as it always did
    OPENAI_CHAT_V2,
    OPENAI_RESPONSES_V2,
    ANTHROPIC_MESSAGES_V2,
    GEMINI_V2,
    # version 3: the reasoning policy a reasoning model needs to have its reasoning items sent back
    OPENAI_RESPONSES_V3,
    # version 3: Gemini's stand-in signature on the first unsigned call of every assistant run
    GEMINI_V3,
    # version 4: an unsigned reasoning item referenced by its rs_ id when stored; encrypted content asked
    # for when not stored
    OPENAI_RESPONSES_V4,
    # version 3: the policy's thinking, left out in a tool loop that did not open with thinking it sends
    ANTHROPIC_MESSAGES_V3,
    # version 2: additionalModelRequestFields (Claude's thinking), its thinking left out in a tool loop
    # that did not open with thinking it sends
    BEDROCK_CONVERSE_V2,
)

ADAPTERS: Mapping[str, Adapter] = MappingProxyType({a.adapter_id: a for a in _ALL})

LATEST: Mapping[str, str] = MappingProxyType(
    {
        "openai-chat": OPENAI_CHAT_V2.adapter_id,
        "openai-responses": OPENAI_RESPONSES_V4.adapter_id,
        "anthropic-messages": ANTHROPIC_MESSAGES_V3.adapter_id,
        "gemini": GEMINI_V3.adapter_id,
        "bedrock-converse": BEDROCK_CONVERSE_V2.adapter_id,
    }
)

LEGACY: frozenset[str] = frozenset({ANTHROPIC_MESSAGES_V0.adapter_id})


def get_adapter(adapter_id: str) -> Adapter:
    try:
        return ADAPTERS[adapter_id]
    except KeyError:
        raise UnknownAdapterError(adapter_id) from None


def with_adapter(registry: Mapping[str, Adapter], adapter: Adapter) -> Mapping[str, Adapter]:
    """A new registry with one more adapter (tests, rollback drills); the global one is immutable.

    Refuses to shadow an existing id with a different digest: a changed adapter is a new version.
    """
    existing = registry.get(adapter.adapter_id)
    if existing is not None and existing.digest != adapter.digest:
        raise ValueError(f"{adapter.adapter_id} is registered with another digest; bump the version")
    return MappingProxyType({**registry, adapter.adapter_id: adapter})
