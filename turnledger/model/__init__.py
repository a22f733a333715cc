"""Pure data model: the message graph, manifests, canonical JSON and digests."""

from turnledger.model.canonical import CanonicalJsonError, canonical_json, digest_of, sha256_digest
from turnledger.model.graph import (
    SCOPED_INPUT_KINDS,
    TERMINAL_RESULT_STATUSES,
    ArgumentState,
    Block,
    BlockKind,
    BlockRef,
    BlockStatus,
    MessageSequence,
    ResultStatus,
    Role,
    ToolEdge,
    TrustLabel,
    block_digest,
    sequence_digest,
)
from turnledger.model.manifest import DispatchManifest
from turnledger.model.tools import ToolDefinition, Toolset

__all__ = [
    "SCOPED_INPUT_KINDS",
    "TERMINAL_RESULT_STATUSES",
    "ArgumentState",
    "Block",
    "BlockKind",
    "BlockRef",
    "BlockStatus",
    "CanonicalJsonError",
    "DispatchManifest",
    "MessageSequence",
    "ResultStatus",
    "Role",
    "ToolDefinition",
    "ToolEdge",
    "Toolset",
    "TrustLabel",
    "block_digest",
    "canonical_json",
    "digest_of",
    "sequence_digest",
    "sha256_digest",
]

from turnledger.model.deltas import DeltaType, NormalizedDelta, StopReason
from turnledger.model.reasons import ReasonCode

__all__ += ["DeltaType", "NormalizedDelta", "ReasonCode", "StopReason"]
