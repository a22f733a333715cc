"""A test hook: kill the worker process at a named point, to test the windows between two of its writes.

`TURNLEDGER_TEST_CRASH_AT=journal-handle` makes a worker exit at once (no cleanup, no more events,
exit status `CRASH_EXIT`) the first time it reaches that point: after it journaled a provider
handle and before the HandleBound reached Kafka. `TURNLEDGER_TEST_CRASH_AFTER=N` lets the point
pass N times first. For tests only; unset, nothing happens.
"""

from __future__ import annotations

import os
import sys

from turnledger.errors import GatewayError
from turnledger.gateway.worker_config import CrashHook
from turnledger.processors.env_int import parse_env_int

CRASH_AT_ENV = "TURNLEDGER_TEST_CRASH_AT"
CRASH_AFTER_ENV = "TURNLEDGER_TEST_CRASH_AFTER"
CRASH_EXIT = 86


class CrashPointError(GatewayError, ValueError):
    """TURNLEDGER_TEST_CRASH_AFTER that is not a non-negative integer."""


def crash_hook_from_env(env: dict[str, str] | None = None) -> CrashHook | None:
    env = dict(os.environ) if env is None else env
    point = env.get(CRASH_AT_ENV)
    if not point:
        return None
    remaining = [parse_env_int(CRASH_AFTER_ENV, env.get(CRASH_AFTER_ENV, "0"), 0, CrashPointError)]

    def hook(reached: str) -> None:
        if reached != point:
            return
        if remaining[0] > 0:
            remaining[0] -= 1
            return
        sys.stderr.write(f"turnledger worker: test crash at {point} ({CRASH_AT_ENV})\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT)

    return hook
