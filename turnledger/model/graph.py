"""The message graph: blocks, tool edges, MessageSequence.v1.

A block is one committed unit of a conversation. Its `role` and `kind` are plain
strings on purpose: the closed sets below are enforced by the validator, which turns
an unknown role or kind into a typed rejection instead of a parse error, so that a
newer producer's block can be read (and refused, or paused on) by an older reader.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from turnledger.model.base import Frozen
from turnledger.model.canonical import digest_of


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class BlockKind(StrEnum):
    TEXT = "text"
    THINKING = "thinking"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    RETRIEVED_SNIPPET = "retrieved_snippet"
    COMPRESSION_ARTIFACT = "compression_artifact"


SCOPED_INPUT_KINDS = frozenset({BlockKind.RETRIEVED_SNIPPET, BlockKind.COMPRESSION_ARTIFACT})


class TrustLabel(StrEnum):
    OPERATOR = "operator"  # system prompt written by the deployment
    USER = "user"  # typed by the end user
    MODEL = "model"  # produced by the provider
    TOOL = "tool"  # returned by a tool
    RETRIEVED = "retrieved"  # snippets and compression artifacts: data, never instructions


class ArgumentState(StrEnum):
    COMPLETE = "complete"  # block stop seen, strict JSON parsed, schema and callId validated
    INCOMPLETE = "incomplete"


class ResultStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    CANCEL = "cancel"
    PENDING = "pending"  # not terminal: a result envelope that announces work in progress


TERMINAL_RESULT_STATUSES = frozenset({ResultStatus.SUCCESS, ResultStatus.ERROR, ResultStatus.CANCEL})


class BlockStatus(StrEnum):
    COMMITTED = "committed"
    PLANNED = "planned"


class Block(Frozen):
    """One block of a conversation, as committed (or, wrongly, as merely planned).

    Content fields by kind:
      text / thinking / retrieved_snippet / compression_artifact: `text`
        (thinking may carry the provider's opaque `signature`)
      tool_call: `call_id`, `tool_name`, `arguments` (the raw JSON text the model
        produced), `argument_state`, `argument_digest`, `schema_digest`, `generation`,
        and `signature` where the provider attaches one to the call (Gemini)
      tool_result: `call_id`, `tool_name`, `argument_digest`, `generation`,
        `result_status`, `text` (the result payload as text)
    """

    id: str
    role: str
    kind: str
    turn_id: str
    revision: int
    ordering: int
    trust_label: str
    status: str = BlockStatus.COMMITTED
    digest: str = ""
    text: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None
    argument_state: str | None = None
    argument_digest: str | None = None
    schema_digest: str | None = None
    generation: int | None = None
    result_status: str | None = None
    signature: str | None = None

    def content_fields(self) -> dict[str, Any]:
        """What the content digest covers: everything that a provider would see."""
        fields = {
            "role": self.role,
            "kind": self.kind,
            "trustLabel": self.trust_label,
            "text": self.text,
            "callId": self.call_id,
            "toolName": self.tool_name,
            "arguments": self.arguments,
            "resultStatus": self.result_status,
            "signature": self.signature,
        }
        return {k: v for k, v in fields.items() if v is not None}

    def with_digest(self) -> Block:
        return self.model_copy(update={"digest": block_digest(self)})


def block_digest(block: Block) -> str:
    return digest_of(block.content_fields())


class ToolEdge(Frozen):
    """A call and its result: the unit the validator pairs."""

    call_id: str
    tool_name: str
    call_block_id: str
    schema_digest: str | None = None
    argument_state: str
    argument_digest: str | None = None
    generation: int | None = None
    result_id: str | None = None
    result_status: str | None = None


class BlockRef(Frozen):
    """A block as the manifest lists it: identity and digest, no content."""

    id: str
    role: str
    kind: str
    digest: str
    call_id: str | None = None


class MessageSequence(Frozen):
    """MessageSequence.v1: the validated graph of one conversation at one revision."""

    conversation_id: str
    conversation_revision: int
    sequence_digest: str
    blocks: tuple[Block, ...]
    tool_edges: tuple[ToolEdge, ...] = ()

    def block_refs(self) -> tuple[BlockRef, ...]:
        return tuple(
            BlockRef(id=b.id, role=b.role, kind=b.kind, digest=b.digest, call_id=b.call_id)
            for b in self.blocks
        )


def sequence_digest(conversation_id: str, revision: int, blocks: tuple[Block, ...]) -> str:
    """Digest over the ordered block identities and content digests at one revision."""
    return digest_of(
        {
            "conversationId": conversation_id,
            "conversationRevision": revision,
            "blocks": [[b.id, b.role, b.kind, b.digest] for b in blocks],
        }
    )
