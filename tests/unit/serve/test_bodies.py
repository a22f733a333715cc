"""A dispatch body's `policy` as `serve/bodies.py` reads it: an object passed on as it is, or none; how
deep it nests, counted without recursion and bounded. The refusals as the API answers them:
test_app.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from turnledger.errors import RequestBodyError
from turnledger.serve.bodies import POLICY_DEPTH_MAX, DispatchBody, nesting, read_body


@pytest.mark.parametrize(
    ("raw", "policy"),
    [
        (b"{}", None),
        (b'{"policy": null}', None),
        (b'{"policy": {}}', {}),
        (
            b'{"policy": {"temperature": 0.2, "thinking": {"type": "enabled", "budget_tokens": 1024}}}',
            {"temperature": 0.2, "thinking": {"type": "enabled", "budget_tokens": 1024}},
        ),
        (b'{"policy": {"stop": ["a", null, 1, true, {"x": []}]}}', {"stop": ["a", None, 1, True, {"x": []}]}),
    ],
)
def test_a_policy_is_read_as_given_and_null_or_left_out_is_none(raw: bytes, policy: Any) -> None:
    assert read_body(DispatchBody, raw).policy == policy


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b'{"policy": []}', "'policy' must be a JSON object, not []"),
        (b'{"policy": "{}"}', "'policy' must be a JSON object, not \"{}\""),
        (b'{"policy": 1}', "'policy' must be a JSON object, not 1"),
        (b'{"policy": false}', "'policy' must be a JSON object, not false"),
        (
            b'{"policy": {"a": [' + b"[" * 32 + b"]" * 32 + b"]}}",
            "'policy' must nest objects and arrays at most 32 levels deep, not 34",
        ),
        (
            b'{"policy": 5, "maxOutputTokens": 0}',
            "'maxOutputTokens' must be at least 1, not 0; 'policy' must be a JSON object, not 5",
        ),
    ],
)
def test_a_policy_not_an_object_or_too_deep_is_refused_in_one_line(raw: bytes, error: str) -> None:
    with pytest.raises(RequestBodyError) as caught:
        read_body(DispatchBody, raw)
    assert str(caught.value) == error


def test_the_deepest_policy_taken_is_32_levels() -> None:
    assert POLICY_DEPTH_MAX == 32
    raw = b'{"policy": ' + b'{"a": ' * 31 + b"[]" + b"}" * 31 + b"}"
    assert nesting(read_body(DispatchBody, raw).policy) == 32


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        (None, 0),
        ("text", 0),
        (7, 0),
        ({}, 1),
        ([], 1),
        ({"a": 1, "b": "x"}, 1),
        ([1, [2]], 2),
        ({"a": {"b": {}}}, 3),
        ({"a": [{}], "b": [[[[]]]], "c": {}}, 5),  # the deepest branch, wherever it is
        ([[[[]]], {"a": [[]]}], 4),
    ],
)
def test_nesting_is_the_deepest_branchs_count_of_objects_and_arrays(value: Any, depth: int) -> None:
    assert nesting(value) == depth


def test_nesting_counts_past_pythons_stack() -> None:
    value: list[Any] = []
    for _ in range(5000):
        value = [value]
    assert nesting(value) == 5001


def test_a_body_read_is_not_changed_after() -> None:
    body = read_body(DispatchBody, b'{"policy": {"temperature": 0.2}}')
    with pytest.raises(ValidationError, match="Instance is frozen"):
        body.policy = None
    assert body.policy == {"temperature": 0.2}
