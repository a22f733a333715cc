"""Counts of the inputs each fuzz target received, reported at the end of the run (tests/fuzz/conftest.py)."""

from __future__ import annotations

from collections import Counter

INPUTS: Counter[str] = Counter()
"""target name -> inputs it was sent (hypothesis examples, shrinking included)."""

OUTCOMES: Counter[tuple[str, str]] = Counter()
"""(target, outcome) -> how many inputs ended so: the accepted kind or the typed rejection's class/reason."""


def seen(target: str, outcome: str) -> None:
    INPUTS[target] += 1
    OUTCOMES[(target, outcome)] += 1
