"""An in-memory Redis for `projections.projector.Projector`, so that its Python side runs with no Redis.

`ScriptRedis` answers what the projector and its `ScriptApplier` send as redis-py does (bytes back):
SCRIPT LOAD and EVALSHA of the projection script, HGETALL, HSETNX and HGET of the offsets hashes (the
applied offsets, the epoch), GET, SET NX and EXISTS of the layout. Its EVALSHA keeps what the projector
reads of the script (`projections/script.py`): the epoch guard (`{-1, 0}` when the offsets hash no longer
carries the token given), and, group by group, a group applied only when its offset is above its
partition's applied offset, which it then moves; `{applied, skipped, flags}`. The groups' ops are not run:
what they write is the script's, tested on a real Redis by `tests/integration/projections`. `clock`, when
set, is moved by `script_s` at every EVALSHA (the script call's time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from redis.asyncio import ConnectionPool
from redis.exceptions import NoScriptError

from turnledger.projections.keys import EPOCH_FIELD
from turnledger.projections.script import APPLY_SCRIPT
from turnledger.records import SourceRecord

SHA = "5c1e0d7a"


class Clock:
    """`time.perf_counter`, moved only by the fakes."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now


class ScriptRedis:
    def __init__(self, clock: Clock | None = None, script_s: float = 0.25) -> None:
        self.hashes: dict[str, dict[bytes, bytes]] = {}
        self.strings: dict[str, bytes] = {}
        self.connection_pool = ConnectionPool(host="cache.test", port=6390, db=2)
        self.clock = clock
        self.script_s = script_s
        self.loads = 0
        self.calls: list[tuple[str, list[str], list[Any], tuple[str, ...]]] = []
        """Every EVALSHA: the offsets hash (KEYS[1]), the other keys, the decoded plan, the epoch given."""
        self.failures: dict[str, BaseException] = {}
        """Offsets hash -> what the next script call on it raises (applying nothing)."""

    def applied(self, offsets_key: str) -> dict[str, int]:
        held = self.hashes.get(offsets_key, {})
        return {k.decode(): int(v) for k, v in held.items() if k.decode() != EPOCH_FIELD}

    def hold(self, offsets_key: str, epoch: str | None = None, /, **applied: int) -> None:
        """Set an offsets hash: its epoch token and `topic:partition` offsets (as `a_0=4` for `a:0`)."""
        held = self.hashes.setdefault(offsets_key, {})
        if epoch is not None:
            held[EPOCH_FIELD.encode()] = epoch.encode()
        for name, offset in applied.items():
            held[name.replace("_", ":").encode()] = str(offset).encode()

    async def script_load(self, script: str) -> str:
        assert script == APPLY_SCRIPT
        self.loads += 1
        return SHA

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: str) -> list[Any]:
        if sha != SHA or not self.loads:
            raise NoScriptError("NOSCRIPT No matching script.")
        keys, argv = list(keys_and_args[:numkeys]), keys_and_args[numkeys:]
        groups = orjson.loads(argv[0])
        self.calls.append((keys[0], keys[1:], groups, tuple(argv[1:])))
        if self.clock is not None:
            self.clock.now += self.script_s
        failure = self.failures.pop(keys[0], None)
        if failure is not None:
            raise failure
        held = self.hashes.setdefault(keys[0], {})
        if len(argv) > 1 and held.get(EPOCH_FIELD.encode()) != argv[1].encode():
            return [-1, 0]
        flags = ""
        for source, offset, _ops in groups:
            if int(offset) > int(held.get(source.encode(), b"-1")):
                held[source.encode()] = offset.encode()
                flags += "1"
            else:
                flags += "0"
        return [flags.count("1"), flags.count("0"), flags.encode()]

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        return dict(self.hashes.get(key, {}))

    async def hsetnx(self, key: str, field: str, value: str) -> int:
        held = self.hashes.setdefault(key, {})
        if field.encode() in held:
            return 0
        held[field.encode()] = value.encode()
        return 1

    async def hget(self, key: str, field: str) -> bytes | None:
        return self.hashes.get(key, {}).get(field.encode())

    async def get(self, key: str) -> bytes | None:
        return self.strings.get(key)

    async def set(self, key: str, value: str, nx: bool = False) -> bool:
        assert nx
        self.strings.setdefault(key, value.encode())
        return True

    async def exists(self, key: str) -> int:
        return int(key in self.strings or key in self.hashes)


def offsets_of(calls: Sequence[tuple[str, list[str], list[Any], tuple[str, ...]]]) -> list[list[str]]:
    """Each script call's groups as `topic:partition@offset`, in the order sent."""
    return [[f"{source}@{offset}" for source, offset, _ in groups] for _, _, groups, _ in calls]


def raw(topic: str, offset: int, value: bytes | None, partition: int = 0) -> SourceRecord:
    return SourceRecord(topic, partition, offset, b"k", value, 1_700_000_000_000 + offset)
