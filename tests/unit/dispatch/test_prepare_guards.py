"""Guards of `dispatch/prepare.py` that mutation testing found undefended: the decision every outcome
of a preparation writes (state, previous state, accepted, reason, detail) both for a new request and
for an operation WAITING for tool results that is prepared again, the manifest's every field, and the
pauses: which operation holds one, who is refused while it holds, and which operations its end cancels.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.adapters.admission import Admitted, admit
from turnledger.adapters.base import DispatchParams
from turnledger.adapters.registry import get_adapter
from turnledger.dispatch.state import ManifestSeal
from turnledger.model.canonical import digest_of
from turnledger.model.events import DispatchRequested, DispatchState, SubmittedBlock, TurnSubmitted
from turnledger.model.limits import AVRO_LONG_MAX
from turnledger.model.reasons import ReasonCode
from turnledger.model.tools import ToolDefinition
from turnledger.sequence.builder import sequence_of

from .scenario import (
    ADAPTER,
    MODEL,
    WEATHER,
    Conversation,
    DispatchDecision,
    ManifestIssued,
    Rejected,
    tool_stream,
)

S = DispatchState
LEGACY = "anthropic-messages@0"
ARGS = '{"city": "Paris"}'
PAUSED_DETAIL = (
    f"the conversation is paused for {LEGACY} since operation {{op}}: "
    "dispatch with an adapter that renders it, or cancel"
)
UNSUPPORTED_DETAIL = f"{LEGACY} does not know kind 'retrieved_snippet' (block s1-b0)"


def _decisions(c: Conversation, op: str) -> list[tuple[Any, ...]]:
    return [
        (d.previous_state, d.state, d.accepted, d.reason, d.detail)
        for d in c.of(DispatchDecision)
        if d.operation_id == op
    ]


def _snippet(c: Conversation) -> None:
    """A block kind the legacy adapter cannot render."""
    block = SubmittedBlock(
        id="s1-b0", role="user", kind="retrieved_snippet", trust_label="retrieved", text="doc"
    )
    c.apply(TurnSubmitted(**c._common(), turn_id="s1", blocks=(block,)))


def _request(c: Conversation, op: str, model: str = MODEL, **fields: Any) -> None:
    c.apply(
        DispatchRequested(
            **c._common(),
            operation_id=op,
            adapter=fields.pop("adapter", ADAPTER),
            provider="anthropic",
            model_revision=model,
            tools=(WEATHER,),
            max_output_tokens=fields.pop("max_output_tokens", 256),
            **fields,
        )
    )


def _two_pending_calls(c: Conversation) -> None:
    """A committed answer with two tool calls: the conversation waits for both results."""
    c.dispatch_to_streaming()
    c.deltas(tool_stream([("call-1", "get_weather", [ARGS]), ("call-2", "get_weather", [ARGS])]))
    assert c.state.graph.pending_call_ids == ("call-1", "call-2")


def test_a_request_while_results_are_pending_waits_once_and_every_outcome_is_decided_when_they_arrive() -> (
    None
):
    c = Conversation()
    c.user("hi")
    _snippet(c)
    _two_pending_calls(c)
    requests: list[tuple[str, dict[str, Any]]] = [
        ("op-p1", {"adapter": LEGACY}),
        ("op-p2", {"adapter": LEGACY}),
        ("op-big", {"max_output_tokens": 10_000_000}),
        ("op-model", {"model": "anthropic/no-such-model@1"}),
        ("op-w", {}),
    ]
    for op, fields in requests:
        _request(c, op, **fields)
    waiting = (None, S.WAITING, True, None, "pending tool calls ['call-1', 'call-2']")
    for op in ["op-p1", "op-p2", "op-big", "op-model", "op-w"]:
        assert _decisions(c, op) == [waiting]
        assert c.state.operations[op].state == S.WAITING

    c.tool_results(("call-1", "get_weather", ARGS))  # still waiting for call-2: nothing is decided again
    assert [len(_decisions(c, op)) for op in ["op-p1", "op-p2", "op-big", "op-model", "op-w"]] == [1] * 5
    assert c.of(ManifestIssued)[-1].manifest.operation_id == "op-1"

    c.tool_results(("call-2", "get_weather", ARGS))
    assert _decisions(c, "op-p1") == [
        waiting,
        (S.WAITING, S.PAUSED, False, ReasonCode.UNSUPPORTED_KIND, UNSUPPORTED_DETAIL),
        (
            S.PAUSED,
            S.CANCELLED,
            True,
            ReasonCode.PAUSE_ENDED,
            "operation op-w renders the conversation with " + ADAPTER,
        ),
    ]
    assert _decisions(c, "op-p2") == [
        waiting,
        (S.WAITING, S.REJECTED, False, ReasonCode.CONVERSATION_PAUSED, PAUSED_DETAIL.format(op="op-p1")),
    ]
    [big] = _decisions(c, "op-big")[1:]
    assert big[:4] == (S.WAITING, S.REJECTED, False, ReasonCode.TOKEN_BUDGET_EXCEEDED)
    assert big[4].endswith(" input tokens exceed the budget of -9800000")
    assert _decisions(c, "op-model") == [
        waiting,
        (S.WAITING, S.REJECTED, False, ReasonCode.UNKNOWN_MODEL, "model anthropic/no-such-model@1"),
    ]
    assert _decisions(c, "op-w") == [waiting, (S.WAITING, S.PREPARED, True, None, "")]
    assert c.of(ManifestIssued)[-1].manifest.operation_id == "op-w"
    assert c.state.paused == {}
    states = {op: o.state for op, o in c.state.operations.items()}
    assert states == {
        "op-1": S.COMMITTED,
        "op-p1": S.CANCELLED,
        "op-p2": S.REJECTED,
        "op-big": S.REJECTED,
        "op-model": S.REJECTED,
        "op-w": S.PREPARED,
    }


def test_every_refusal_of_a_new_request_is_decided_with_its_reason_and_detail() -> None:
    c = Conversation()
    c.request("op-empty")
    assert _decisions(c, "op-empty") == [
        (None, S.REJECTED, False, ReasonCode.EMPTY_SEQUENCE, "the conversation has no blocks")
    ]
    c.user("hi")
    _request(c, "op-adapter", adapter="nope@1")
    assert _decisions(c, "op-adapter") == [
        (None, S.REJECTED, False, ReasonCode.UNKNOWN_ADAPTER, "unknown adapter 'nope@1'")
    ]
    _request(c, "op-model", model="anthropic/no-such-model@1")
    assert _decisions(c, "op-model") == [
        (None, S.REJECTED, False, ReasonCode.UNKNOWN_MODEL, "model anthropic/no-such-model@1")
    ]
    _request(c, "op-bare", model="anthropic/claude-sonnet-4")
    assert _decisions(c, "op-bare") == [
        (
            None,
            S.REJECTED,
            False,
            ReasonCode.UNKNOWN_MODEL,
            "model revision 'anthropic/claude-sonnet-4' is not provider/model@revision",
        )
    ]
    _request(c, "op-big", max_output_tokens=10_000_000)
    [big] = _decisions(c, "op-big")
    assert big[:4] == (None, S.REJECTED, False, ReasonCode.TOKEN_BUDGET_EXCEEDED)
    assert c.of(ManifestIssued) == []
    assert c.of(Rejected) == []


def test_a_request_with_an_operation_id_already_used_is_refused_and_changes_nothing() -> None:
    c = Conversation()
    c.user("hi")
    c.request("op-1")
    before = c.state
    out = c.request("op-1")
    assert out == c.of(Rejected)
    assert [(r.operation_id, r.reason, r.detail, r.event_type) for r in c.of(Rejected)] == [
        ("op-1", ReasonCode.DUPLICATE_OPERATION, "operation op-1 already exists", "DispatchRequested")
    ]
    assert c.state == before


def test_the_manifest_binds_every_field_of_the_request_its_render_and_its_admission() -> None:
    c = Conversation()
    c.user("hi")
    c.cancel()  # cancel generation 1: the manifest carries the conversation's, not a default
    policy = {"temperature": 0}
    _request(c, "op-1", policy=policy)
    [issued] = c.of(ManifestIssued)
    m = issued.manifest
    request = c.state.operations["op-1"].request
    adapter = get_adapter(ADAPTER)
    sequence = sequence_of(c.state.graph)
    params = DispatchParams.of_request(request)
    rendered = adapter.render(sequence.sequence, params)
    admission = admit(adapter, rendered, params)  # type: ignore[arg-type]
    assert isinstance(admission, Admitted)
    assert (m.operation_id, m.conversation_id, m.conversation_revision, m.cancel_generation) == (
        "op-1",
        "conv-1",
        1,
        1,
    )
    assert m.sequence_digest == sequence.sequence.sequence_digest
    assert m.blocks == sequence.sequence.block_refs()
    assert (m.adapter, m.adapter_digest, m.provider) == (ADAPTER, adapter.digest, "anthropic")
    assert (m.model_revision, m.max_output_tokens, m.policy) == (MODEL, 256, policy)
    assert m.toolset_digest == digest_of([WEATHER.to_json_dict()])
    assert (m.request_digest, m.request_body) == (rendered.request_digest, rendered.body.decode())  # type: ignore[union-attr]
    assert m.input_tokens == admission.input_tokens > 0
    assert m == m.sealed() and m.manifest_digest.startswith("sha256:")
    assert issued.occurred_at_ms == request.occurred_at_ms
    op = c.state.operations["op-1"]
    assert (op.state, op.manifest, op.prepared_revision) == (S.PREPARED, ManifestSeal.of(m), 1)
    assert _decisions(c, "op-1") == [(None, S.PREPARED, True, None, "")]
    assert c.of(DispatchDecision)[-1].manifest_digest == m.manifest_digest


def test_a_pause_that_outlived_its_operation_ends_without_cancelling_it_again() -> None:
    c = Conversation()
    c.user("hello")
    _snippet(c)
    c.request("op-1", adapter=LEGACY, settle_within_ms=1_000)
    c.advance(1_000)
    c.claim(worker="sweeper")
    assert c.state.operations["op-1"].state == S.CANCELLED
    assert c.state.paused == {LEGACY: "op-1"}
    decided = len(_decisions(c, "op-1"))
    c.request("op-2")
    assert _decisions(c, "op-2") == [(None, S.PREPARED, True, None, "")]
    assert len(_decisions(c, "op-1")) == decided
    assert c.state.paused == {}


def test_an_operation_waiting_for_an_adapter_this_build_no_longer_has_is_refused_when_prepared_again() -> (
    None
):
    """A rollback: the state was written by a build that registered an adapter this one does not.
    The adapter registry is immutable within a build, so only a restored state reaches this."""
    c = Conversation()
    c.user("hi")
    _two_pending_calls(c)
    _request(c, "op-w")
    op = c.state.operations["op-w"]
    retired = op.model_copy(update={"request": op.request.model_copy(update={"adapter": "retired@9"})})
    c.state = c.state.with_operation(retired)
    c.tool_results(("call-1", "get_weather", ARGS), ("call-2", "get_weather", ARGS))
    assert _decisions(c, "op-w")[1:] == [
        (S.WAITING, S.REJECTED, False, ReasonCode.UNKNOWN_ADAPTER, "unknown adapter 'retired@9'")
    ]


TOOL_A = ToolDefinition(name="a")


def _nested(levels: int) -> dict[str, Any]:
    """A dict nesting `levels` dicts deep (itself the first)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"max_output_tokens": 0}, "maxOutputTokens must be at least 1, not 0"),
        ({"max_output_tokens": -5}, "maxOutputTokens must be at least 1, not -5"),
        ({"settle_within_ms": 0}, "settleWithinMs must be at least 1, not 0"),
        ({"settle_within_ms": -1}, "settleWithinMs must be at least 1, not -1"),
        (
            {"settle_within_ms": AVRO_LONG_MAX},
            f"the deadline (occurredAtMs {{at}} + settleWithinMs) is past {AVRO_LONG_MAX}",
        ),
        ({"tools": (ToolDefinition(name=""),)}, "a tool has an empty name"),
        ({"tools": (TOOL_A, WEATHER, TOOL_A, WEATHER)}, "tool names given twice: ['a', 'get_weather']"),
        ({"policy": {"x": _nested(32)}}, "policy nests objects and arrays 33 levels deep, at most 32"),
        (  # rendered inside the body past canonical JSON's 254 levels: this raised in the fold (FOLD_FAILED)
            {"policy": {"x": _nested(252)}},
            "policy nests objects and arrays 253 levels deep, at most 32",
        ),
        (
            {"tools": (WEATHER, ToolDefinition(name="deep", input_schema=_nested(33)))},
            "tool 'deep''s input_schema nests objects and arrays 33 levels deep, at most 32",
        ),
        (
            {"provider": "openai"},
            f"provider 'openai' is not 'anthropic', the provider of adapter {ADAPTER}",
        ),
        (
            {"provider": "Anthropic", "max_output_tokens": 0},
            f"provider 'Anthropic' is not 'anthropic', the provider of adapter {ADAPTER}",
        ),
    ],
)
def test_a_request_no_provider_takes_is_refused_and_makes_no_operation(
    fields: dict[str, Any], detail: str
) -> None:
    """Before, each was PREPARED (a manifest with `"max_tokens":-5`, two tools of one name), settled
    at once (a deadline already past), or raised encoding its decision (a deadline past the Avro
    long): a FOLD_FAILED with no operation."""
    fields = dict(fields)
    c = Conversation()
    c.user("hi")
    state_before = c.state
    tools = fields.pop("tools", (WEATHER,))
    c.apply(
        DispatchRequested(
            **c._common(),
            operation_id="op-bad",
            adapter=ADAPTER,
            provider=fields.pop("provider", "anthropic"),
            model_revision=MODEL,
            tools=tools,
            max_output_tokens=fields.pop("max_output_tokens", 256),
            **fields,
        )
    )
    [rejected] = c.of(Rejected)
    assert (rejected.operation_id, rejected.reason, rejected.event_type) == (
        "op-bad",
        ReasonCode.INVALID_EVENT,
        "DispatchRequested",
    )
    assert rejected.detail == detail.format(at=rejected.occurred_at_ms)
    assert c.of(DispatchDecision) == [] and c.of(ManifestIssued) == []
    assert c.state.operations == state_before.operations


def test_a_request_at_each_bound_is_prepared() -> None:
    c = Conversation()
    c.user("hi")
    common = c._common()
    request = DispatchRequested(
        **common,
        operation_id="op-edge",
        adapter=ADAPTER,
        provider="anthropic",
        model_revision=MODEL,
        tools=(ToolDefinition(name="deep", input_schema=_nested(32)),),
        policy={"stop_sequences": ["x"], "metadata": _nested(31)},
        max_output_tokens=1,
        settle_within_ms=AVRO_LONG_MAX - common["occurred_at_ms"],
    )
    c.apply(request)
    [decision] = c.of(DispatchDecision)
    assert (decision.state, decision.deadline_at_ms) == (S.PREPARED, AVRO_LONG_MAX)
    assert c.of(Rejected) == []


def test_a_request_to_settle_within_one_millisecond_is_prepared() -> None:
    """The least `settleWithinMs` the fold takes: 1 ms past the request's time."""
    c = Conversation()
    c.user("hi")
    common = c._common()
    c.apply(
        DispatchRequested(
            **common,
            operation_id="op-soon",
            adapter=ADAPTER,
            provider="anthropic",
            model_revision=MODEL,
            max_output_tokens=256,
            settle_within_ms=1,
        )
    )
    [decision] = c.of(DispatchDecision)
    assert (decision.state, decision.deadline_at_ms) == (S.PREPARED, common["occurred_at_ms"] + 1)
    assert c.of(Rejected) == []


@pytest.mark.parametrize(
    ("adapter", "model", "reason", "detail"),
    [
        ("retired@9", MODEL, ReasonCode.UNKNOWN_ADAPTER, "unknown adapter 'retired@9'"),
        ("openai-chat@2", MODEL, ReasonCode.UNKNOWN_MODEL, f"model {MODEL}"),
    ],
)
def test_a_request_gets_one_refusal_the_provider_rule_leaves_the_adapter_and_model_to_theirs(
    adapter: str, model: str, reason: ReasonCode, detail: str
) -> None:
    """An unknown adapter has no provider to compare: UNKNOWN_ADAPTER. A request for the adapter's own
    provider whose model is another provider's: UNKNOWN_MODEL, as before."""
    c = Conversation()
    c.user("hi")
    provider = "openai" if adapter.startswith("openai") else "anthropic"
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-1", adapter=adapter, provider=provider, model_revision=model,
            max_output_tokens=256,
        )
    )  # fmt: skip
    assert c.of(Rejected) == []
    assert _decisions(c, "op-1") == [(None, S.REJECTED, False, reason, detail)]


@pytest.mark.parametrize(
    ("adapter", "provider", "model"),
    [
        ("anthropic-messages@2", "anthropic", "anthropic/claude-sonnet-4@2025-05"),
        ("openai-chat@2", "openai", "openai/gpt-4o@2024-08"),
        ("openai-responses@2", "openai", "openai/gpt-4.1@2025-04"),
        ("gemini@2", "google", "google/gemini-2.5-pro@2025-06"),
        ("bedrock-converse@1", "bedrock", "bedrock/anthropic.claude-sonnet-4@2025-05"),
    ],
)
def test_a_request_for_its_adapters_provider_is_prepared_with_it(
    adapter: str, provider: str, model: str
) -> None:
    c = Conversation()
    c.user("hi")
    c.apply(
        DispatchRequested(
            **c._common(), operation_id="op-1", adapter=adapter, provider=provider, model_revision=model,
            max_output_tokens=256,
        )
    )  # fmt: skip
    [issued] = c.of(ManifestIssued)
    assert (issued.manifest.adapter, issued.manifest.provider) == (adapter, provider)
    assert c.of(Rejected) == []
