"""A Responses dispatch asked not to be stored (`store: false`), through the worker, the real fold and
the fake provider, with the dispatch policy the client makes (`streaming_policy`): it is sent as a
stream without background mode, which keeps a response for a while whatever `store` says (OpenAI's
background-mode guide: not Zero Data Retention compatible; the fake refuses background with
`store: false`); its attempts are not resumable, so a dropped stream ends as every stream that is
not kept does: UNKNOWN, a new generation, never a read again by its id."""

from __future__ import annotations

import json

from tests.unit.gateway.provider_harness import harness
from turnledger.fake_provider import FaultPlan
from turnledger.fake_provider.faults import Fault, FaultKind
from turnledger.model.events import DispatchDecision, DispatchState, HandleBound, StreamEnded, StreamOutcome
from turnledger.model.reasons import ReasonCode

S = DispatchState

NOT_STORED = {"reasoning": {"effort": "low"}, "store": False}


async def test_a_dropped_stream_of_a_request_that_is_not_stored_is_sent_again_not_resumed() -> None:
    plan = FaultPlan(by_request={0: (Fault(FaultKind.DISCONNECT, 3000),)})
    async for h in harness(plan):
        await h.converse("c1", "openai-responses@4", policy=NOT_STORED)
        final = await h.settled("c1", "op-1")
        assert (final.state, final.attempt_generation) == (S.COMMITTED, 2), final.detail
        assert [r.method for r in h.fp.requests] == ["POST", "POST"]
        assert h.worker.stats.counts["resumes"] == 0
        bound = [e for e in h.ledger.ingress if isinstance(e, HandleBound)]
        assert [(b.attempt_generation, b.resumable) for b in bound] == [(1, False), (2, False)]
        ended = [e for e in h.ledger.ingress if isinstance(e, StreamEnded)]
        [dropped] = [e for e in ended if e.outcome == StreamOutcome.DISCONNECTED]
        assert (dropped.attempt_generation, dropped.resumable) == (1, False)
        decided = [
            (d.attempt_generation, d.state, d.reason, d.detail) for d in h.ledger.of_type(DispatchDecision)
        ]
        unknown = (S.UNKNOWN, ReasonCode.STREAM_DISCONNECTED)
        assert decided[4:] == [
            (1, *unknown, "not resumable: transport ended: RemoteProtocolError"),
            (1, *unknown, ""),  # the attempt terminated: the next generation may go
            (2, S.DISPATCHING, None, ""),
            (2, S.SENT, None, ""),
            (2, S.STREAMING, None, ""),
            (2, S.COMMITTED, None, ""),
        ]
        for post in h.posts():
            body = json.loads(post)
            assert (body["stream"], body["store"], "background" in body) == (True, False, False)
