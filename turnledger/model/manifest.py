"""DispatchManifest.v1: the exact request, bound to everything that produced it."""

from __future__ import annotations

from typing import Any

from orjson import Fragment
from pydantic import Field

from turnledger.model.base import Frozen
from turnledger.model.canonical import digest_of
from turnledger.model.graph import BlockRef
from turnledger.model.self_encoded import SelfEncoded


class DispatchManifest(Frozen):
    """Binds sequence, adapter, provider, model, toolset, policy and request digest.

    `request_body` is the exact byte string sent to the provider, decoded as UTF-8
    (adapters emit canonical JSON, so the text round-trips to the same bytes).
    `manifest_digest` covers every other field.
    """

    operation_id: str
    conversation_id: str
    conversation_revision: int
    cancel_generation: int
    sequence_digest: str
    blocks: tuple[BlockRef, ...]
    adapter: str  # e.g. "anthropic-messages@1"
    adapter_digest: str
    provider: str
    model_revision: str
    toolset_digest: str
    max_output_tokens: int
    policy: dict[str, Any] = Field(default_factory=dict)
    request_digest: str
    request_body: str
    input_tokens: int
    manifest_digest: str = ""

    def digest_fields(self) -> dict[str, Any]:
        fields = self.to_json_dict()
        fields.pop("manifestDigest", None)
        return fields

    def sealed(self, listed: SelfEncoded | None = None) -> DispatchManifest:
        """The manifest with its digest. `listed`: the blocks to list instead of `blocks`, taken as
        they are (refs of validated blocks that carry their own encodings: not validated again, and
        their canonical JSON goes into the digested text as it is, not dumped again)."""
        if listed is None:
            return self.model_copy(update={"manifest_digest": digest_of(self.digest_fields())})
        fields = self.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=_NOT_DUMPED)
        fields["blocks"] = Fragment(listed.json)
        return self.model_copy(update={"blocks": listed, "manifest_digest": digest_of(fields)})


_NOT_DUMPED = {"blocks", "manifest_digest"}
