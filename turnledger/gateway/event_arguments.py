"""The rules an argument of the gateway client's event builders must keep, checked before an event is built.

A caller's mistake must reach neither the ledger as something else nor the caller as an implementation
type. Unchecked, an empty `turn_id` or `operation_id` was replaced by a fresh one, `"3"`, `3.0` or
`True` was taken for an integer and `stream="no"` for True, NaN in a policy went out as null; a value
of another type escaped as pydantic's ValidationError, an AttributeError or a TypeError; and a
`max_output_tokens` of 0 or a negative `settle_within_ms` reached the ledger, which prepares a
manifest with it. The worker's builders (`WorkerEvents`) took a lease of 0 ms, a generation of 0, a
negative delta sequence and an empty list of deltas, and `"3"` for 3, as pydantic's lax mode does.
Each builder lists its arguments with a `Check` each; an argument that breaks its check is an
`EventArgumentError` naming the method, the argument (a path into it: `tools[1].name`,
`policy['temperature']`), what it must be and what it was. Nothing is built, nothing sent.

What only the ledger knows stays the ledger's: an adapter or a model it does not know
(UNKNOWN_ADAPTER, UNKNOWN_MODEL), a turn id or operation id it already has (DUPLICATE_TURN,
DUPLICATE_OPERATION), a result for a call it never emitted (ORPHANED_RESULT), a revision that moved on
(CAS_REVISION_MISMATCH), a generation that is not the attempt's (STALE_GENERATION), a delta of another
handle or generation (FOREIGN_HANDLE, quarantined): such events are sent, and refused on
`turnledger.rejections` (or kept on `turnledger.quarantine`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pydantic_core import ErrorDetails

from turnledger.errors import GatewayError
from turnledger.model.limits import AVRO_LONG_MAX, JSON_NESTING_MAX, is_blank, json_nesting

JSON_INTEGERS = range(-(2**63), 2**64)
"""The integers canonical JSON (orjson) writes; it refuses any other."""
PROBLEMS_SHOWN = 5
SHOWN_CHARS = 40
"""How much of a refused value a problem repeats (a refused text may be long)."""

Check = Callable[[str, Any], Iterator[str]]
"""Given an argument's name (or path) and its value, what is wrong with it: one line per problem."""


class EventArgumentError(GatewayError, ValueError):
    """Arguments a client method cannot build a valid event from. Nothing was built or sent.
    `problems` says of each refused argument what it must be and what it was given."""

    def __init__(self, method: str, problems: Iterable[str]) -> None:
        self.method = method
        self.problems = tuple(problems)
        shown = self.problems[:PROBLEMS_SHOWN]
        more = len(self.problems) - len(shown)
        tail = f"; and {more} more" if more else ""
        super().__init__(f"{method}: nothing sent: {'; '.join(shown)}{tail}")


def shown(value: Any) -> str:
    """The value as the problem repeats it: its repr, cut to `SHOWN_CHARS`."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def refuse_bad_arguments(method: str, arguments: Iterable[tuple[str, Check, Any]]) -> None:
    """Raise `EventArgumentError` naming every argument, of (name, check, value), its check refuses."""
    problems = [problem for name, check, value in arguments for problem in check(name, value)]
    if problems:
        raise EventArgumentError(method, problems)


def pydantic_problem(error: ErrorDetails) -> str:
    """A field pydantic refused, in its words: for `EventFactory.build`, whose fields have no rules
    here, so that its ValidationError does not escape it."""
    field = ".".join(str(part) for part in error["loc"])
    return f"{field}: {error['msg']}, not {shown(error['input'])}"


def rule(must_be: str, accepts: Callable[[Any], bool]) -> Check:
    """The check of a value `accepts` tells good or bad, `must_be` saying what good is."""

    def check(name: str, value: Any) -> Iterator[str]:
        if not accepts(value):
            yield f"{name} must be {must_be}, not {shown(value)}"

    return check


def or_none(check: Check) -> Check:
    """`check`, or None for a value left out."""

    def either(name: str, value: Any) -> Iterator[str]:
        if value is not None:
            yield from check(name, value)

    return either


def whole_number(low: int, high: int = AVRO_LONG_MAX) -> Check:
    """An int from `low` to `high` (not a bool, a float or a numeric string)."""
    return rule(f"an integer from {low} to {high}", lambda v: type(v) is int and low <= v <= high)


def each(check: Check) -> Check:
    """`check` on every item of a list or tuple, each named by its index."""

    def every(name: str, value: Any) -> Iterator[str]:
        for index, item in enumerate(value):
            yield from check(f"{name}[{index}]", item)

    return every


def _non_blank(value: Any) -> bool:
    return isinstance(value, str) and not is_blank(value)


NAME = rule("a string that is not empty or blank", _non_blank)
"""Ids and names, and the user's text: an empty or blank one is a mistake, never a value meant (and
blank user text is what the ledger refuses, MALFORMED_BLOCK: `is_blank` is the validator's)."""
TEXT = rule("a string", lambda v: isinstance(v, str))
FLAG = rule("True or False", lambda v: type(v) is bool)


def one_of(values: Iterable[str], *, called: str | None = None) -> Check:
    """A string among `values`; the problem lists them, or says `called` when they are too many."""
    allowed = sorted(values)
    must_be = called if called is not None else f"one of {', '.join(allowed)}"
    return rule(must_be, lambda v: isinstance(v, str) and v in allowed)


def span_after(occurred_at_ms: int, *, ends: str, of: str) -> Check:
    """Milliseconds after an event's time (`of`'s), from 1, the end they make (`ends`) an Avro long."""
    high = AVRO_LONG_MAX - occurred_at_ms
    return rule(
        f"an integer from 1 to {high} (the {of} time, {occurred_at_ms} ms, plus it is {ends}, an Avro long)",
        lambda v: type(v) is int and 1 <= v <= high,
    )


def json_value(name: str, value: Any) -> Iterator[str]:
    """What keeps `value` from being written as canonical JSON that reads back as the same value:
    orjson refuses a set or an object, and writes NaN and the infinities as null."""
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        if value not in JSON_INTEGERS:
            low, high = JSON_INTEGERS.start, JSON_INTEGERS.stop - 1
            yield f"{name} must be an integer from {low} to {high}, not {shown(value)}"
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield f"{name} must be a finite number (JSON has no NaN or infinity), not {value!r}"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield from json_value(f"{name}[{key!r}]", item)
            else:
                yield f"{name} must have string keys, not {shown(key)}"
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from json_value(f"{name}[{index}]", item)
    else:
        yield (
            f"{name} must be JSON (a dict with string keys, a list, a string, a finite number, a bool "
            f"or None), not {type(value).__name__} {shown(value)}"
        )


def json_object(name: str, value: Any) -> Iterator[str]:
    """A dict (a Mapping) with string keys whose values are JSON (`json_value`), nesting at most
    `JSON_NESTING_MAX` levels (the ledger's bound; checked first, without recursion)."""
    if not isinstance(value, Mapping):
        yield f"{name} must be a dict, not {shown(value)}"
        return
    depth = json_nesting(value)
    if depth > JSON_NESTING_MAX:
        yield f"{name} must nest dicts and lists at most {JSON_NESTING_MAX} levels deep, not {depth}"
        return
    yield from json_value(name, value)


def sequence_of(
    cls: type, *, fields: Mapping[str, Check], unique: str | None = None, non_empty: bool = False
) -> Check:
    """A list or tuple of `cls` instances, each attribute in `fields` keeping its check, no two
    with the same `unique` attribute (when one is named)."""
    what = f"a {'non-empty ' if non_empty else ''}list or tuple of {cls.__name__}"

    def check(name: str, value: Any) -> Iterator[str]:
        if not isinstance(value, list | tuple) or (non_empty and not value):
            yield f"{name} must be {what}, not {shown(value)}"
            return
        first: dict[Any, int] = {}
        for index, item in enumerate(value):
            where = f"{name}[{index}]"
            if not isinstance(item, cls):
                yield f"{where} must be a {cls.__name__}, not {type(item).__name__} {shown(item)}"
                continue
            problems = {
                field: list(c(f"{where}.{field}", getattr(item, field))) for field, c in fields.items()
            }
            for field_problems in problems.values():
                yield from field_problems
            if unique is None or problems.get(unique):
                continue
            key = getattr(item, unique)
            if key in first:
                yield f"{where}.{unique} {shown(key)} is also {name}[{first[key]}]'s"
            else:
                first[key] = index

    return check
