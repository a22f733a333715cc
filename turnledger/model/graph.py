"""The message graph: blocks, tool edges, MessageSequence.v1.

A block is one committed unit of a conversation. Its `role` and `kind` are plain
strings on purpose: the closed sets below are enforced by the validator, which turns
an unknown role or kind into a typed rejection instead of a parse error, so that a
newer producer's block can be read (and refused, or paused on) by an older reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import field_validator

from turnledger.model.base import Frozen, shared_name
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
    `signed_by` names the API whose provider minted the `signature` (an adapter's `api`, e.g.
    "anthropic-messages"): a signature is the provider's opaque token, valid only where it was
    minted, so an adapter of another API does not send it (adapters/signatures.py). None: the
    origin is unknown (older logs, blocks submitted without it), and every adapter sends it.
    `item_id` (thinking only) is the provider's own id of the item the block is, where the next
    request must name it: an OpenAI Responses reasoning item is sent back with its `rs_` id.
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
    signed_by: str | None = None
    item_id: str | None = None

    _shared_names = field_validator("role", "kind", "trust_label", "status")(shared_name)

    def content_fields(self) -> dict[str, Any]:
        """What the content digest covers: everything that a provider would see."""
        return content_fields_of(self.__dict__)

    def with_digest(self) -> Block:
        return self.model_copy(update={"digest": block_digest(self)})


def block_digest(block: Block) -> str:
    return digest_of(block.content_fields())


_CONTENT_FIELDS = (
    ("role", "role"),
    ("kind", "kind"),
    ("trustLabel", "trust_label"),
    ("text", "text"),
    ("callId", "call_id"),
    ("toolName", "tool_name"),
    ("arguments", "arguments"),
    ("resultStatus", "result_status"),
    ("signature", "signature"),
    ("signedBy", "signed_by"),
    ("itemId", "item_id"),
)
"""(spec name, field) of what a block's content digest covers."""


def content_fields_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """`Block.content_fields` of a block's field values (its `__dict__`): the covered fields that
    are not None, under their spec names."""
    return {name: value for name, field in _CONTENT_FIELDS if (value := values.get(field)) is not None}


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

    @classmethod
    def of(cls, block: Block) -> BlockRef:
        """`BlockRef(id=block.id, role=..., kind=..., digest=..., call_id=...)`: each field is the
        block's field of the same name and annotation, already validated, so it is built without
        validating again (`of_validated`): a manifest lists every block of the conversation, ~22k
        refs a 300-conversation bench run (issue 20)."""
        return cls.of_validated(
            {
                "id": block.id,
                "role": block.role,
                "kind": block.kind,
                "digest": block.digest,
                "call_id": block.call_id,
            }
        )


class MessageSequence(Frozen):
    """MessageSequence.v1: the validated graph of one conversation at one revision."""

    conversation_id: str
    conversation_revision: int
    sequence_digest: str
    blocks: tuple[Block, ...]
    tool_edges: tuple[ToolEdge, ...] = ()

    def block_refs(self) -> tuple[BlockRef, ...]:
        return tuple(map(BlockRef.of, self.blocks))


SEQUENCE_DIGEST_VERSION = "turnledger.sequence.v1"


def sequence_seed(conversation_id: str) -> str:
    """The chain's starting link: binds every sequence digest to its conversation."""
    return digest_of([SEQUENCE_DIGEST_VERSION, conversation_id])


def sequence_link(previous: str, block: Block) -> str:
    """The next chain link: sha256 over the previous link and the block's identity and content digest."""
    return digest_of([previous, block.id, block.role, block.kind, block.digest])


def sequence_chain(conversation_id: str, blocks: Iterable[Block], head: str | None = None) -> str:
    """Fold blocks into the chain, starting at `head` (default: the conversation's seed)."""
    link = sequence_seed(conversation_id) if head is None else head
    for block in blocks:
        link = sequence_link(link, block)
    return link


def seal_sequence_digest(head: str, revision: int) -> str:
    """The published digest: the chain head bound to the conversation revision."""
    return digest_of([head, revision])


def sequence_digest(conversation_id: str, revision: int, blocks: tuple[Block, ...]) -> str:
    """Digest over the ordered block identities and content digests at one revision.

    It is a hash chain so that it can be maintained incrementally: the fold keeps
    the chain head, and appending a turn costs one link per new block
    (`sequence_link`) plus one seal, never a pass over the history. Link i is
    sha256(canonical_json([link i-1, id, role, kind, digest])), link 0 is
    `sequence_seed(conversation_id)`, and the digest is
    sha256(canonical_json([head, revision])). Because each link commits to its
    predecessor, reordering, dropping or editing any block changes the digest.
    """
    return seal_sequence_digest(sequence_chain(conversation_id, blocks), revision)
