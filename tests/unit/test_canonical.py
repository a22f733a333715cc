"""Golden vectors: a change of canonical form, block digest or sequence chain fails here."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given

from tests.strategies import Conversation, blocks_of, conversations, json_values
from turnledger.model.canonical import canonical_json, digest_of
from turnledger.model.graph import Block, BlockRef, block_digest, sequence_digest
from turnledger.model.manifest import DispatchManifest
from turnledger.model.tools import ToolDefinition, Toolset
from turnledger.sequence import GraphState

ARGS = '{"tz": "Europe/Berlin", "n": 1.5}'

USER = Block(
    id="u-80",
    role="user",
    kind="text",
    turn_id="t-80",
    revision=80,
    ordering=0,
    trust_label="user",
    text="Wie spät ist es? \u2603 assistant: hi",
).with_digest()
CALL = Block(
    id="a-81-c1",
    role="assistant",
    kind="tool_call",
    turn_id="t-81",
    revision=81,
    ordering=1,
    trust_label="model",
    call_id="call-7",
    tool_name="clock",
    arguments=ARGS,
    argument_state="complete",
    argument_digest=digest_of(json.loads(ARGS)),
    generation=1,
).with_digest()
RESULT = Block(
    id="t-81-r1",
    role="tool",
    kind="tool_result",
    turn_id="t-82",
    revision=82,
    ordering=2,
    trust_label="tool",
    call_id="call-7",
    tool_name="clock",
    argument_digest=CALL.argument_digest,
    generation=1,
    result_status="success",
    text="12:00",
).with_digest()
TOOLSET = Toolset(
    tools=(
        ToolDefinition(
            name="clock",
            description="Current time",
            input_schema={"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
        ),
    )
)


def test_canonical_json_bytes() -> None:
    value = {"b": [1, 2.5, -0.0, 1e20], "a": {"z": None, "é": "\u2603"}, "c": True}
    assert (
        canonical_json(value) == b'{"a":{"z":null,"\xc3\xa9":"\xe2\x98\x83"},"b":[1,2.5,-0.0,1e+20],"c":true}'
    )


def test_block_digests() -> None:
    assert USER.digest == "sha256:f62b4bab753c0536b6b65dd595659041df25825178f034b125022d71b8d9b43b"
    assert CALL.digest == "sha256:906f173950cbb9bbdf8fce3ae71c72e34ba7ca05bf319b429eeda96913db7617"
    assert RESULT.digest == "sha256:d4ebdaea473a1435ac7bf8e57a2f277d1ec5aa0f8f67a18402ec4ef855075c0e"
    assert CALL.argument_digest == "sha256:aa7171cb887025865eef64870e77c3645d10b510c387defa8ea001c36f673775"


def test_sequence_digest() -> None:
    digest = sequence_digest("conv-1", 82, (USER, CALL, RESULT))
    assert digest == "sha256:86f1271eccfd1a679e75a3811467e18d01b56cdb4c22e626c9bd3c16353adaf5"


def test_sequence_digest_follows_its_documented_chain() -> None:
    def h(value: object) -> str:
        raw = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    link = h(["turnledger.sequence.v1", "conv-1"])
    for b in (USER, CALL, RESULT):
        link = h([link, b.id, b.role, b.kind, b.digest])
    assert sequence_digest("conv-1", 82, (USER, CALL, RESULT)) == h([link, 82])


def test_sequence_digest_binds_order_conversation_and_revision() -> None:
    base = sequence_digest("conv-1", 82, (USER, CALL, RESULT))
    assert sequence_digest("conv-1", 82, (CALL, USER, RESULT)) != base
    assert sequence_digest("conv-2", 82, (USER, CALL, RESULT)) != base
    assert sequence_digest("conv-1", 83, (USER, CALL, RESULT)) != base
    assert GraphState.empty("conv-1").sequence_digest == sequence_digest("conv-1", 0, ())


def test_toolset_digests() -> None:
    assert TOOLSET.digest == "sha256:52b8d59381e17aff1aea145efb16de73483ad0907ee26abeb76d013c932fe333"
    assert (
        TOOLSET.tools[0].schema_digest
        == "sha256:348fb304f0d3e171a655454df7f30056dae445d950a1537567cf26597058d7bd"
    )


def test_manifest_digest() -> None:
    manifest = DispatchManifest(
        operation_id="op-1",
        conversation_id="conv-1",
        conversation_revision=82,
        cancel_generation=0,
        sequence_digest=sequence_digest("conv-1", 82, (USER, CALL, RESULT)),
        blocks=tuple(
            BlockRef(id=b.id, role=b.role, kind=b.kind, digest=b.digest, call_id=b.call_id) for b in (USER,)
        ),
        adapter="anthropic-messages@1",
        adapter_digest=digest_of({"adapter": "anthropic-messages@1"}),
        provider="anthropic",
        model_revision="provider/model@2026-07",
        toolset_digest=TOOLSET.digest,
        max_output_tokens=1600,
        policy={"temperature": 0.2},
        request_digest=digest_of({"messages": []}),
        request_body='{"messages":[]}',
        input_tokens=12,
    ).sealed()
    assert manifest.manifest_digest == MANIFEST_DIGEST
    assert manifest.sealed() == manifest


MANIFEST_DIGEST = "sha256:da3ba8f59d0fd21adb7275f53dee79568ded75dd6bbec356f2be4afe919f7fa0"


@given(json_values)
def test_digest_ignores_key_order(value: object) -> None:
    if isinstance(value, dict):
        assert digest_of(dict(reversed(list(value.items())))) == digest_of(value)


@given(conversations())
def test_block_digests_are_recomputable(conv: Conversation) -> None:
    for block in blocks_of(conv):
        assert block.digest == block_digest(block)


def test_a_nan_or_an_infinity_is_written_as_null_as_the_docstring_says() -> None:
    """orjson does not refuse them; the ledger never folds one (module docstring)."""
    assert (
        canonical_json({"t": float("nan"), "u": float("inf"), "v": float("-inf")})
        == b'{"t":null,"u":null,"v":null}'
    )
