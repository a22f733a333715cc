"""The projection's script calls (`projections/applier.py`) against a recording stand-in for redis-py:
what each call sends, what its answer becomes, the script loaded again when Redis lost it, the epoch
guard, and the epoch token made once and adopted after."""

from __future__ import annotations

import re
from typing import Any

import pytest
from redis.exceptions import NoScriptError

from turnledger.projections.applier import (
    ApplyResult,
    EpochChangedError,
    ScriptApplier,
    ensure_epoch,
)
from turnledger.projections.keys import EPOCH_FIELD
from turnledger.projections.plan import BatchPlan
from turnledger.projections.script import APPLY_SCRIPT


class RecordingRedis:
    """Answers `evalsha` from `answers` in turn (an exception is raised); loads give sha-1, sha-2, ..."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[Any, ...]] = []
        self.hash: dict[str, bytes] = {}
        self.drop_after_hsetnx = 0

    async def script_load(self, script: str) -> str:
        self.calls.append(("script_load", script == APPLY_SCRIPT))
        return f"sha-{sum(1 for c in self.calls if c[0] == 'script_load')}"

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        self.calls.append(("evalsha", sha, numkeys, *keys_and_args))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def hsetnx(self, key: str, field: str, value: str) -> int:
        self.calls.append(("hsetnx", key, field, value))
        if field in self.hash:
            return 0
        self.hash[field] = value.encode()
        if self.drop_after_hsetnx:
            self.drop_after_hsetnx -= 1
            self.hash.clear()  # another client dropped the projection in between
        return 1

    async def hget(self, key: str, field: str) -> bytes | None:
        self.calls.append(("hget", key, field))
        return self.hash.get(field)


def plan_of_two() -> BatchPlan:
    plan = BatchPlan(keys=["{tl:}offsets", "{tl:}conv:c1"])
    plan.add("turnledger.committed-0", 41, [["set", 2, "v"]])
    plan.add("turnledger.committed-0", 42, [["set", 2, "w"]])
    return plan


async def test_an_empty_plan_calls_nothing() -> None:
    redis = RecordingRedis()
    result = await ScriptApplier(redis).apply(BatchPlan(keys=["{tl:}offsets"]))  # type: ignore[arg-type]
    assert (result.applied, result.skipped, result.flags) == (0, 0, "") and redis.calls == []


async def test_one_call_sends_the_keys_and_the_plan_and_reads_back_the_counts_and_flags() -> None:
    plan = plan_of_two()
    redis = RecordingRedis([1, 1, b"01"], [2, 0], [0, 2, "00"])
    applier = ScriptApplier(redis)  # type: ignore[arg-type]
    first = await applier.apply(plan)
    assert first == ApplyResult(1, 1, "01") and first.applied_indexes() == [1]
    assert await applier.apply(plan, epoch="e7") == ApplyResult(2, 0, "")
    assert await applier.apply(plan) == ApplyResult(0, 2, "00")
    sent = ("evalsha", "sha-1", 2, "{tl:}offsets", "{tl:}conv:c1", plan.argv)
    assert redis.calls == [("script_load", True), sent, (*sent, "e7"), sent]


async def test_a_script_redis_lost_is_loaded_again_and_the_call_made_once_more() -> None:
    plan = plan_of_two()
    redis = RecordingRedis([5, 0, b"11"], NoScriptError("NOSCRIPT"), [2, 0, b"11"])
    applier = ScriptApplier(redis)  # type: ignore[arg-type]
    await applier.apply(plan)
    assert await applier.apply(plan, epoch="e1") == ApplyResult(2, 0, "11")
    args = (2, "{tl:}offsets", "{tl:}conv:c1", plan.argv, "e1")
    assert redis.calls[2:] == [
        ("evalsha", "sha-1", *args), ("script_load", True), ("evalsha", "sha-2", *args),
    ]  # fmt: skip
    with pytest.raises(NoScriptError):  # lost again at once: not a loop
        await ScriptApplier(RecordingRedis(NoScriptError("a"), NoScriptError("b"))).apply(plan)  # type: ignore[arg-type]


async def test_an_epoch_the_offsets_no_longer_carry_applies_nothing_and_says_why() -> None:
    redis = RecordingRedis([-1, 0, b""])
    with pytest.raises(EpochChangedError) as raised:
        await ScriptApplier(redis).apply(plan_of_two(), epoch="e3")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "the projection's offsets no longer carry epoch 'e3': Redis lost them (a restart without "
        "persistence, or the projection was dropped); position again from what Redis holds"
    )


async def test_the_epoch_is_made_once_adopted_after_and_made_again_if_dropped_in_between() -> None:
    redis = RecordingRedis()
    token = await ensure_epoch(redis, "{tl:}offsets")  # type: ignore[arg-type]
    assert re.fullmatch(r"[0-9a-f]{16}", token)
    assert await ensure_epoch(redis, "{tl:}offsets") == token  # type: ignore[arg-type]
    assert [c[0] for c in redis.calls] == ["hsetnx", "hget", "hsetnx", "hget"]
    assert all(c[1:3] == ("{tl:}offsets", EPOCH_FIELD) for c in redis.calls)
    assert redis.calls[0][3] == token and redis.calls[2][3] != token  # a fresh proposal, not taken

    dropped = RecordingRedis()
    dropped.drop_after_hsetnx = 1
    again = await ensure_epoch(dropped, "{tl:}offsets")  # type: ignore[arg-type]
    assert [c[0] for c in dropped.calls] == ["hsetnx", "hget", "hsetnx", "hget"]
    assert all(c[1:3] == ("{tl:}offsets", EPOCH_FIELD) for c in dropped.calls)
    assert again == dropped.calls[2][3] != dropped.calls[0][3] and re.fullmatch(r"[0-9a-f]{16}", again)


async def test_an_epoch_read_as_text_is_returned_as_it_is() -> None:
    class TextRedis(RecordingRedis):
        async def hget(self, key: str, field: str) -> Any:
            found = await super().hget(key, field)
            return None if found is None else found.decode()

    redis = TextRedis()
    token = await ensure_epoch(redis, "k")  # type: ignore[arg-type]
    assert token == redis.calls[0][3] and isinstance(token, str)
