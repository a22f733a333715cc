"""Every API through the worker, the real fold (in-memory ledger) and the fake provider, with the
credentials the fake checks: a commit, a tool round, a disconnect and retry, truncated arguments;
an adapter with no route settles; a missing credential is refused as the API refuses it."""

from __future__ import annotations

import json

import pytest

from tests.unit.gateway.provider_harness import APIS, ROLLBACK, harness, with_keys
from turnledger.fake_provider import FakeProvider, FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.gateway.endpoints import ProviderRoutes, endpoints_for
from turnledger.gateway.worker import gave_up
from turnledger.model.events import (
    DispatchState,
    HandleBound,
    ManifestIssued,
    ToolCallReady,
)
from turnledger.model.graph import BlockKind
from turnledger.model.reasons import ReasonCode

S = DispatchState


@pytest.mark.parametrize("adapter", [*APIS, *ROLLBACK])
async def test_tool_round_commits_calls_then_an_answer_that_pairs_every_result(adapter: str) -> None:
    async for h in harness(tools_run=True):
        await h.converse("c1", adapter)
        first = await h.settled("c1", "op-1")
        assert first.state == S.COMMITTED and first.attempt_generation == 1
        [calls_turn] = h.assistant_turns("c1")
        calls = [b for b in calls_turn.blocks if b.kind == BlockKind.TOOL_CALL]
        assert calls and len(h.ledger.of_type(ToolCallReady)) == len(calls)
        await h.request("c1", adapter, "op-2")
        second = await h.settled("c1", "op-2")
        assert second.state == S.COMMITTED
        answer = h.assistant_turns("c1")[-1]
        assert [b.kind for b in answer.blocks] == ["text"]
        # the fake names every result it was given: each one reached it, paired with its call
        assert answer.blocks[0].text is not None and answer.blocks[0].text.count(" returned: ") == len(calls)
        manifests = [m.manifest for m in h.ledger.of_type(ManifestIssued)]
        assert h.posts() == [m.request_body.encode() for m in manifests]
        assert all(
            r.path.startswith(APIS.get(adapter, ROLLBACK.get(adapter, ("", "", "")))[2])
            for r in h.fp.requests
        )
        assert h.fp.auth_failures == []


@pytest.mark.parametrize("adapter", list(APIS))
async def test_plain_commit_binds_the_handle_first(adapter: str) -> None:
    async for h in harness():
        await h.converse("c1", adapter, text="tell me something", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED
        [bound] = [e for e in h.ledger.ingress if isinstance(e, HandleBound)]
        [post] = [r for r in h.fp.requests if r.method == "POST"]
        assert bound.response_handle == post.response_id and bound.response_handle
        [turn] = h.assistant_turns("c1")
        assert [b.kind for b in turn.blocks] == ["text"]


@pytest.mark.parametrize("adapter", list(APIS))
async def test_disconnect_then_a_new_generation_or_a_resume_commits_once(adapter: str) -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 600),)})
    async for h in harness(plan):
        await h.converse("c1", adapter, text="tell me something", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED
        resumed = adapter.startswith("openai-responses")  # background + stream: kept by the provider
        assert final.attempt_generation == (1 if resumed else 2)
        assert [r.method for r in h.fp.requests] == (["POST", "GET"] if resumed else ["POST", "POST"])
        assert len(h.assistant_turns("c1")) == 1


@pytest.mark.parametrize("adapter", list(APIS))
async def test_truncated_arguments_never_commit_the_retry_does(adapter: str) -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.TRUNCATED_ARGS),)})
    async for h in harness(plan):
        await h.converse("c1", adapter)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        [turn] = h.assistant_turns("c1")
        assert turn.attempt_generation == 2
        calls = h.ledger.of_type(ToolCallReady)
        assert calls and all(c.attempt_generation == 2 and json.loads(c.arguments) for c in calls)
        posts = h.posts()
        assert len(posts) == 2 and posts[0] == posts[1]


async def test_an_adapter_without_a_route_settles_with_a_reason_naming_it() -> None:
    def only_openai_chat(fp: FakeProvider) -> ProviderRoutes:
        return ProviderRoutes([r for r in with_keys(fp).routes if r.name == "openai-chat"])

    async for h in harness(routes_of=only_openai_chat):
        await h.converse("c1", "gemini@2")
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final)
        assert final.reason == ReasonCode.NO_PROVIDER_ENDPOINT
        assert "no provider endpoint configured for adapter gemini@2" in final.detail
        assert h.fp.requests == []
        assert h.worker.stats.counts["no_endpoint"] == 1


#: adapter → the status and error type each API answers a request without its credential with
REFUSED_WITHOUT_CREDENTIAL = {
    "anthropic-messages@2": (401, "authentication_error"),
    "openai-chat@2": (401, "invalid_request_error"),
    "openai-responses@2": (401, "invalid_request_error"),
    "gemini@2": (403, "PERMISSION_DENIED"),
    "bedrock-converse@1": (403, "MissingAuthenticationTokenException"),
}


@pytest.mark.parametrize("adapter", list(APIS))
async def test_without_credentials_the_api_refuses_once_and_the_operation_ends_refused(adapter: str) -> None:
    """The same bytes with the same (missing) credential would be refused again: no second send."""
    async for h in harness(routes_of=lambda fp: endpoints_for(fp.base_url)):  # no credential in env
        await h.converse("c1", adapter, tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final)
        assert final.reason == ReasonCode.PROVIDER_REFUSED
        status, kind = REFUSED_WITHOUT_CREDENTIAL[adapter]
        assert final.detail == (
            f"worker gave up: the provider refused the request (HTTP {status} {kind}); "
            "not sent again: it would be too"
        )
        assert [s for _, s in h.fp.auth_failures] == [status]
        assert h.worker.stats.counts[f"http_{status}"] == 1
        assert h.worker.stats.counts["provider_refused"] == 1
        assert h.worker.stats.counts["pauses"] == 0
        assert not h.assistant_turns("c1")
