"""Which tool-call ids an API accepts, and the deterministic id sent for one it would refuse.

A conversation can move between providers, so a call id in the graph may have been
minted by another API (`call_…` from OpenAI, `toolu_…` from Anthropic, `tooluse_…`
from Bedrock, or our own `gemini:<response>:<block>` for a Gemini call without one).
Each API states what it accepts as an `IdRule`; `wire_call_id` keeps an id the rule
accepts and replaces any other by `mapped_prefix + sha256(id)[:hash_chars]`, on the call
and on its result alike, so results still pair with their calls.

Unique within a request by construction: a kept id never starts with `mapped_prefix`
(an id that does is mapped too), so a kept id never equals a mapped one; two kept ids
are the graph's own distinct ids; two mapped ids collide only if SHA-256 prefixes do.
`omit_prefix` names ids that must not be sent at all (the API pairs by position):
`wire_call_id` returns None for them.

Rules are data: an adapter's rules table holds its rule (a field the table's `as_data()`
includes), so a change of rule changes the adapter digest and needs a new adapter version.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class IdRule:
    """What an API accepts as a call id; `pattern` is matched in full, `max_length` None: no limit."""

    pattern: str = r"[\s\S]+"
    max_length: int | None = None
    mapped_prefix: str = "tl_"
    hash_chars: int = 32
    omit_prefix: str | None = None

    def __post_init__(self) -> None:
        mapped = self.mapped_prefix + "0" * self.hash_chars
        if not re.fullmatch(self.pattern, mapped) or (
            self.max_length is not None and len(mapped) > self.max_length
        ):
            raise ValueError(f"mapped ids ({self.mapped_prefix}<{self.hash_chars} hex>) break their own rule")

    @cached_property
    def _compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern)

    def accepts(self, call_id: str) -> bool:
        """Would the API take this id as it is?"""
        if self.max_length is not None and len(call_id) > self.max_length:
            return False
        return self._compiled.fullmatch(call_id) is not None


def wire_call_id(rule: IdRule, call_id: str | None) -> str | None:
    """The id to send for this graph call id: itself, a stable mapped id, or None (send no id)."""
    value = call_id or ""
    if rule.omit_prefix is not None and value.startswith(rule.omit_prefix):
        return None
    if value and not value.startswith(rule.mapped_prefix) and rule.accepts(value):
        return value
    return rule.mapped_prefix + hashlib.sha256(value.encode("utf-8")).hexdigest()[: rule.hash_chars]
