"""The one strict JSON parse of tool arguments (`model/strict_json.py`), and that both paths use it.

- every proper prefix of a valid JSON object is TRUNCATED_ARGUMENTS, never INVALID_ARGUMENTS_JSON;
  the whole text parses to its value with its canonical digest;
- the prefix scanner agrees with the standard library's decoder on what is a whole JSON text;
- the stream path (`streaming/strict_arguments.py`) and the validator (`sequence/arguments.py`)
  give every text the same verdict: the same digest, or the same reason code.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tests.strategies  # noqa: F401  (registers the hypothesis profiles)
from turnledger.model.canonical import digest_of
from turnledger.model.reasons import ReasonCode
from turnledger.model.strict_json import JsonObject, JsonRefusal, Prefix, json_prefix, parse_json_object
from turnledger.sequence.arguments import argument_digest_of, argument_verdict
from turnledger.streaming.strict_arguments import ArgumentError, parse_strict, validate_arguments

T = ReasonCode.TRUNCATED_ARGUMENTS
INVALID = ReasonCode.INVALID_ARGUMENTS_JSON

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(max_size=6), VALUES, max_size=5)


@st.composite
def object_texts(draw: st.DrawFn) -> tuple[dict[str, object], str]:
    """A JSON object and one of its many spellings (separators, indentation, escaping)."""
    value = draw(OBJECTS)
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    indent = draw(st.sampled_from([None, 0, 2]))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), separators=separators, indent=indent)
    return value, draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", " \r\n"]))


@given(object_texts())
@example(({"n": None}, '{"n": null}'))
@example(({"t": True, "f": 1.5e-3}, '{"t": true, "f": 1.5e-3}'))
@example(({"a": "\U0001f600"}, '{"a": "\\ud83d\\ude00"}'))
def test_every_proper_prefix_of_an_object_is_truncated(case: tuple[dict[str, object], str]) -> None:
    value, text = case
    parsed = parse_json_object(text)
    assert parsed == JsonObject(value, digest_of(value))
    for cut in range(len(text)):
        prefix = text[:cut]
        if not text[cut:].strip():
            continue  # only trailing blanks are missing: the prefix is the whole object
        outcome = parse_json_object(prefix)
        assert isinstance(outcome, JsonRefusal), prefix
        assert outcome.reason == T, (prefix, outcome.detail)
        assert json_prefix(prefix) is Prefix.PROPER


@pytest.mark.parametrize(
    "text",
    ['{"n": nu', "1.", "tr", '{"a": 1.', '"abc', "", " ", "{", '{"a"', '{"a":', '{"a": -', '{"a": 1e+',
     '{"a": "\\u12', '{"a": "\\', '{"a": fals', '[{"a": [1, {"b"', '{"a": 1, "a": 2'],
)  # fmt: skip
def test_cut_inside_a_literal_or_anywhere_is_truncated(text: str) -> None:
    outcome = parse_json_object(text)
    assert isinstance(outcome, JsonRefusal)
    assert outcome.reason == T


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": 1, "b": 2, "b": 3}', "duplicate key 'b'"),
        ('{"' + "k" * 300 + '": 1, "' + "k" * 300 + '": 2}', ("duplicate key '" + "k" * 300)[:200]),
        ('{"x": 1' + "0" * 60 + "e400}", "number 1" + "0" * 39 + " overflows a double"),
        ('{"a": 1} x', "Extra data at 9 of 10"),
        ('{"a": {"b": [1, {"c": 0, "c": 0}]}}', "duplicate key 'c'"),
        ('{"n": 18446744073709551616}', "not canonicalizable: Integer exceeds 64-bit range"),
        ('{"n": -9223372036854775809}', "not canonicalizable: Integer exceeds 64-bit range"),
        ('{"x": 1e400}', "number 1e400 overflows a double"),
        ('{"x": NaN}', "NaN is not JSON"),
        ('{"x": -Infinity}', "-Infinity is not JSON"),
        ('{"s": "\\ud800"}', "not canonicalizable: str is not valid UTF-8: surrogates not allowed"),
        ("[1]", "arguments are a list, not an object"),
        ("1", "arguments are a int, not an object"),
    ],
)
def test_what_no_continuation_makes_valid_is_invalid(text: str, detail: str) -> None:
    assert parse_json_object(text) == JsonRefusal(INVALID, detail)


@pytest.mark.parametrize(
    "text",
    ['{"a": 1} x', '{"a": 1}{', '{"a": 01}', '{"a": 1,}', '{"a": Na', '{"a": tx', '{"a": "x\ny"}', "{,"],
)
def test_syntax_errors_before_the_end_are_invalid(text: str) -> None:
    """(The details are the standard library's messages, which vary between Python versions.)"""
    outcome = parse_json_object(text)
    assert isinstance(outcome, JsonRefusal)
    assert (outcome.reason, json_prefix(text)) == (INVALID, Prefix.NONE)


def test_nesting_beyond_the_recursion_limit_is_invalid_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert json_prefix(deep) is Prefix.COMPLETE  # the scanner is iterative
    assert parse_json_object('{"a": ' + deep + "}") == JsonRefusal(
        INVALID, "nested deeper than the parser's recursion limit"
    )


JSONISH = st.text(alphabet='{}[]":,. -+0123456789eEtrufalsn\\u\n ab', max_size=24)


@given(JSONISH)
@example('{"a": 1}')
@example("[1, 2")
def test_the_prefix_scanner_agrees_with_the_decoder(text: str) -> None:
    """A whole text for the scanner is one the decoder reads, and the other way round; a text the
    decoder reads is never PROPER nor NONE."""
    try:
        json.loads(text)
        decodes = True
    except json.JSONDecodeError:
        decodes = False
    except (ValueError, RecursionError):
        decodes = True  # the decoder read it (and a hook of ours, or its limits, refused it)
    assert (json_prefix(text) is Prefix.COMPLETE) == decodes
    if json_prefix(text) is Prefix.PROPER:
        outcome = parse_json_object(text)
        assert isinstance(outcome, JsonRefusal) and outcome.reason == T


def _stream_verdict(text: str) -> str | ReasonCode:
    try:
        return validate_arguments(text, {"type": "object"}).digest
    except ArgumentError as exc:
        return exc.reason


def _validator_verdict(text: str) -> str | ReasonCode:
    verdict = argument_verdict(text)
    return verdict.reason if isinstance(verdict, JsonRefusal) else verdict


@given(JSONISH | object_texts().map(lambda case: case[1]))
@example('{"a": 1, "a": 2}')
@example('{"n": 18446744073709551616}')
@example('{"n": 18446744073709551617}')
@example('{"n": nu')
@example('{"s": "\\ud800"}')
def test_the_stream_path_and_the_validator_agree(text: str) -> None:
    assert _stream_verdict(text) == _validator_verdict(text)
    digest = argument_digest_of(text)
    try:
        assert digest_of(parse_strict(text)) == digest
    except ArgumentError:
        assert digest is None


def test_two_integers_beyond_64_bits_are_refused_by_both_paths() -> None:
    """Before, the validator read both with orjson as one float, so both texts had one digest."""
    for text in ('{"n": 18446744073709551616}', '{"n": 18446744073709551617}'):
        assert _stream_verdict(text) == _validator_verdict(text) == INVALID


def test_accepted_arguments_keep_the_digest_orjson_gave_them() -> None:
    """Digests of arguments valid before must not move (manifests and results are matched by them)."""
    import orjson

    for text in ('{"q": "x"}', '{"b": [1, 2.5, -0.0, 1E2, 18446744073709551615], "a": {"z": null}}'):
        assert argument_digest_of(text) == digest_of(orjson.loads(text))


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        (" 12", Prefix.COMPLETE),  # a whole token after blanks
        ('\n\t"s" ', Prefix.COMPLETE),
        ("[1}", Prefix.NONE),  # a value followed by the other container's closer
        ('{"a": [1}', Prefix.NONE),  # the same inside an object: not a cut stream
        ('{"a": 1]', Prefix.NONE),
        ('{"a": X', Prefix.NONE),  # no value starts with X
        ('{"a": [X', Prefix.NONE),
    ],
)
def test_what_the_scanner_calls_whole_or_neither(text: str, prefix: Prefix) -> None:
    """None of them is a cut stream: each is refused as INVALID_ARGUMENTS_JSON (the whole ones are not
    objects), never as TRUNCATED_ARGUMENTS."""
    assert json_prefix(text) is prefix
    outcome = parse_json_object(text)
    assert isinstance(outcome, JsonRefusal) and outcome.reason == INVALID
