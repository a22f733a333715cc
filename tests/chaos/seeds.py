"""The seeds of a chaos run: the fake provider's (answers and faults), the fault schedule's and the driver's.

Unset, `TURNLEDGER_CHAOS_SEED` leaves the run CI has always made (3, 5, 11). Set to an integer N, the three
are drawn from `random.Random(N)`, so that one number names a whole other run and a failing one can be
run again as it was.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

SEED_ENV = "TURNLEDGER_CHAOS_SEED"


@dataclass(frozen=True)
class ChaosSeeds:
    provider: int
    schedule: int
    driver: int


DEFAULT_SEEDS = ChaosSeeds(provider=3, schedule=5, driver=11)


def chaos_seeds(env: Mapping[str, str]) -> ChaosSeeds:
    """The seeds `env` asks for; a value that is not an integer is refused (ValueError), not ignored."""
    raw = env.get(SEED_ENV, "").strip()
    if not raw:
        return DEFAULT_SEEDS
    rng = random.Random(int(raw))
    return ChaosSeeds(*(rng.randrange(2**31) for _ in range(3)))
