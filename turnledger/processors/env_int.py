"""Integer settings read from environment variables, with the errors every such setting gives."""

from __future__ import annotations


def parse_env_int(var: str, raw: str, minimum: int, error: type[Exception]) -> int:
    """`raw`, the value of `var` (`_` separators allowed), as an integer of at least `minimum`; else
    `error` naming the variable and what is wrong with it."""
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise error(f"{var}={raw!r} is not an integer") from None
    if value < minimum:
        raise error(f"{var}={raw!r} must be at least {minimum}")
    return value
