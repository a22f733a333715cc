"""A long conversation through the real processor and replay: manifests whose block lists the
processor continued from the conversation's last dispatch (dispatch/manifest_blocks.py, 64 blocks
and more) are the bytes a fresh fold with cold caches writes, and every one is reproduced."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration.projections.workload import settled
from tests.integration.replay.ingress_workload import captured_events, produce_ingress, run_processor
from tests.unit.dispatch.scenario import Conversation
from turnledger.dispatch.manifest_blocks import MIN_LISTED_BLOCKS
from turnledger.model.events import IngressEvent
from turnledger.processors.topics import ensure_topics
from turnledger.replay.audit import audit
from turnledger.replay.manifest_check import latest_manifests, reproduce
from turnledger.topology import Topics

pytestmark = pytest.mark.integration

TURNS = MIN_LISTED_BLOCKS + 8
FIRST_DISPATCH = MIN_LISTED_BLOCKS - 3
CONVERSATIONS = ("conv-long-a", "conv-long-b")


def long_conversation(conversation_id: str) -> list[IngressEvent]:
    """User turns, one block each, with a dispatch after each of the last ones: the first dispatches
    list fewer than `MIN_LISTED_BLOCKS` blocks, the later ones continue the listing."""

    def script(conversation: Conversation) -> None:
        for turn in range(TURNS):
            conversation.user(f"question {turn} of {conversation_id}")
            if turn >= FIRST_DISPATCH:
                conversation.request(op=f"{conversation_id}/op-{turn}")

    return captured_events(conversation_id, script)


async def test_continued_block_lists_replay_byte_for_byte(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topics = Topics(prefix=topic_name("") + ".")
    await ensure_topics(kafka_bootstrap, topics, partitions=2)
    events = [event for conversation in CONVERSATIONS for event in long_conversation(conversation)]
    await produce_ingress(kafka_bootstrap, topics, events)
    assert await run_processor(kafka_bootstrap, topics) > 0
    await settled(kafka_bootstrap, topics.outputs)

    report = await audit(kafka_bootstrap, topics)
    assert report.ok, report.divergences[:3]
    assert report.ingress_records == len(events)

    operation_ids = {
        f"{conversation}/op-{turn}" for conversation in CONVERSATIONS for turn in range(FIRST_DISPATCH, TURNS)
    }
    manifests = list((await latest_manifests(kafka_bootstrap, topics, operation_ids)).values())
    per_conversation = TURNS - FIRST_DISPATCH
    assert len(manifests) == 2 * per_conversation
    assert sorted(len(m.blocks) for m in manifests) == sorted(list(range(FIRST_DISPATCH + 1, TURNS + 1)) * 2)
    assert sum(len(m.blocks) >= MIN_LISTED_BLOCKS for m in manifests) == 2 * (TURNS - MIN_LISTED_BLOCKS + 1)
    for manifest in manifests:
        results = await reproduce(kafka_bootstrap, topics, operation_id=manifest.operation_id)
        assert len(results) == 1 and results[0].ok, [(c.name, c.ok) for r in results for c in r.checks]
        assert results[0].manifest_digest == manifest.manifest_digest
