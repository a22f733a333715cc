"""The POST bodies of the serve API (`…/turns`, `…/dispatch`, `…/cancel`), read strictly: this is a
public boundary, and a body read loosely loses what the client meant without a word (an
`expectedRevision` of "3", or one misspelt `expected_revision`, would drop the turn's compare-and-set
on the revision). Every field has its JSON type exactly (no "3" for 3, no 3.0 or true for an integer,
no object taken for its text), no field is unknown, and a field left out or null takes its default.
A body that breaks any of it is a `RequestBodyError` naming each field and what it takes, in one line.

The integers are bounded above by the Avro `long` they are sent as (`_schemas/`): a larger one could
not be encoded. A dispatch's `policy` is a JSON object passed on as it is: what its values may be is the
gateway client's to judge (`request_dispatch`: what canonical JSON writes, and no policy the adapter's
provider is sure to refuse), but how deep it nests is bounded here (`POLICY_DEPTH_MAX`): unbounded, a
policy past canonical JSON's 254 levels was an encoder refusal, and one past about 1,000 the client's
check running out of Python's stack, both a 500.

The ids and names are free text, as everywhere in the ledger (the processor rejects an
adapter or a model it does not know, UNKNOWN_ADAPTER or UNKNOWN_MODEL), but never empty: an empty
string is refused, not taken for a field left out.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails, PydanticCustomError

from turnledger.errors import QueryParameterError, RequestBodyError
from turnledger.model.limits import AVRO_LONG_MAX, JSON_NESTING_MAX, is_blank, json_nesting

LISTED_AT_MOST = 1000
"""The most conversations one listing returns, whatever its `limit` asks."""
LISTED_BY_DEFAULT = 200
SHOWN_CHARS = 40
"""How much of a refused value its message repeats (a refused text may be long)."""


def _non_blank(text: str) -> str:
    if is_blank(text):  # the ledger's own test: it refuses blank user text (MALFORMED_BLOCK)
        raise PydanticCustomError("blank", "holds only blanks")
    return text


Text = Annotated[StrictStr, AfterValidator(_non_blank)]
Name = Annotated[StrictStr, Field(min_length=1)]
Revision = Annotated[StrictInt, Field(ge=0, le=AVRO_LONG_MAX)]
Tokens = Annotated[StrictInt, Field(ge=1, le=AVRO_LONG_MAX)]

POLICY_DEPTH_MAX = JSON_NESTING_MAX
"""How deep a dispatch's policy may nest objects and arrays: the ledger's bound (`model/limits.py`)."""

nesting = json_nesting


def _shallow(policy: dict[str, Any]) -> dict[str, Any]:
    depth = nesting(policy)
    if depth > POLICY_DEPTH_MAX:
        raise PydanticCustomError(
            "too_deep",
            "must nest objects and arrays at most {most} levels deep, not {depth}",
            {"most": POLICY_DEPTH_MAX, "depth": depth},
        )
    return policy


Policy = Annotated[dict[str, Any], AfterValidator(_shallow)]


class Body(BaseModel):
    """A request body: its fields by their camelCase names only, of their JSON types only."""

    model_config = ConfigDict(strict=True, extra="forbid", alias_generator=to_camel, frozen=True)


class TurnBody(Body):
    text: Text
    expected_revision: Revision | None = None
    """The revision the client saw: the ledger refuses the turn if the conversation moved on."""


class DispatchBody(Body):
    """What is left out (or null) is `serve`'s default (`DispatchDefaults`)."""

    adapter: Name | None = None
    provider: Name | None = None
    model_revision: Name | None = None
    max_output_tokens: Tokens | None = None
    operation_id: Name | None = None
    policy: Policy | None = None
    """Sampling and thinking (`temperature`, Anthropic's `thinking`, ...), as the adapter sends them;
    None: none. The client adds the adapter's stream policy under it (`streaming_policy`)."""


class CancelBody(Body):
    operation_id: Name | None = None
    """None: every open operation of the conversation."""
    reason: Name | None = None


B = TypeVar("B", bound=Body)


def read_body(model: type[B], raw: bytes) -> B:
    """The body `raw` holds (an empty one is `{}`), or `RequestBodyError`; JSON that does not parse
    raises `orjson.JSONDecodeError`."""
    value = orjson.loads(raw) if raw else {}
    if not isinstance(value, dict):
        raise RequestBodyError("the body must be a JSON object")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        fields = ", ".join(str(info.alias) for info in model.model_fields.values())
        raise RequestBodyError("; ".join(_problem(e, fields) for e in exc.errors())) from None


EXPECTED = {
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "dict_type": "must be a JSON object",
    "string_too_short": "must be a non-empty string",
    "blank": "must be a string with a character that is not blank",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
}
"""What a field must be, by pydantic's error type; any other type is told in pydantic's words."""
UNSHOWN = {"missing", "too_deep"}
"""The error types told without the value: none was given, or it nests deeper than JSON is written
(its words say how deep)."""


def _problem(error: ErrorDetails, fields: str) -> str:
    field = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{field!r} is not a field of this body (its fields: {fields})"
    expected = EXPECTED.get(error["type"])
    what = expected.format(**error.get("ctx", {})) if expected else error["msg"]
    if error["type"] in UNSHOWN:
        return f"{field!r} {what}"
    return f"{field!r} {what}, not {_shown(error['input'])}"


def _shown(value: Any) -> str:
    shown = orjson.dumps(value).decode()
    return shown if len(shown) <= SHOWN_CHARS else shown[: SHOWN_CHARS - 1] + "…"


def listing_limit(given: str | None) -> int:
    """The listing's `limit` query parameter: how many of the newest conversations to return, a whole
    number from 1, at most `LISTED_AT_MOST` (a larger one is cut to it). Refused below 1: Redis reads
    `ZREVRANGE key 0 -1` as the whole set, so a limit of 0 listed every conversation the projection
    holds, past the bound."""
    if given is None:
        return LISTED_BY_DEFAULT
    if not given.isascii() or not given.isdigit() or int(given) < 1:
        shown = given if len(given) <= SHOWN_CHARS else given[:SHOWN_CHARS] + "…"
        raise QueryParameterError(f"'limit' must be a whole number from 1, not {shown!r}")
    return min(int(given), LISTED_AT_MOST)
