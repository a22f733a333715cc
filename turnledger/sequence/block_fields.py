"""A committed block built from plain field values without validating them again.

Every block of every turn is built from a submitted block's fields (`builder.committed_block`):
`Block(**fields)` validated values a `SubmittedBlock` or the assembler had already typed, then a
copy added the content digest, ~5 µs a block of which the validation and the copy were ~4 (issue
20). `plain_block` builds the instance `Block(**fields)` builds, with the digest (and schema
digest) in it, when validation could neither refuse nor change a value:

- every key is a field of `Block` and every required field is given;
- every value is of exactly its field's type (`str` or `int`, or None where the field is
  optional); a `str` subclass (a `StrEnum` member) becomes the plain `str` validation makes of it;
  anything else (a bool for an int, a float, a str for an int...) is left to validation;
- the sharing validators (`model.base.SHARING`: role, kind, trust label, status) are applied to
  the values given, as validation applies them; a default is left as it is (pydantic does not
  validate defaults);
- the fields-set is the names given (with the digest, as the copy added it).

Otherwise it returns None and the caller validates. The table of field types is read from `Block`
itself; a field of another annotation, a validator other than the sharing ones, or any other
hook disables this path (`PLAN is None`), which `tests/unit/sequence/test_block_fields.py` fails
on, as it fails when a block built here differs from its validated twin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from turnledger.model.base import SET_DICT, SET_EXTRA, SET_FIELDS, SET_PRIVATE, SHARING, shared_fields_set
from turnledger.model.graph import Block

_NONE = type(None)


class _Plan:
    """What building a `Block` without validation needs: the fields in order with their defaults,
    each field's type and whether it takes None, the required names, the sharing validators."""

    def __init__(self) -> None:
        self.defaults: dict[str, Any] = {}
        self.types: dict[str, tuple[type, bool]] = {}
        self.required: frozenset[str] = frozenset()
        self.shares: dict[str, Callable[[Any], Any]] = {}


def _plan_of(model: type[Block]) -> _Plan | None:
    decorators = model.__pydantic_decorators__
    if decorators.validators or decorators.root_validators or decorators.model_validators:
        return None
    if decorators.field_serializers or model.__private_attributes__ or model.__pydantic_root_model__:
        return None
    plan = _Plan()
    for decorator in decorators.field_validators.values():
        if decorator.info.mode != "after" or decorator.func not in SHARING:
            return None
        for name in decorator.info.fields:
            if name in plan.shares:
                return None
            plan.shares[name] = decorator.func
    required = set()
    for name, info in model.model_fields.items():
        if info.metadata or info.default_factory is not None:
            return None
        kind = _TYPES.get(info.annotation)
        if kind is None:
            return None
        plan.types[name] = kind
        if info.is_required():
            required.add(name)
            plan.defaults[name] = None
        else:
            plan.defaults[name] = info.default
    plan.required = frozenset(required)
    return plan


_TYPES: Mapping[Any, tuple[type, bool]] = {
    str: (str, False),
    int: (int, False),
    str | None: (str, True),
    int | None: (int, True),
}

PLAN = _plan_of(Block)


def plain_values(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The values of `Block(**fields)` in field order (defaults where not given), or None when
    validation could refuse or change one (the module docstring)."""
    plan = PLAN
    if plan is None or not plan.required <= fields.keys():
        return None
    values = dict(plan.defaults)
    types = plan.types
    for name, value in fields.items():
        expected = types.get(name)
        if expected is None:
            return None
        kind = type(value)
        if kind is not expected[0]:
            if value is None and expected[1]:
                pass
            elif expected[0] is str and isinstance(value, str):
                value = str.__str__(value)
            else:
                return None
        values[name] = value
    for name, share in plan.shares.items():
        if name in fields and values[name] is not None:
            values[name] = share(values[name])
    return values


def plain_block(values: dict[str, Any], given: set[str]) -> Block:
    """The `Block` of `values` (from `plain_values`, perhaps with a digest added) whose fields-set
    is `given`, without validation."""
    block = Block.__new__(Block)
    SET_DICT(block, values)
    SET_FIELDS(block, shared_fields_set(given))
    SET_EXTRA(block, None)
    SET_PRIVATE(block, None)
    return block
