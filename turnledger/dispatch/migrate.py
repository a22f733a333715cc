"""Changelog states written in an earlier format, brought to the current one on restore.

A processor restores whatever its changelog holds, so a new release must read the state
the previous one wrote. Each step rewrites the JSON of one format into the next; the
result goes through the same validation as a current state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from turnledger.dispatch.state import (
    LEGACY_LEASE_OWNER,
    STATE_FORMAT_VERSION,
    ConversationState,
    attempt_may_produce_output,
)
from turnledger.errors import StateFormatError
from turnledger.model.events import DEFAULT_LEASE_MS, DispatchState

_SEAL_FIELDS = ("manifest_digest", "conversation_revision", "cancel_generation", "request_digest")


def _v1_to_v2(state: dict[str, Any]) -> dict[str, Any]:
    """Format 2 keeps each operation's manifest seal instead of the whole manifest."""
    for operation in state["operations"].values():
        manifest = operation.get("manifest")
        if manifest is not None:
            operation["manifest"] = {name: manifest[name] for name in _SEAL_FIELDS}
    return {**state, "format_version": 2}


def _v2_to_v3(state: dict[str, Any]) -> dict[str, Any]:
    """Format 3 adds leases, what the provider keeps, and pauses.

    An attempt that was open before leases existed gets one of unknown owner (`LEGACY_LEASE_OWNER`:
    any worker may act on it) that was last renewed by its last event, so it expires like any
    other; nothing was known to be kept by the provider, and nothing was paused.
    """
    for operation in state["operations"].values():
        state_of = DispatchState(operation["state"])
        if attempt_may_produce_output(
            state_of, operation["attempt_generation"], operation["attempt_terminated"]
        ):
            operation["lease_owner"] = LEGACY_LEASE_OWNER
            operation["lease_ms"] = DEFAULT_LEASE_MS
            operation["lease_renewed_at_ms"] = operation["updated_at_ms"]
    return {**state, "format_version": 3}


UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3}
READABLE_FORMATS = frozenset({*UPGRADES, STATE_FORMAT_VERSION})


class UnreadableStateFormat(StateFormatError):
    """A state of a format this release cannot read (newer, or never released)."""


def upgrade_state(format_version: int, state_json: str | bytes) -> ConversationState:
    if format_version not in READABLE_FORMATS:
        readable = sorted(READABLE_FORMATS)
        raise UnreadableStateFormat(f"state format {format_version} (this release reads {readable})")
    if format_version == STATE_FORMAT_VERSION:
        return ConversationState.model_validate_json(state_json)
    state: dict[str, Any] = orjson.loads(state_json)
    for version in range(format_version, STATE_FORMAT_VERSION):
        state = UPGRADES[version](state)
    return ConversationState.model_validate_json(orjson.dumps(state))
