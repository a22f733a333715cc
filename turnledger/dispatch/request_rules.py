"""What a DispatchRequested must hold before the fold makes an operation of it, and a DispatchAttempt
before the fold answers its CAS: one row per rule.

The gateway client refuses these before sending (`gateway/event_arguments.py`), but any producer
can write the ingress topic. Without them the fold PREPAREd requests every provider refuses (an
output budget of 0 or below, a tool without a name, two tools of one name), settled at once ones
whose deadline had passed before they were made (a `settleWithinMs` of 0 or below), and one whose
deadline is past the largest Avro long raised when its decision was encoded: a FOLD_FAILED with no
operation. Each is now refused (INVALID_EVENT, the rule's detail) and no operation is made.

The request's `provider` is the provider it is meant for, and the manifest binds the provider the
adapter sends to (the spec: the manifest "binds the sequence, adapter, provider, model"). The fold
took the adapter's and ignored the request's, so a request for "openai" with an Anthropic adapter
was prepared for Anthropic: now a provider that is not its adapter's is refused. An adapter the
registry does not know is left to UNKNOWN_ADAPTER, and a model of another provider than the
adapter's to UNKNOWN_MODEL (`adapters/admission.py`), so each request has one refusal.

A policy its adapter sends and the provider is sure to refuse for what it is (a Claude thinking budget
below 1,024 or not below `maxOutputTokens`, Gemini's thinking budget beside a thinking level, an
effort OpenAI does not know, ...) was prepared, sent, and ended CANCELLED PROVIDER_REFUSED after a
round trip. The adapter now judges it (`adapters/policy_rules.py`, the rows its version sends), and
such a request is refused here; a version that does not send the key takes the request as before.

A DispatchAttempt's `leaseMs` is how long the accepted attempt is its worker's. The fold accepted
one of 0 or below (a lease that had expired when it was granted: any worker's claim took the attempt
at once) and one whose end (the attempt's time plus it) is past the largest Avro long, which raised
when the accepting decision was encoded (a FOLD_FAILED). Such an attempt is now refused
(INVALID_EVENT, the rule's detail) before its CAS is looked at, and the operation is unchanged.
A lease that ends at that long, renewed by a later event of the attempt, would pass it too: the
lease's end a decision carries is held there (`OperationState.lease_expires_at_ms`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from turnledger.adapters.base import UnknownAdapterError
from turnledger.adapters.registry import get_adapter
from turnledger.model.events import DispatchAttempt, DispatchRequested, IngressEvent
from turnledger.model.limits import AVRO_LONG_MAX, JSON_NESTING_MAX, json_nesting

E = TypeVar("E", bound=IngressEvent)
Rule = Callable[[E], str | None]
"""The detail of the event's refusal, or None when it keeps the rule."""


def _output_budget(request: DispatchRequested) -> str | None:
    if request.max_output_tokens >= 1:
        return None
    return f"maxOutputTokens must be at least 1, not {request.max_output_tokens}"


def _settle_within(request: DispatchRequested) -> str | None:
    within = request.settle_within_ms
    if within is None or within >= 1:
        return None
    return f"settleWithinMs must be at least 1, not {within}"


def _deadline(request: DispatchRequested) -> str | None:
    if request.deadline_at_ms <= AVRO_LONG_MAX:
        return None
    return f"the deadline (occurredAtMs {request.occurred_at_ms} + settleWithinMs) is past {AVRO_LONG_MAX}"


def _tool_names(request: DispatchRequested) -> str | None:
    if any(not tool.name for tool in request.tools):
        return "a tool has an empty name"
    twice = sorted(name for name, n in Counter(tool.name for tool in request.tools).items() if n > 1)
    return f"tool names given twice: {twice}" if twice else None


def _provider(request: DispatchRequested) -> str | None:
    try:
        adapter = get_adapter(request.adapter)
    except UnknownAdapterError:
        return None
    if request.provider == adapter.provider:
        return None
    adapter_id = adapter.adapter_id
    return f"provider {request.provider!r} is not {adapter.provider!r}, the provider of adapter {adapter_id}"


def _policy(request: DispatchRequested) -> str | None:
    try:
        adapter = get_adapter(request.adapter)
    except UnknownAdapterError:
        return None
    return adapter.policy_refusal(request.max_output_tokens, request.policy)


def _nesting(request: DispatchRequested) -> str | None:
    nested = [("policy", request.policy)] + [
        (f"tool {t.name!r}'s input_schema", t.input_schema) for t in request.tools
    ]
    for name, value in nested:
        depth = json_nesting(value)
        if depth > JSON_NESTING_MAX:
            return f"{name} nests objects and arrays {depth} levels deep, at most {JSON_NESTING_MAX}"
    return None


def _lease(attempt: DispatchAttempt) -> str | None:
    if attempt.lease_ms >= 1:
        return None
    return f"leaseMs must be at least 1, not {attempt.lease_ms}"


def _lease_end(attempt: DispatchAttempt) -> str | None:
    if attempt.occurred_at_ms + attempt.lease_ms <= AVRO_LONG_MAX:
        return None
    return f"the lease's end (occurredAtMs {attempt.occurred_at_ms} + leaseMs) is past {AVRO_LONG_MAX}"


RULES: tuple[Rule[DispatchRequested], ...] = (
    _provider,
    _output_budget,
    _settle_within,
    _deadline,
    _tool_names,
    _nesting,
    _policy,
)
ATTEMPT_RULES: tuple[Rule[DispatchAttempt], ...] = (_lease, _lease_end)


def first_refusal(rules: tuple[Rule[E], ...], event: E) -> str | None:
    """The detail of the first rule the event breaks, or None."""
    for rule in rules:
        detail = rule(event)
        if detail is not None:
            return detail
    return None


def request_refusal(request: DispatchRequested) -> str | None:
    return first_refusal(RULES, request)


def attempt_refusal(attempt: DispatchAttempt) -> str | None:
    return first_refusal(ATTEMPT_RULES, attempt)
