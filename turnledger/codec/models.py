"""Which pydantic class each Avro record is: by the record's simple name."""

from __future__ import annotations

from pydantic import BaseModel

from turnledger.model.deltas import NormalizedDelta
from turnledger.model.events import INGRESS_EVENT_TYPES, OUTPUT_RECORD_TYPES, SubmittedBlock
from turnledger.model.graph import Block, BlockRef
from turnledger.model.manifest import DispatchManifest
from turnledger.model.tools import ToolDefinition

NAMESPACE = "turnledger.v1"

RECORD_MODELS: tuple[type[BaseModel], ...] = (
    Block,
    BlockRef,
    SubmittedBlock,
    ToolDefinition,
    NormalizedDelta,
    DispatchManifest,
    *INGRESS_EVENT_TYPES,
    *OUTPUT_RECORD_TYPES,
)

MODELS_BY_NAME: dict[str, type[BaseModel]] = {f"{NAMESPACE}.{m.__name__}": m for m in RECORD_MODELS}
