"""The size measures of `model/limits.py` (what BLOCK_TOO_LARGE and the turn bounds count) and the
toolset tables of `model/tools.py` (a digest, JSON and parse kept per toolset, bounded)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from turnledger.model import tools as tools_module
from turnledger.model.canonical import digest_of
from turnledger.model.limits import has_utf8_form, is_blank, printable, utf8_length, utf8_size
from turnledger.model.tools import (
    MAX_TOOLSET_DIGESTS,
    MAX_TOOLSETS_READ,
    ToolDefinition,
    Toolset,
    shared_tools,
    toolset_digest,
    toolset_json,
    toolset_of_json,
)

LONE = "\ud800"


@pytest.mark.parametrize(
    ("text", "has_form", "length"),
    [("", True, 0), ("abc", True, 3), ("é", True, 2), ("中", True, 3), ("😀", True, 4), (LONE, False, 3)],
)
def test_utf8_measures(text: str, has_form: bool, length: int) -> None:
    """A lone surrogate has no UTF-8 form and is counted as the three bytes it would take."""
    assert has_utf8_form(text) is has_form
    assert utf8_length(text) == length


def test_utf8_size_skips_what_is_absent_and_printable_escapes_only_what_has_no_form() -> None:
    assert utf8_length(None) == 0
    assert utf8_size(["a", None, "é", "", LONE]) == 1 + 2 + 3
    assert utf8_size([]) == 0
    text = "ok é"
    assert printable(text) is text
    assert printable("a" + LONE + "b") == "a\\ud800b"


WEATHER = ToolDefinition(name="weather", description="d", input_schema={"type": "object"})
SEARCH = ToolDefinition(
    name="search", input_schema={"type": "object", "properties": {"q": {"type": "string"}}}
)


@pytest.fixture
def empty_tables() -> Iterator[None]:
    tables: tuple[dict[Any, Any], ...] = (
        tools_module._TOOLSET_DIGESTS, tools_module._TOOLSET_JSON, tools_module._TOOLSETS_READ,
    )  # fmt: skip
    saved = [dict(t) for t in tables]
    for table in tables:
        table.clear()
    yield
    for table, entries in zip(tables, saved, strict=True):
        table.clear()
        table.update(entries)


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(tools_module, name)

    def counted(value: Any) -> Any:
        calls.append(value)
        return real(value)

    monkeypatch.setattr(tools_module, name, counted)
    return calls


@pytest.mark.usefixtures("empty_tables")
def test_a_toolset_digest_is_computed_once_per_toolset_and_kept_with_its_definitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _counting(monkeypatch, "digest_of")
    both, one = (WEATHER, SEARCH), (SEARCH,)
    expected = digest_of([WEATHER.to_json_dict(), SEARCH.to_json_dict()])
    assert toolset_digest(both) == expected
    assert toolset_digest(both) == expected
    assert toolset_digest(one) == digest_of([SEARCH.to_json_dict()])
    assert len(calls) == 2
    assert tools_module._TOOLSET_DIGESTS[(id(WEATHER), id(SEARCH))] == (both, expected)
    assert Toolset(tools=both).digest == expected


@pytest.mark.usefixtures("empty_tables")
def test_the_digest_table_starts_over_past_its_bound() -> None:
    for n in range(1, MAX_TOOLSET_DIGESTS + 1):
        toolset_digest((WEATHER,) * n)
    assert len(tools_module._TOOLSET_DIGESTS) == MAX_TOOLSET_DIGESTS == 256
    toolset_digest((SEARCH,))
    assert list(tools_module._TOOLSET_DIGESTS) == [(id(SEARCH),)]


@pytest.mark.usefixtures("empty_tables")
def test_a_toolset_json_is_the_array_a_request_holds_dumped_once(monkeypatch: pytest.MonkeyPatch) -> None:
    both = (WEATHER, SEARCH)
    first = toolset_json(both)
    assert orjson.loads(first) == [WEATHER.model_dump(mode="json"), SEARCH.model_dump(mode="json")]
    assert toolset_json(both) is first
    assert tools_module._TOOLSET_JSON[(id(WEATHER), id(SEARCH))] == (both, first)
    for n in range(2, MAX_TOOLSET_DIGESTS + 1):
        toolset_json((WEATHER,) * n)
    assert len(tools_module._TOOLSET_JSON) == MAX_TOOLSET_DIGESTS
    toolset_json((SEARCH,))
    assert list(tools_module._TOOLSET_JSON) == [(id(SEARCH),)]


@pytest.mark.usefixtures("empty_tables")
def test_a_toolset_read_back_is_parsed_once_per_json_into_the_live_definitions() -> None:
    live = shared_tools((WEATHER, SEARCH))  # what requests of these definitions hold
    json = toolset_json(live)
    parsed = toolset_of_json("k1", json)
    assert parsed == (WEATHER, SEARCH) and parsed[0] is live[0]  # the live definition, not a copy
    assert toolset_of_json("k1", json) is parsed
    other = toolset_json((SEARCH,))
    assert toolset_of_json("k1", other) == (SEARCH,)  # a key naming other JSON: parsed, never a wrong answer
    assert tools_module._TOOLSETS_READ["k1"] == (other, (SEARCH,))
    with pytest.raises(ValidationError):
        toolset_of_json("k2", b'[{"description": "no name"}]')
    for n in range(2, MAX_TOOLSETS_READ + 1):
        toolset_of_json(f"k{n + 1}", json)
    assert len(tools_module._TOOLSETS_READ) == MAX_TOOLSETS_READ == 256
    toolset_of_json("last", json)
    assert list(tools_module._TOOLSETS_READ) == ["last"]


def test_a_toolset_finds_a_definition_by_name() -> None:
    toolset = Toolset(tools=(WEATHER, SEARCH))
    assert toolset.get("search") is SEARCH
    assert toolset.get("nope") is None
    assert Toolset().get("weather") is None


BLANKS = ("", " ", "\n\t\r", "\u3000", "\x85\xa0", "\x1c\x1f")
NOT_BLANK = ("a", " .", "\u200b", "\ufeff", "\t\u3000x")


def test_blank_is_empty_or_only_whitespace() -> None:
    assert [is_blank(t) for t in BLANKS] == [True] * len(BLANKS)
    assert [is_blank(t) for t in NOT_BLANK] == [False] * len(NOT_BLANK)


def test_the_client_serve_and_the_validator_refuse_the_same_user_text() -> None:
    """One definition of blank: what the gateway client and serve's body take, the ledger commits."""
    from turnledger.errors import RequestBodyError
    from turnledger.gateway.client import EventFactory
    from turnledger.gateway.event_arguments import EventArgumentError
    from turnledger.sequence import GraphState, Invalid, submit
    from turnledger.serve.bodies import TurnBody, read_body

    def verdicts(text: str) -> tuple[bool, bool, bool]:
        try:
            event = EventFactory().user_turn("conv-1", text)
            client = True
        except EventArgumentError:
            event, client = EventFactory().user_turn("conv-1", "x"), False
        try:
            read_body(TurnBody, orjson.dumps({"text": text}))
            served = True
        except RequestBodyError:
            served = False
        block = event.blocks[0].model_copy(update={"text": text})
        ledger = not isinstance(submit(GraphState.empty("conv-1"), "t1", [block]), Invalid)
        return client, served, ledger

    assert [verdicts(t) for t in BLANKS] == [(False, False, False)] * len(BLANKS)
    assert [verdicts(t) for t in NOT_BLANK] == [(True, True, True)] * len(NOT_BLANK)
