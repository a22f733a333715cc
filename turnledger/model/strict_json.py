"""The one strict JSON parse of tool-call arguments, shared by the stream path and the validator.

`parse_json_object(text)` is a `JsonObject` (the value and its canonical digest) or a
`JsonRefusal` with a reason code:

- `TRUNCATED_ARGUMENTS` when the text is a proper prefix of some JSON text (`json_prefix`):
  a cut stream or an output limit, wherever the cut falls (inside a string, a number,
  a literal such as `nu` or `tr`, between tokens, or nothing at all);
- `INVALID_ARGUMENTS_JSON` for everything else that is not a strict JSON object:
  syntax errors and trailing data; NaN and Infinity; numbers that overflow a double
  (`1e400` would become infinity, which canonical JSON writes as null); duplicate object
  keys at any depth (parsers disagree on which value wins, so the tool could run other
  arguments than the ones digested); a document that is not an object; and values with
  no canonical JSON (integers beyond 64 bits, lone surrogates), whose digest could not
  tell two different texts apart.

Which texts are accepted, and their values, are the same as orjson's for every text
that passes (so digests of arguments accepted before stay the same); the parse itself
is the standard library's decoder with hooks, since orjson can refuse neither duplicate
keys nor integers beyond 64 bits (it turns them into floats).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from turnledger.model.canonical import CanonicalJsonError, digest_of
from turnledger.model.reasons import ReasonCode

__all__ = ["JsonObject", "JsonRefusal", "Prefix", "json_prefix", "parse_json_object"]


@dataclass(frozen=True, slots=True)
class JsonObject:
    value: dict[str, Any]
    digest: str


@dataclass(frozen=True, slots=True)
class JsonRefusal:
    reason: ReasonCode
    detail: str


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} overflows a double")
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return result


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicate_keys, parse_constant=_refuse_constant, parse_float=_finite_float
)


def parse_json_object(text: str) -> JsonObject | JsonRefusal:
    """Strictly parse tool-call arguments; see the module docstring for what is refused and why."""
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        if json_prefix(text) is Prefix.PROPER:
            return JsonRefusal(ReasonCode.TRUNCATED_ARGUMENTS, f"cut at {len(text)}: {exc.msg} at {exc.pos}")
        return JsonRefusal(ReasonCode.INVALID_ARGUMENTS_JSON, f"{exc.msg} at {exc.pos} of {len(text)}")
    except ValueError as exc:  # the hooks, or int() beyond its digit limit
        return JsonRefusal(ReasonCode.INVALID_ARGUMENTS_JSON, str(exc)[:200])
    except RecursionError:
        return JsonRefusal(
            ReasonCode.INVALID_ARGUMENTS_JSON, "nested deeper than the parser's recursion limit"
        )
    if not isinstance(value, dict):
        return JsonRefusal(
            ReasonCode.INVALID_ARGUMENTS_JSON, f"arguments are a {type(value).__name__}, not an object"
        )
    try:
        return JsonObject(value, digest_of(value))
    except CanonicalJsonError as exc:
        return JsonRefusal(ReasonCode.INVALID_ARGUMENTS_JSON, f"not canonicalizable: {exc}")


# -- is a text a prefix of some JSON text? ----------------------------------------------------


class Prefix(Enum):
    COMPLETE = "complete"  # one whole JSON text (maybe still extendable, as `1` is to `12`)
    PROPER = "proper"  # a proper prefix of some JSON text, not a whole one
    NONE = "none"  # no JSON text starts with it


_WS = re.compile(r"[ \t\n\r]*")
_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
_STRING = re.compile(rf'"{_CHAR}*"')
_STRING_PREFIX = re.compile(rf'"{_CHAR}*(?:\\(?:u[0-9a-fA-F]{{0,3}})?)?')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?")
_LITERALS = ("true", "false", "null")


class _Expect(Enum):
    VALUE = "value"  # a value (after `:`, `,` in an array, or at the top)
    VALUE_OR_CLOSE = "value or ]"  # just after `[`
    KEY = "key"  # a key (after `,` in an object)
    KEY_OR_CLOSE = "key or }"  # just after `{`
    COLON = ":"
    AFTER = "after a value"  # `,`, a closing bracket, or the end


@dataclass(slots=True)
class _Scan:
    text: str
    pos: int = 0
    expect: _Expect = _Expect.VALUE
    stack: str = ""  # open containers, innermost last: "{" or "["

    def token(self, full: re.Pattern[str], prefix: re.Pattern[str]) -> Prefix | None:
        """Consume one token; PROPER when the rest of the text is a cut token, NONE when no token."""
        rest = prefix.fullmatch(self.text, self.pos)
        if rest is not None and not full.fullmatch(self.text, self.pos):
            return Prefix.PROPER
        match = full.match(self.text, self.pos)
        if match is None:
            return Prefix.NONE
        self.pos = match.end()
        return None


def _value(scan: _Scan, char: str) -> Prefix | None:
    if char in "{[":
        scan.stack += char
        scan.pos += 1
        scan.expect = _Expect.KEY_OR_CLOSE if char == "{" else _Expect.VALUE_OR_CLOSE
        return None
    if char == '"':
        outcome = scan.token(_STRING, _STRING_PREFIX)
    elif char in "-0123456789":
        outcome = scan.token(_NUMBER, _NUMBER_PREFIX)
    else:
        outcome = _literal(scan)
    scan.expect = _Expect.AFTER
    return outcome


def _literal(scan: _Scan) -> Prefix | None:
    rest = scan.text[scan.pos : scan.pos + 5]
    for literal in _LITERALS:
        if rest.startswith(literal):
            scan.pos += len(literal)
            return None
        if literal.startswith(rest) and scan.pos + len(rest) == len(scan.text):
            return Prefix.PROPER
    return Prefix.NONE


def _value_or_close(scan: _Scan, char: str) -> Prefix | None:
    return _close(scan) if char == "]" else _value(scan, char)


def _key(scan: _Scan, char: str) -> Prefix | None:
    if char != '"':
        return Prefix.NONE
    scan.expect = _Expect.COLON
    return scan.token(_STRING, _STRING_PREFIX)


def _key_or_close(scan: _Scan, char: str) -> Prefix | None:
    return _close(scan) if char == "}" else _key(scan, char)


def _colon(scan: _Scan, char: str) -> Prefix | None:
    if char != ":":
        return Prefix.NONE
    scan.pos += 1
    scan.expect = _Expect.VALUE
    return None


_AFTER_COMMA = {"{": _Expect.KEY, "[": _Expect.VALUE}
_CLOSER = {"{": "}", "[": "]"}


def _after(scan: _Scan, char: str) -> Prefix | None:
    if not scan.stack:
        return Prefix.NONE  # data after the whole text
    inner = scan.stack[-1]
    if char == ",":
        scan.pos += 1
        scan.expect = _AFTER_COMMA[inner]
        return None
    return _close(scan) if char == _CLOSER[inner] else Prefix.NONE


def _close(scan: _Scan) -> Prefix | None:
    scan.stack = scan.stack[:-1]
    scan.pos += 1
    scan.expect = _Expect.AFTER
    return None


_STEPS: Mapping[_Expect, Callable[[_Scan, str], Prefix | None]] = {
    _Expect.VALUE: _value,
    _Expect.VALUE_OR_CLOSE: _value_or_close,
    _Expect.KEY: _key,
    _Expect.KEY_OR_CLOSE: _key_or_close,
    _Expect.COLON: _colon,
    _Expect.AFTER: _after,
}
"""What the scanner does with the next non-blank character, by what it expects there."""


def json_prefix(text: str) -> Prefix:
    """Whether `text` is a whole JSON text, a proper prefix of one, or neither (RFC 8259 syntax only:
    duplicate keys and number ranges are the parser's business). Iterative, so nesting depth is free."""
    scan = _Scan(text)
    while True:
        blank = _WS.match(text, scan.pos)
        assert blank is not None  # it matches the empty string
        scan.pos = blank.end()
        if scan.pos == len(text):
            done = scan.expect is _Expect.AFTER and not scan.stack
            return Prefix.COMPLETE if done else Prefix.PROPER
        outcome = _STEPS[scan.expect](scan, text[scan.pos])
        if outcome is not None:
            return outcome
