"""How many decoded states each partition's engine keeps: `turnledger process --state-cache-size`, or
$TURNLEDGER_STATE_CACHE_SIZE (the flag writes the variable, so the default fold and the children of
`--processes` read the same)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from turnledger.dispatch.cache_sizes import STATE_CACHE_SIZE
from turnledger.errors import ProcessorError
from turnledger.processors.env_int import parse_env_int

STATE_CACHE_ENV = "TURNLEDGER_STATE_CACHE_SIZE"


class StateCacheConfigError(ProcessorError, ValueError):
    """TURNLEDGER_STATE_CACHE_SIZE that is not a non-negative integer."""


def load_state_cache_size(environ: Mapping[str, str] | None = None) -> int:
    """Decoded states each partition's engine keeps: $TURNLEDGER_STATE_CACHE_SIZE, else the engine's
    default (`STATE_CACHE_SIZE`, where the memory/CPU trade-off is measured). No output depends on
    it, so a replay need not use the processor's."""
    raw = (os.environ if environ is None else environ).get(STATE_CACHE_ENV, "").strip()
    if not raw:
        return STATE_CACHE_SIZE
    return parse_env_int(STATE_CACHE_ENV, raw, 0, StateCacheConfigError)
