"""The message-graph invariants, one row per rule: (reason code, check).

A check looks at one block of the turn being appended, with the committed indexes
and the earlier blocks of the same turn in view (`TurnScan`), and returns a detail
string when the block breaks the rule. Every check guards its own preconditions,
so all rows run on every block and a block may collect several rejections; a
removed row changes exactly the codes its tests expect.

Decisions the spec leaves open:
- callIds are unique across the whole conversation, not only within a turn: results
  pair with calls by callId, and a reused id would make that pairing ambiguous.
- Scoped inputs (retrieved_snippet, compression_artifact) carry trust label
  `retrieved` and role `user` or `tool`, and belong to the turn they came with:
  their role must be one of the roles of that turn's own (non-scoped) blocks; a
  turn made only of scoped inputs is a user turn. So a snippet never sits inside
  an assistant response, never becomes system text, and never poses as a tool
  result in a turn without one.
- A signature (the provider's opaque token for its own reasoning) rides on thinking, on a tool
  call, and on an assistant's text (Gemini signs text parts); on no other block. `signed_by`
  (the API that minted it) only beside a signature, and never empty. `item_id` (the provider's id of
  a reasoning item) only on thinking, and never empty.
- Roles and kinds pair: tool_call and thinking are assistant, tool_result is tool;
  `system` is only operator-labelled text, and the `operator` label only system.
- A turn has at least one block, all with the next revision, one turn id, and
  orderings that continue the history without gaps.
- A text, retrieved_snippet or compression_artifact block of any role but assistant has text that
  is not blank (`is_blank`: empty or only whitespace). Anthropic and Bedrock refuse a blank text
  block with a 400, so their adapters leave it out: a blank user turn left a request ending on the
  assistant's turn (continued as a prefill, or a 400) or with no message at all, and the other APIs
  got a text with nothing in it, in every later request too; a blank snippet or artifact carries
  nothing. Assistant text is exempt: it is what the provider
  said, committed by the assembler as it came (a text block may stop with no delta, or with only
  newlines before a tool call), and refusing it would keep a complete answer from committing; the
  Anthropic and Bedrock adapters leave a blank one out. Tool results are exempt too: a tool's output
  may well be empty or a newline, and those adapters render a blank result as one without text.
- Every string of a block has a UTF-8 form (no lone surrogates: Avro and canonical JSON
  cannot carry them); a block's content and a turn's block count stay within the
  `Limits` the scan carries (model/limits.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from turnledger.model.canonical import CanonicalJsonError
from turnledger.model.graph import (
    SCOPED_INPUT_KINDS,
    TERMINAL_RESULT_STATUSES,
    ArgumentState,
    Block,
    BlockKind,
    BlockStatus,
    Role,
    TrustLabel,
    block_digest,
)
from turnledger.model.limits import has_utf8_form, is_blank, utf8_size
from turnledger.model.reasons import ReasonCode
from turnledger.model.strict_json import JsonRefusal
from turnledger.sequence.arguments import argument_digest_of, argument_verdict
from turnledger.sequence.graph_state import CallRecord
from turnledger.sequence.scan import TurnScan

Check = Callable[[Block, TurnScan], str | None]


class Rule(NamedTuple):
    code: ReasonCode
    check: Check


_ROLES = frozenset(Role)
_KINDS = frozenset(BlockKind)
_TRUST_LABELS = frozenset(TrustLabel)

_CONTENT_FIELDS = (
    "text",
    "call_id",
    "tool_name",
    "arguments",
    "argument_state",
    "argument_digest",
    "schema_digest",
    "generation",
    "result_status",
    "signature",
    "item_id",
)
_TEXTUAL = (frozenset({"text"}), frozenset({"text"}))
_FIELDS_BY_KIND: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # kind: (required, allowed)
    BlockKind.TEXT: _TEXTUAL,
    BlockKind.RETRIEVED_SNIPPET: _TEXTUAL,
    BlockKind.COMPRESSION_ARTIFACT: _TEXTUAL,
    BlockKind.THINKING: (frozenset(), frozenset({"text", "signature", "item_id"})),
    BlockKind.TOOL_CALL: (
        frozenset({"call_id", "tool_name", "arguments", "argument_state", "generation"}),
        frozenset(
            {"call_id", "tool_name", "arguments", "argument_state", "argument_digest", "schema_digest"}
            | {"generation", "signature"}
        ),
    ),
    BlockKind.TOOL_RESULT: (
        frozenset({"call_id", "tool_name", "argument_digest", "generation", "result_status", "text"}),
        frozenset({"call_id", "tool_name", "argument_digest", "generation", "result_status", "text"}),
    ),
}
_SIGNED_BY_THE_MODEL: dict[str, frozenset[str]] = {BlockKind.TEXT: frozenset({"signature"})}
"""Fields an assistant block of a kind may carry beyond the kind's own: Gemini returns a thought
signature on a text part (provider-formats §2d: the final chunk's empty text part carries it, and the
next request must return it), which the stream parser puts on the answer's text block."""
_NON_EMPTY = ("id", "turn_id", "call_id", "tool_name", "signed_by", "item_id")


def unknown_role(block: Block, scan: TurnScan) -> str | None:
    return None if block.role in _ROLES else f"role {block.role!r} is not one of system/user/assistant/tool"


def unknown_kind(block: Block, scan: TurnScan) -> str | None:
    return None if block.kind in _KINDS else f"block kind {block.kind!r} is unknown"


def planned(block: Block, scan: TurnScan) -> str | None:
    if block.status == BlockStatus.COMMITTED:
        return None
    return f"block status is {block.status!r}, not committed"


def malformed(block: Block, scan: TurnScan) -> str | None:
    empty = [name for name in _NON_EMPTY if getattr(block, name) == ""]
    if empty:
        return f"empty {', '.join(empty)}"
    if block.trust_label not in _TRUST_LABELS:
        return f"trust label {block.trust_label!r} is unknown"
    if block.kind not in _FIELDS_BY_KIND:
        return None
    required, allowed = _FIELDS_BY_KIND[block.kind]
    if block.role == Role.ASSISTANT:
        allowed = allowed | _SIGNED_BY_THE_MODEL.get(block.kind, frozenset())
    present = {name for name in _CONTENT_FIELDS if getattr(block, name) is not None}
    if missing := sorted(required - present):
        return f"{block.kind} block lacks {', '.join(missing)}"
    if foreign := sorted(present - allowed):
        return f"{block.kind} block carries {', '.join(foreign)}"
    if block.signed_by is not None and block.signature is None:
        return f"{block.kind} block names who signed it (signed_by) but carries no signature"
    return None


_TEXT_KINDS = frozenset({BlockKind.TEXT, *SCOPED_INPUT_KINDS})


def blank_text(block: Block, scan: TurnScan) -> str | None:
    """Submitted text that is empty or only whitespace (the module's Decisions: assistant text is exempt)."""
    if block.kind not in _TEXT_KINDS or block.role == Role.ASSISTANT or block.text is None:
        return None
    return f"text of the {block.role} {block.kind} block is blank" if is_blank(block.text) else None


def out_of_sequence(block: Block, scan: TurnScan) -> str | None:
    if block.revision != scan.revision:
        return f"revision {block.revision}, expected {scan.revision}"
    if block.ordering != scan.expected_ordering:
        return f"ordering {block.ordering}, expected {scan.expected_ordering}"
    if block.turn_id != scan.turn_id:
        return f"turn {block.turn_id!r} inside turn {scan.turn_id!r}"
    return None


def digest_mismatch(block: Block, scan: TurnScan) -> str | None:
    try:
        actual = block_digest(block)
    except CanonicalJsonError:
        return None  # no canonical JSON, so no digest: unencodable_text names the field
    return None if block.digest == actual else "content digest does not match the block"


_STRING_FIELDS = (
    "id", "role", "kind", "turn_id", "trust_label", "status", "digest", "text", "call_id", "tool_name",
    "arguments", "argument_state", "argument_digest", "schema_digest", "result_status", "signature",
    "signed_by", "item_id",
)  # fmt: skip


def unencodable_text(block: Block, scan: TurnScan) -> str | None:
    bad = [name for name in _STRING_FIELDS if not has_utf8_form(getattr(block, name) or "")]
    return f"{', '.join(bad)} holds a lone surrogate (text with no UTF-8 form)" if bad else None


def block_too_large(block: Block, scan: TurnScan) -> str | None:
    size = utf8_size((block.text, block.arguments, block.signature))
    limit = scan.limits.max_block_bytes
    return f"content is {size} bytes, at most {limit}" if size > limit else None


def too_many_blocks(block: Block, scan: TurnScan) -> str | None:
    """Reported once, on the first block past the limit."""
    limit = scan.limits.max_blocks_per_turn
    return f"the turn has {len(scan.blocks)} blocks, at most {limit}" if scan.index == limit else None


def call_argument_digest_mismatch(block: Block, scan: TurnScan) -> str | None:
    if block.kind != BlockKind.TOOL_CALL or block.argument_state != ArgumentState.COMPLETE:
        return None
    actual = argument_digest_of(block.arguments)
    if actual is None or block.argument_digest == actual:
        return None
    return "argument digest does not match the call's arguments"


def duplicate_block_id(block: Block, scan: TurnScan) -> str | None:
    return f"block id {block.id!r} already used" if scan.knows_block(block.id) else None


def scope_boundary(block: Block, scan: TurnScan) -> str | None:
    if block.kind in SCOPED_INPUT_KINDS:
        return _scoped_input_boundary(block, scan)
    operator_text = block.kind == BlockKind.TEXT and block.trust_label == TrustLabel.OPERATOR
    if block.role == Role.SYSTEM and not operator_text:
        return "system blocks are operator-labelled text only"
    if block.trust_label == TrustLabel.OPERATOR and block.role != Role.SYSTEM:
        return f"operator trust label on a {block.role!r} block"
    expected = _ROLE_OF_KIND.get(block.kind)
    if expected is not None and block.role != expected:
        return f"{block.kind} with role {block.role!r}, expected {expected}"
    return None


_ROLE_OF_KIND: dict[str, str] = {
    BlockKind.TOOL_CALL: Role.ASSISTANT,
    BlockKind.THINKING: Role.ASSISTANT,
    BlockKind.TOOL_RESULT: Role.TOOL,
}
_SCOPED_ROLES = frozenset({Role.USER, Role.TOOL})


def _scoped_input_boundary(block: Block, scan: TurnScan) -> str | None:
    if block.trust_label != TrustLabel.RETRIEVED:
        return f"{block.kind} labelled {block.trust_label!r}, must be retrieved"
    if block.role not in _SCOPED_ROLES:
        return f"{block.kind} with role {block.role!r}, must be user or tool"
    owner_roles = scan.turn_roles or frozenset({Role.USER})
    if block.role not in owner_roles:
        return f"{block.kind} with role {block.role!r} in a turn of {sorted(owner_roles)}"
    return None


def _argument_refusal(block: Block) -> JsonRefusal | None:
    if block.kind != BlockKind.TOOL_CALL or block.arguments is None:
        return None
    verdict = argument_verdict(block.arguments)
    return verdict if isinstance(verdict, JsonRefusal) else None


def incomplete_arguments(block: Block, scan: TurnScan) -> str | None:
    """Arguments cut short (a proper prefix of some JSON text), or declared incomplete."""
    if block.kind != BlockKind.TOOL_CALL:
        return None
    refusal = _argument_refusal(block)
    if refusal is not None:
        truncated = refusal.reason == ReasonCode.TRUNCATED_ARGUMENTS
        return f"arguments are truncated: {refusal.detail}" if truncated else None
    if block.argument_state != ArgumentState.COMPLETE:
        return f"argument state is {block.argument_state!r}"
    return None


def invalid_arguments(block: Block, scan: TurnScan) -> str | None:
    """Arguments that no continuation makes valid: the strict parse the stream path uses refuses them."""
    refusal = _argument_refusal(block)
    if refusal is None or refusal.reason == ReasonCode.TRUNCATED_ARGUMENTS:
        return None
    return f"arguments are not strict JSON: {refusal.detail}"


def non_terminal_result(block: Block, scan: TurnScan) -> str | None:
    if block.kind != BlockKind.TOOL_RESULT or block.result_status is None:
        return None
    if block.result_status in TERMINAL_RESULT_STATUSES:
        return None
    return f"result status {block.result_status!r} is not terminal"


def duplicate_call_id(block: Block, scan: TurnScan) -> str | None:
    if block.kind != BlockKind.TOOL_CALL or block.call_id is None:
        return None
    return f"call id {block.call_id!r} already emitted" if scan.call(block.call_id) else None


def orphaned_result(block: Block, scan: TurnScan) -> str | None:
    if block.kind != BlockKind.TOOL_RESULT or block.call_id is None:
        return None
    return None if scan.call(block.call_id) else f"no earlier call {block.call_id!r}"


def duplicate_result(block: Block, scan: TurnScan) -> str | None:
    if block.kind != BlockKind.TOOL_RESULT or block.call_id is None:
        return None
    earlier = scan.result(block.call_id)
    return None if earlier is None else f"call {block.call_id!r} already has result {earlier.block_id!r}"


def result_tool_mismatch(block: Block, scan: TurnScan) -> str | None:
    call = _call_of_result(block, scan)
    if call is None or block.tool_name == call.tool_name:
        return None
    return f"result for tool {block.tool_name!r}, call was {call.tool_name!r}"


def result_argument_digest_mismatch(block: Block, scan: TurnScan) -> str | None:
    call = _call_of_result(block, scan)
    if call is None or block.argument_digest == call.argument_digest:
        return None
    return "result's argument digest differs from the call's"


def result_generation_mismatch(block: Block, scan: TurnScan) -> str | None:
    call = _call_of_result(block, scan)
    if call is None or block.generation == call.generation:
        return None
    return f"result generation {block.generation}, call generation {call.generation}"


def _call_of_result(block: Block, scan: TurnScan) -> CallRecord | None:
    if block.kind != BlockKind.TOOL_RESULT or block.call_id is None:
        return None
    return scan.call(block.call_id)


RULES: tuple[Rule, ...] = (
    Rule(ReasonCode.UNKNOWN_ROLE, unknown_role),
    Rule(ReasonCode.UNKNOWN_KIND, unknown_kind),
    Rule(ReasonCode.PLANNED_BLOCK, planned),
    Rule(ReasonCode.MALFORMED_BLOCK, malformed),
    Rule(ReasonCode.MALFORMED_BLOCK, blank_text),
    Rule(ReasonCode.BLOCK_OUT_OF_SEQUENCE, out_of_sequence),
    Rule(ReasonCode.DIGEST_MISMATCH, digest_mismatch),
    Rule(ReasonCode.DIGEST_MISMATCH, call_argument_digest_mismatch),
    Rule(ReasonCode.DUPLICATE_BLOCK_ID, duplicate_block_id),
    Rule(ReasonCode.SCOPE_BOUNDARY_CROSSED, scope_boundary),
    Rule(ReasonCode.INCOMPLETE_ARGUMENTS, incomplete_arguments),
    Rule(ReasonCode.INVALID_ARGUMENTS_JSON, invalid_arguments),
    Rule(ReasonCode.NON_TERMINAL_RESULT, non_terminal_result),
    Rule(ReasonCode.DUPLICATE_CALL_ID, duplicate_call_id),
    Rule(ReasonCode.ORPHANED_RESULT, orphaned_result),
    Rule(ReasonCode.DUPLICATE_RESULT, duplicate_result),
    Rule(ReasonCode.RESULT_TOOL_MISMATCH, result_tool_mismatch),
    Rule(ReasonCode.RESULT_ARGUMENT_DIGEST_MISMATCH, result_argument_digest_mismatch),
    Rule(ReasonCode.RESULT_GENERATION_MISMATCH, result_generation_mismatch),
    Rule(ReasonCode.UNENCODABLE_TEXT, unencodable_text),
    Rule(ReasonCode.BLOCK_TOO_LARGE, block_too_large),
    Rule(ReasonCode.TOO_MANY_BLOCKS, too_many_blocks),
)
