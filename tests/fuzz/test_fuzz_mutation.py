"""The mutation fuzzer (tests/fuzz/mutation.py, targets.py) in CI: a few hundred inputs per target.

`make fuzz` runs the same targets at 100,000 inputs each (`python -m tests.fuzz.run`); here
FUZZ_MUTATIONS inputs per target (default 200; the fold, slower, gets a quarter) keep `make test` fast.
Each input ends in a decoded value or a typed rejection; an oracle's assertion or any other exception
fails the test with the command that replays the input.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.fuzz.mutation import Target, make_input, run_target
from tests.fuzz.support import seen
from tests.fuzz.targets import TARGETS

INPUTS = int(os.environ.get("FUZZ_MUTATIONS", "200"))
SLOW = {"fold interleavings": 4}
CORPUS_OUTCOMES = {
    "avro decode": {"decoded"},
    "sse decoder": {"events"},
    "aws event-stream decoder": {"decoded"},
    "block assembler": {"Complete", "Incomplete PROVIDER_ERROR",
                        "Incomplete OUTPUT_LIMIT_REACHED",  # a call open at the limit; thinking only, cut
                        "Incomplete MISSING_STOP", "Incomplete TRUNCATED_ARGUMENTS",
                        "Incomplete UNKNOWN_KIND",  # redacted reasoning the graph cannot hold
                        "Incomplete PROVIDER_REFUSED"},  # an answer stopped for a refusal
    "fold interleavings": {"promises held"},
}  # fmt: skip
PARSER_OUTCOMES = {"clean", "errors provider"}  # the recorded streams include provider error events


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_mutated_inputs_end_in_a_value_or_a_typed_rejection(name: str) -> None:
    result = run_target(TARGETS[name], max(1, INPUTS // SLOW.get(name, 1)), seed=0)
    for outcome, count in result.outcomes.items():
        for target in TARGETS[name].also_counts_for or (name,):
            for _ in range(count):
                seen(f"{target} (mutation)", outcome)
    assert not result.failures, "\n".join(map(str, result.failures))
    assert not any(o.startswith("FAILED") for o in result.outcomes)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_each_corpus_item_is_accepted_as_it_is(name: str) -> None:
    """The corpus is valid input: unmutated, no item is refused (so mutations start from real input)."""
    target: Target[object] = TARGETS[name]
    outcomes = {target.check(random.Random(0), item) for item in target.corpus()}
    assert outcomes <= CORPUS_OUTCOMES.get(name, PARSER_OUTCOMES), outcomes


def test_an_input_is_made_from_its_seed_and_index_alone() -> None:
    """Replaying input i of a run needs no other input: the same (seed, target, index), the same bytes."""
    from tests.fuzz.mutation import input_rng

    target = TARGETS["sse decoder"]
    corpus = target.corpus()
    first = [make_input(target, corpus, input_rng(7, target.name, i)) for i in range(50)]
    again = [make_input(target, corpus, input_rng(7, target.name, i)) for i in range(49, -1, -1)][::-1]
    assert first == again
    assert len(set(first)) > 40
