"""The adapters' shared edges: model revisions, the first kind without a renderer, the registry, the
bundled encodings and the layout's empty path, each refusal with its words."""

from __future__ import annotations

import pytest

from tests.unit.adapters.conversations import Conversation
from turnledger.adapters import encodings, layout
from turnledger.adapters.base import (
    DispatchParams,
    InvalidModelRevisionError,
    MalformedSequenceError,
    ModelRevision,
    UnknownAdapterError,
    UnsupportedKind,
    first_unsupported,
    parse_model_revision,
)
from turnledger.adapters.registry import ADAPTERS, get_adapter, with_adapter
from turnledger.model.events import DispatchRequested
from turnledger.model.tools import ToolDefinition


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("openai/gpt-4o@2024-08", ("openai", "gpt-4o", "2024-08")),
        ("openai/gpt@beta@2024-08", ("openai", "gpt@beta", "2024-08")),  # the revision is after the last @
        (
            "bedrock/anthropic/claude@1",
            ("bedrock", "anthropic/claude", "1"),
        ),  # the provider before the first /
    ],
)
def test_a_model_revision_splits_at_the_first_slash_and_the_last_at(
    value: str, parts: tuple[str, ...]
) -> None:
    assert parse_model_revision(value) == ModelRevision(*parts)


@pytest.mark.parametrize("value", ["p/m", "pm@r", "/m@r", "p/@r", "p/m@", "@", ""])
def test_a_model_revision_missing_any_part_is_refused(value: str) -> None:
    with pytest.raises(InvalidModelRevisionError) as refused:
        parse_model_revision(value)
    assert str(refused.value) == f"model revision {value!r} is not provider/model@revision"


def test_the_first_block_without_a_renderer_is_named_and_an_unknown_role_is_malformed() -> None:
    c = Conversation("edges")
    c.next_turn().user("q")
    snippet = c.snippet("s")
    blocks = c.build().blocks
    assert first_unsupported(blocks, {"text": "r", "retrieved_snippet": "r"}) is None
    assert first_unsupported(blocks, {"text": "r"}) == UnsupportedKind(
        kind="retrieved_snippet", block_id=snippet.id, detail="no renderer in rules table"
    )
    odd = blocks[0].model_copy(update={"role": "narrator"})
    with pytest.raises(MalformedSequenceError) as malformed:
        first_unsupported([odd], {"text": "r"})
    assert str(malformed.value) == f"block {odd.id}: unknown role 'narrator'"


def test_dispatch_params_are_the_requests_own() -> None:
    tool = ToolDefinition(name="t", description="d", input_schema={"type": "object"})
    request = DispatchRequested(
        conversation_id="c", event_id="e", occurred_at_ms=1, operation_id="op", adapter="openai-chat@2",
        provider="openai", model_revision="openai/gpt-4o@2024-08", tools=(tool,), max_output_tokens=77,
        policy={"temperature": 0.5},
    )  # fmt: skip
    assert DispatchParams.of_request(request) == DispatchParams(
        model_revision="openai/gpt-4o@2024-08",
        tools=(tool,),
        max_output_tokens=77,
        policy={"temperature": 0.5},
    )


def test_the_registry_names_an_unknown_id_and_refuses_a_changed_adapter_under_an_old_id() -> None:
    with pytest.raises(UnknownAdapterError) as unknown:
        get_adapter("nope@1")
    assert str(unknown.value) == "unknown adapter 'nope@1'"
    chat = get_adapter("openai-chat@2")
    assert with_adapter(ADAPTERS, chat) == ADAPTERS  # the same adapter again: nothing changes
    other = get_adapter("openai-chat@1")
    impostor = type("Impostor", (), {"adapter_id": "openai-chat@2", "digest": other.digest})()
    with pytest.raises(
        ValueError, match=r"^openai-chat@2 is registered with another digest; bump the version$"
    ):
        with_adapter(ADAPTERS, impostor)
    added = with_adapter({}, chat)
    assert dict(added) == {"openai-chat@2": chat}


def test_an_encoding_not_bundled_says_where_it_looked() -> None:
    with pytest.raises(encodings.EncodingUnavailableError) as missing:
        encodings._read_bundled("no_such_encoding")
    assert str(missing.value) == (
        f"encoding 'no_such_encoding': bundled vocabulary not found in package {encodings.DATA_PACKAGE!r} "
        "(install it; turnledger never downloads encodings)"
    )


def test_a_layout_without_a_place_for_a_value_says_so() -> None:
    with pytest.raises(ValueError) as refused:
        layout._put({}, (), 1)
    assert str(refused.value) == "this layout has no place for the value (an empty path)"
    body: dict[str, object] = {"a": {"x": 0}}
    layout._put(body, ("a", "b", "c"), 1)
    assert body == {"a": {"x": 0, "b": {"c": 1}}}
