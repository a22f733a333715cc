"""The digests of `model/graph.py` recomputed from their documented definitions, independently of the code:
a block's content digest, the sequence's hash chain (seed, links, an explicit head) and its seal.
A manifest binds these, and a replay must reproduce them byte for byte (promise 5)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from turnledger.model.graph import (
    SEQUENCE_DIGEST_VERSION,
    Block,
    BlockRef,
    MessageSequence,
    block_digest,
    seal_sequence_digest,
    sequence_chain,
    sequence_digest,
    sequence_link,
    sequence_seed,
)


def sha(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


USER = Block(
    id="u1-b0",
    role="user",
    kind="text",
    turn_id="u1",
    revision=1,
    ordering=0,
    trust_label="user",
    text="hi é",
)
CALL = Block(
    id="a2-c0", role="assistant", kind="tool_call", turn_id="a2", revision=2, ordering=1, trust_label="model",
    call_id="call-1", tool_name="get_weather", arguments='{"city":"Paris"}', argument_digest="sha256:x",
    generation=1,
)  # fmt: skip


def test_a_block_digest_covers_what_a_provider_sees_under_the_spec_names() -> None:
    assert SEQUENCE_DIGEST_VERSION == "turnledger.sequence.v1"
    assert block_digest(USER) == sha({"role": "user", "kind": "text", "trustLabel": "user", "text": "hi é"})
    assert block_digest(CALL) == sha(
        {
            "role": "assistant", "kind": "tool_call", "trustLabel": "model", "callId": "call-1",
            "toolName": "get_weather", "arguments": '{"city":"Paris"}',
        }
    )  # fmt: skip
    digested = USER.with_digest()
    assert (
        digested.digest == block_digest(USER) and digested.model_copy(update={"digest": USER.digest}) == USER
    )


def test_the_sequence_chain_and_its_seal() -> None:
    user, call = USER.with_digest(), CALL.with_digest()
    seed = sha(["turnledger.sequence.v1", "conv-1"])
    assert sequence_seed("conv-1") == seed
    link_1 = sha([seed, "u1-b0", "user", "text", user.digest])
    assert sequence_link(seed, user) == link_1
    link_2 = sha([link_1, "a2-c0", "assistant", "tool_call", call.digest])
    assert sequence_chain("conv-1", [user, call]) == link_2
    assert sequence_chain("conv-1", [call], head=link_1) == link_2
    assert sequence_chain("conv-1", []) == seed
    assert seal_sequence_digest(link_2, 2) == sha([link_2, 2])
    assert sequence_digest("conv-1", 2, (user, call)) == sha([link_2, 2])


def test_order_conversation_and_revision_each_change_the_digest() -> None:
    user, call = USER.with_digest(), CALL.with_digest()
    digests = {
        sequence_digest("conv-1", 2, (user, call)),
        sequence_digest("conv-1", 2, (call, user)),
        sequence_digest("conv-2", 2, (user, call)),
        sequence_digest("conv-1", 3, (user, call)),
    }
    assert len(digests) == 4


def test_block_refs_carry_identity_and_digest_only() -> None:
    user, call = USER.with_digest(), CALL.with_digest()
    sequence = MessageSequence(
        conversation_id="conv-1", conversation_revision=2, sequence_digest="sha256:s", blocks=(user, call)
    )
    assert sequence.block_refs() == (
        BlockRef(id="u1-b0", role="user", kind="text", digest=user.digest),
        BlockRef(id="a2-c0", role="assistant", kind="tool_call", digest=call.digest, call_id="call-1"),
    )
