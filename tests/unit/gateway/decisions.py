"""Hand-made records of the manifests topic for the gateway's unit tests (no ledger, no clock)."""

from __future__ import annotations

from typing import Any

from turnledger.model.events import DispatchDecision, DispatchState, ManifestIssued
from turnledger.model.manifest import DispatchManifest


def decision(op: str, state: DispatchState, **fields: Any) -> DispatchDecision:
    """Operation `op` of conversation c1 in `state`: generation 1, decided at 1 s, deadline 100 s."""
    base: dict[str, Any] = {
        "conversation_id": "c1",
        "operation_id": op,
        "state": state,
        "conversation_revision": 1,
        "cancel_generation": 0,
        "attempt_generation": 1,
        "source_event_id": f"src-{op}-{state}",
        "occurred_at_ms": 1_000,
        "deadline_at_ms": 100_000,
    }
    return DispatchDecision(**{**base, **fields})


def manifest_issued(op: str) -> ManifestIssued:
    manifest = DispatchManifest(
        operation_id=op,
        conversation_id="c1",
        conversation_revision=1,
        cancel_generation=0,
        sequence_digest="sha256:" + "1" * 64,
        blocks=(),
        adapter="anthropic-messages@2",
        adapter_digest="sha256:" + "2" * 64,
        provider="anthropic",
        model_revision="claude",
        toolset_digest="sha256:" + "3" * 64,
        max_output_tokens=1024,
        policy={},
        request_digest="sha256:" + "4" * 64,
        request_body='{"messages":[]}',
        input_tokens=12,
    )
    return ManifestIssued(manifest=manifest, occurred_at_ms=1_000)
