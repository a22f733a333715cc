"""Seeded mutation fuzzing: the engine (corpus in, mutated inputs out, outcomes counted).

Hypothesis costs 15-50 ms per example here (drawing, the database, shrinking bookkeeping), so
100,000 inputs per target would take hours. This engine draws nothing: it takes a corpus of valid
inputs per target (tests/fuzz/targets.py), mutates one with a seeded `random.Random`, feeds it and
classifies how it ended. Input `i` of a run with seed `s` is made from `Random(f"{s}:{target}:{i}")`
alone, so any failure replays from (seed, target, index) without the inputs before it.

An input ends in an *outcome* (a decoded value, or a typed rejection: the class or reason code), or
it *fails*: an assertion of the target's oracle (e.g. compiled and fastavro disagree), or any other
exception (a crash). A run records every failure with its index and a repr of the input.
"""

from __future__ import annotations

import itertools
import random
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x0A, 0x0D, 0x22, 0x5C, 0xC0, 0xED, 0xF4)


@dataclass(frozen=True)
class Target(Generic[T]):
    """One fuzz target: its corpus, how to mutate an input, and how to feed one and classify the end.

    `corpus` is built lazily (once per process) since some corpora parse fixtures or run the fold.
    `mutate(rng, item, corpus)` returns a new input; `check(rng, item)` feeds it and returns the
    outcome's name, raising AssertionError when the target's oracle does not hold.
    """

    name: str
    corpus: Callable[[], Sequence[T]]
    mutate: Callable[[random.Random, T, Sequence[T]], T]
    check: Callable[[random.Random, T], str]
    also_counts_for: tuple[str, ...] = ()
    """Further target names the same input is fed into (Avro: compiled and fastavro alike)."""


@dataclass
class Failure:
    target: str
    seed: int
    index: int
    kind: str  # "assertion" or "crash"
    error: str
    input: str

    def __str__(self) -> str:
        return (
            f"{self.target} seed {self.seed} input {self.index}: {self.kind}: {self.error}\n"
            f"  replay: python -m tests.fuzz.run --seed {self.seed} --target {self.target!r} "
            f"--only {self.index}\n"
            f"  input: {self.input[:2000]}"
        )


@dataclass
class Result:
    target: str
    inputs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of this process for the target: on a shared machine, what the run cost (wall time
    also counts the other processes' turns)."""
    interrupted: bool = False
    outcomes: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0


def input_rng(seed: int, target: str, index: int) -> random.Random:
    return random.Random(f"{seed}:{target}:{index}")


def make_input(target: Target[T], corpus: Sequence[T], rng: random.Random) -> T:
    """A corpus item (2% of the time as it is, a baseline that must stay accepted), else mutated."""
    item = corpus[rng.randrange(len(corpus))]
    return item if rng.random() < 0.02 else target.mutate(rng, item, corpus)


def run_target(
    target: Target[Any],
    inputs: int,
    seed: int,
    *,
    start: int = 0,
    max_failures: int = 20,
    progress: Callable[[Result], None] | None = None,
) -> Result:
    corpus = target.corpus()
    result = Result(target.name)
    began, began_cpu = time.monotonic(), time.process_time()

    def clock() -> None:
        result.seconds = time.monotonic() - began
        result.cpu_seconds = time.process_time() - began_cpu

    try:
        for index in range(start, start + inputs):
            rng = input_rng(seed, target.name, index)
            item = make_input(target, corpus, rng)
            try:
                outcome = target.check(rng, item)
            except AssertionError as exc:
                outcome = "FAILED assertion"
                result.failures.append(
                    Failure(target.name, seed, index, "assertion", _error(exc), repr(item))
                )
            except Exception as exc:  # a crash is what we are looking for
                outcome = "FAILED crash"
                result.failures.append(Failure(target.name, seed, index, "crash", _error(exc), repr(item)))
            result.inputs += 1
            result.outcomes[outcome] += 1
            if progress is not None and result.inputs % 10_000 == 0:
                clock()
                progress(result)
            if len(result.failures) >= max_failures:
                break
    except KeyboardInterrupt:  # SIGINT/SIGTERM (tests/fuzz/run.py): keep the counts of what ran
        result.interrupted = True
    clock()
    return result


def _error(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"


# ------------------------------------------------------------------ byte mutations


def _flip(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    if data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _interesting(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice(INTERESTING_BYTES)


def _insert(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    at = rng.randrange(len(data) + 1)
    data[at:at] = rng.randbytes(rng.randint(1, 16))


def _token(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    at = rng.randrange(len(data) + 1)
    if rng.random() < 0.5 and data:  # overwrite in place, else insert
        token = rng.choice(tokens)
        data[at : at + len(token)] = token
    else:
        data[at:at] = rng.choice(tokens)


def _delete(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    if data:
        at = rng.randrange(len(data))
        del data[at : at + rng.randint(1, 16)]


def _duplicate(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    if data:
        at = rng.randrange(len(data))
        chunk = data[at : at + rng.randint(1, 64)]
        to = rng.randrange(len(data) + 1)
        data[to:to] = chunk


def _truncate(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    del data[rng.randrange(len(data) + 1) :]


def _splice(rng: random.Random, data: bytearray, corpus: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    """This input's head, another corpus item's tail (or a piece of it inserted)."""
    if not corpus:
        return
    other = rng.choice(corpus)
    at, cut = rng.randrange(len(data) + 1), rng.randrange(len(other) + 1)
    if rng.random() < 0.5:
        data[at:] = other[cut:]
    else:
        data[at:at] = other[cut : cut + rng.randint(1, 64)]


def _swap(rng: random.Random, data: bytearray, _: Sequence[bytes], tokens: Sequence[bytes]) -> None:
    if len(data) >= 2:
        a, b = sorted(rng.sample(range(len(data)), 2))
        n = min(rng.randint(1, 16), b - a)
        data[a : a + n], data[b : b + n] = data[b : b + n], data[a : a + n]


BYTE_MUTATIONS: tuple[Callable[[random.Random, bytearray, Sequence[bytes], Sequence[bytes]], None], ...] = (
    _flip,
    _interesting,
    _insert,
    _token,
    _delete,
    _duplicate,
    _truncate,
    _splice,
    _swap,
)


def mutate_bytes(
    rng: random.Random, data: bytes, corpus: Sequence[bytes], tokens: Sequence[bytes] = (b"\x00",)
) -> bytes:
    """1 to 8 mutations (most often 1 or 2: small changes reach deeper than noise)."""
    out = bytearray(data)
    for _ in range(min(8, 1 + int(rng.expovariate(0.9)))):
        rng.choice(BYTE_MUTATIONS)(rng, out, corpus, tokens)
    return bytes(out)


def mutate_list(
    rng: random.Random,
    items: Sequence[T],
    pool: Sequence[T],
    fresh: Callable[[random.Random], T] | None = None,
    max_edits: int = 6,
) -> list[T]:
    """Drop, repeat, swap, move, or insert (from `pool`, or `fresh`) items of a sequence."""
    out = list(items)
    for _ in range(rng.randint(1, max_edits)):
        kind = rng.randrange(6 if fresh else 5)
        at = rng.randrange(len(out) + 1)
        if kind == 0 and at < len(out):
            del out[at]
        elif kind == 1 and at < len(out):
            out.insert(at, out[at])
        elif kind == 2 and at + 1 < len(out):
            out[at], out[at + 1] = out[at + 1], out[at]
        elif kind == 3 and out:
            out.insert(rng.randrange(len(out) + 1), out.pop(rng.randrange(len(out))))
        elif kind == 4 and pool:
            out.insert(at, rng.choice(pool))
        elif kind == 5 and fresh is not None:
            out.insert(at, fresh(rng))
    return out


def chunks(rng: random.Random, data: bytes) -> list[bytes]:
    """The bytes cut as a network might: whole, a byte at a time (a short input), a fixed size, or at
    random places. Sizes are mostly small so that boundaries fall inside lines, frames and UTF-8."""
    kind = rng.randrange(4)
    if kind == 0 or not data:
        return [data]
    if kind == 1 and len(data) <= 64:
        return [data[i : i + 1] for i in range(len(data))]
    if kind <= 2:
        size = rng.randint(1, 8) if rng.random() < 0.1 else rng.randint(9, 512)
        return [data[i : i + size] for i in range(0, len(data), size)]
    cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(rng.randint(1, 8)))})
    return [data[a:b] for a, b in itertools.pairwise(cuts)]
