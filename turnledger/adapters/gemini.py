"""Google Gemini `generateContent`: graph → request body (the model goes in the URL).

Role rules (reference 1d): roles are `user` and `model`; system text is a separate
`systemInstruction`; the N parallel calls of one step stay in ONE model content and
are answered by ONE user content with N `functionResponse` parts (matched by id);
thought signatures are returned on exactly the part they arrived on (a call's
signature rides on its `functionCall` part). The function-response content holds only
the tool role's blocks (responses, then any tool-scoped snippets): user text that
follows is its own user content, so the response turn stays what Gemini counts.
A signature another API minted is not sent (`adapters/signatures.py`). Gemini 3 refuses a step
whose first call has no signature, and documents a stand-in, `skip_thought_signature_validator`, for
calls it did not generate: the first unsigned call of an assistant run gets it where the rules say
(`first_call_stand_in`, `STAND_IN_RUNS`): version 3 in every run, versions 1 and 2 only in a run
holding a block another API signed (an answer that API made with thinking).

Thinking (version 3): the dispatch policy's `thinking_config` goes, as it is, to
`generationConfig.thinkingConfig`, Gemini's "configuration for thinking features" (the GenerationConfig
reference), whose fields are `includeThoughts` (return the thought parts, "thought summaries"),
`thinkingBudget` (tokens; 0 disables, -1 is dynamic; Gemini 2.5) and `thinkingLevel` (Gemini 3; refused
beside `thinkingBudget`): ai.google.dev/gemini-api/docs/thinking, and the GenAI SDK's ThinkingConfig
(googleapis.github.io/js-genai/release_docs/interfaces/types.ThinkingConfig.html). Asked with
`{"includeThoughts": true}`, an answer carries thought parts and a signature on its first call, which
the next request returns on that part. The value goes as it is, as openai-responses' `reasoning` does:
the API judges it (and refuses it for a model that does not think). The key is Gemini's own, not
Anthropic's `thinking`, whose value has another shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from turnledger.adapters._common import (
    SCOPED_NOTICE,
    Run,
    delimited_scoped_text,
    error_envelope,
    is_failure,
    parse_arguments,
)
from turnledger.adapters.base import JsonObject
from turnledger.adapters.call_ids import IdRule, wire_call_id
from turnledger.adapters.layout import BodyLayout
from turnledger.adapters.policy_rules import GEMINI_RULES
from turnledger.adapters.profiles import GEMINI_IDS
from turnledger.adapters.signatures import FOREIGN_CALL_SIGNATURE, foreign_signature, own_signature
from turnledger.adapters.skeleton import AdapterBase, PartRenderer
from turnledger.adapters.turns import RenderedTurns, system_aside_turns
from turnledger.model.graph import Block, BlockKind, Role

API = "gemini"

Part = dict[str, Any]


def _renderers_v1() -> dict[str, str]:
    return {
        "text": "text",
        "thinking": "thought",
        "tool_call": "function_call",
        "tool_result": "function_response",
        "retrieved_snippet": "scoped_text",
        "compression_artifact": "scoped_text",
    }


def _policy_v1() -> dict[str, str]:
    return {
        "temperature": "temperature",
        "top_p": "topP",
        "top_k": "topK",
        "stop_sequences": "stopSequences",
        "seed": "seed",
    }


def _policy_v3() -> dict[str, str]:
    """Version 3 adds what asks Gemini to think, and to return its thoughts (module docstring)."""
    return {**_policy_v1(), "thinking_config": "thinkingConfig"}


@dataclass(frozen=True)
class GeminiRules:
    """The Gemini generateContent rules table."""

    system_placement: str = "system_instruction_parts"
    assistant_role: str = "model"
    tool_role_becomes: str = "user"
    merge_same_role: bool = True
    merge_function_response_content: bool = False  # never merge user text into the response turn
    parallel_results: str = "one_user_content_n_function_response_parts"
    signature_placement: str = "thought_signature_on_originating_part"
    error_encoding: str = "response_error_key"
    cancel_status: str = "cancelled"
    unsigned_thinking: str = "drop"
    scoped_notice: str | None = SCOPED_NOTICE
    renderers: dict[str, str] = field(default_factory=_renderers_v1)
    policy_fields: dict[str, str] = field(default_factory=_policy_v1)

    def as_data(self) -> JsonObject:
        return asdict(self)

    def wire_id(self, call_id: str | None) -> str | None:
        """The id sent in functionCall/functionResponse: version 1 sends the graph's id as it is."""
        return call_id

    @property
    def first_call_stand_in(self) -> str:
        """Which assistant runs' first unsigned call carries the stand-in (`STAND_IN_RUNS`). Versions 1
        and 2 predate the field, so it is not in their rules table (nor their digest)."""
        return "runs_another_api_signed"


@dataclass(frozen=True)
class GeminiRulesV2(GeminiRules):
    """Version 2: our synthetic ids (`gemini:<response>:<block>`, for calls Gemini sent without one)
    are not sent: such a call and its response carry no `id` and pair by position and name."""

    call_ids: IdRule = GEMINI_IDS

    def wire_id(self, call_id: str | None) -> str | None:
        return wire_call_id(self.call_ids, call_id)


@dataclass(frozen=True)
class GeminiRulesV3(GeminiRulesV2):
    """Version 3: the first call of every assistant run that carries no signature of its own gets the
    stand-in. An answer another API made without reasoning (Claude without thinking, any OpenAI Chat
    answer, Bedrock without reasoning) has no signature to tell it by, and Gemini 3 refuses its call
    unsigned; Gemini 3 signs the first call of each step of its own, so an unsigned one is not its.
    Its policy passes `thinking_config` (module docstring)."""

    first_call_stand_in: str = "every_run"
    policy_fields: dict[str, str] = field(default_factory=_policy_v3)


RULES_V1 = GeminiRules()
RULES_V2 = GeminiRulesV2()
RULES_V3 = GeminiRulesV3()


def _signed(part: Part, block: Block) -> Part:
    signature = own_signature(block, API)
    if signature:
        part["thoughtSignature"] = signature
    return part


def _text(block: Block, rules: GeminiRules) -> Part | None:
    """A text part; an empty one only when it carries a thought signature (Gemini's last chunk puts one
    on an empty text part, and the next request must return it)."""
    if not block.text and not own_signature(block, API):
        return None
    return _signed({"text": block.text or ""}, block)


def _thought(block: Block, rules: GeminiRules) -> Part | None:
    if not own_signature(block, API):
        return None
    return _signed({"text": block.text or "", "thought": True}, block)


def _scoped_text(block: Block, rules: GeminiRules) -> Part | None:
    return {"text": delimited_scoped_text(block)}


def _function_call(block: Block, rules: GeminiRules) -> Part | None:
    call = _with_id({"name": block.tool_name, "args": parse_arguments(block)}, rules.wire_id(block.call_id))
    if foreign_signature(block, API):
        return {"functionCall": call, "thoughtSignature": FOREIGN_CALL_SIGNATURE}
    return _signed({"functionCall": call}, block)


def _function_response(block: Block, rules: GeminiRules) -> Part | None:
    response = (
        error_envelope(block, rules.cancel_status) if is_failure(block) else {"output": block.text or ""}
    )
    reply = _with_id({"name": block.tool_name, "response": response}, rules.wire_id(block.call_id))
    return {"functionResponse": reply}


def _with_id(part: Part, call_id: str | None) -> Part:
    # canonical JSON sorts keys, so where `id` is inserted does not change the bytes
    return part if call_id is None else {"id": call_id, **part}


_RENDER: dict[str, PartRenderer[GeminiRules]] = {
    "text": _text,
    "thought": _thought,
    "scoped_text": _scoped_text,
    "function_call": _function_call,
    "function_response": _function_response,
}


class GeminiAdapter(AdapterBase[GeminiRules]):
    api = API
    provider = "google"
    part_renderers = _RENDER

    def body_layout(self, rules: GeminiRules) -> BodyLayout:
        return BodyLayout(
            turns="contents",
            model=None,
            max_tokens="maxOutputTokens",
            generation="generationConfig",
            system=("systemInstruction", "parts"),
            tool_group="functionDeclarations",
        )

    def turns(self, runs: list[Run], notice: str | None) -> RenderedTurns:
        rules = self.rules
        stand_ins = _unsigned_first_calls(runs, STAND_IN_RUNS[rules.first_call_stand_in])
        render = self.render_block
        if stand_ins:
            render = partial(_with_stand_in, self.render_block, stand_ins)
        return system_aside_turns(
            runs,
            render,
            system=[{"text": notice}] if notice else [],
            content_key="parts",
            assistant_role=rules.assistant_role,
            other_role=rules.tool_role_becomes,
            merge_same_role=rules.merge_same_role,
            never_merged=frozenset() if rules.merge_function_response_content else frozenset({Role.TOOL}),
        )

    def tool_definition(self, name: str, description: str, schema: JsonObject) -> JsonObject:
        decl: JsonObject = {"name": name, "parametersJsonSchema": schema}
        if description:
            decl["description"] = description
        return decl


def _signed_elsewhere(run: Run) -> bool:
    """A run with a block another API signed (a Claude answer's thinking) is that API's answer."""
    return any(foreign_signature(b, API) for b in run.blocks)


def _any_run(run: Run) -> bool:
    return True


STAND_IN_RUNS: dict[str, Callable[[Run], bool]] = {
    "runs_another_api_signed": _signed_elsewhere,
    "every_run": _any_run,
}
"""`first_call_stand_in` → which assistant runs' first unsigned call carries the stand-in."""


def _unsigned_first_calls(runs: list[Run], chosen_run: Callable[[Run], bool]) -> frozenset[str]:
    """The first call of each chosen assistant run, when it carries no signature of its own (one
    another API signed already renders with the stand-in). Decided per run, as the prefix render
    cache reuses whole runs (`adapters/prefix.py`)."""
    chosen: list[str] = []
    for run in runs:
        if run.role != Role.ASSISTANT or not chosen_run(run):
            continue
        first = next((b for b in run.blocks if b.kind == BlockKind.TOOL_CALL), None)
        if first is not None and own_signature(first, API) is None:
            chosen.append(first.id)
    return frozenset(chosen)


def _with_stand_in(
    render: Callable[[Block], Part | None], stand_ins: frozenset[str], block: Block
) -> Part | None:
    """The block's part, and for a call another API made, Gemini's stand-in for its signature."""
    part = render(block)
    if part is not None and block.id in stand_ins:
        part["thoughtSignature"] = FOREIGN_CALL_SIGNATURE
    return part


GEMINI_V1 = GeminiAdapter(1, RULES_V1)
GEMINI_V2 = GeminiAdapter(2, RULES_V2)
GEMINI_V3 = GeminiAdapter(3, RULES_V3, GEMINI_RULES)
