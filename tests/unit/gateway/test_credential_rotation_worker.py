"""A rotated key file through the worker, the real fold and the fake provider (which checks each API's
credential as the real one does): the next request carries the new key without a restart, and a
request the provider refused while the key was being replaced goes once more with the new one."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.gateway.provider_harness import harness
from tests.unit.gateway.test_provider_failures_worker import config, posts
from turnledger.fake_provider import FakeProvider, ReceivedRequest
from turnledger.fake_provider.auth import FakeKeys
from turnledger.gateway.endpoints import ProviderRoutes
from turnledger.gateway.provider_config import parse_provider_config, resolve_routes
from turnledger.gateway.worker import gave_up
from turnledger.model.events import DispatchState
from turnledger.model.reasons import ReasonCode

S = DispatchState

#: adapter → the FakeKeys field its key is checked against
KEYED = {"anthropic-messages@2": "anthropic", "openai-chat@2": "openai", "gemini@2": "gemini"}
NEW_KEYS = {"anthropic": "sk-ant-rotated-0001", "openai": "sk-rotated-0001", "gemini": "AIzaRotated-0001"}


class KeyFile:
    """The route's `api_key_file`, rewritten as an operator (or a mounted secret's update) would."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self._mtime_ns = path, 1_000_000_000
        self.write(key)

    def write(self, key: str) -> None:
        self.path.write_text(key + "\n")
        self._mtime_ns += 1_000_000_000
        os.utime(self.path, ns=(self._mtime_ns, self._mtime_ns))


def file_routes(adapter: str, key_file: Path) -> Callable[[FakeProvider], ProviderRoutes]:
    def routes_of(fp: FakeProvider) -> ProviderRoutes:
        api = adapter.partition("@")[0]
        entry = {"name": api, "base_url": fp.base_url, "adapters": [api], "api_key_file": str(key_file)}
        return resolve_routes(parse_provider_config({"routes": [entry]}), {})

    return routes_of


def rotate_provider(fp: FakeProvider, field: str) -> None:
    fp.keys = dataclasses.replace(fp.keys, **{field: NEW_KEYS[field]})


@pytest.mark.parametrize("adapter", list(KEYED))
async def test_the_next_request_carries_a_rotated_key_without_a_restart(adapter: str, tmp_path: Path) -> None:
    field = KEYED[adapter]
    key_file = KeyFile(tmp_path / "key", getattr(FakeKeys(), field))
    async for h in harness(routes_of=file_routes(adapter, key_file.path), config=config()):
        await h.converse("c1", adapter, text="before the rotation", tools=False)
        assert (await h.settled("c1", "op-1")).state == S.COMMITTED
        rotate_provider(h.fp, field)  # the old key is revoked ...
        key_file.write(NEW_KEYS[field])  # ... and the new one mounted
        await h.converse("c2", adapter, text="after the rotation", tools=False)
        final = await h.settled("c2", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 1
        assert h.fp.auth_failures == []
        [after] = posts(h, "after the rotation")
        assert NEW_KEYS[field].encode() in b"".join(f"{k}:{v}".encode() for k, v in after.headers.items())


def rotate_on_marked(field: str, key_file: KeyFile) -> Callable[[FakeProvider, ReceivedRequest], None]:
    """As the marked request arrives: the provider revokes the key it carries and the file gets the new
    one, before the provider answers (the rotation lands between the worker's send and its verdict)."""

    def on_request(fp: FakeProvider, request: ReceivedRequest) -> None:
        if b"ROTATING" in request.body and getattr(fp.keys, field) != NEW_KEYS[field]:
            rotate_provider(fp, field)
            key_file.write(NEW_KEYS[field])

    return on_request


@pytest.mark.parametrize("adapter", list(KEYED))
async def test_a_refusal_of_a_key_replaced_meanwhile_is_sent_again_with_the_new_key(
    adapter: str, tmp_path: Path
) -> None:
    field = KEYED[adapter]
    key_file = KeyFile(tmp_path / "key", getattr(FakeKeys(), field))
    async for h in harness(
        routes_of=file_routes(adapter, key_file.path),
        config=config(),
        on_request=rotate_on_marked(field, key_file),
    ):
        await h.converse("c1", adapter, text="ROTATING now", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.COMMITTED and final.attempt_generation == 2
        first, second = posts(h, "ROTATING")
        assert first.body == second.body
        assert [status for _, status in h.fp.auth_failures] == [{"gemini": 400}.get(field, 401)]
        assert h.worker.stats.counts["refusals_of_a_replaced_credential"] == 1
        assert len(h.assistant_turns("c1")) == 1


async def test_a_refused_key_that_nobody_replaced_still_ends_at_once(tmp_path: Path) -> None:
    """The provider revokes the key and the file keeps it: refused, not sent again (PROVIDER_REFUSED)."""
    key_file = KeyFile(tmp_path / "key", FakeKeys().openai)
    async for h in harness(routes_of=file_routes("openai-chat@2", key_file.path), config=config()):
        rotate_provider(h.fp, "openai")
        await h.converse("c1", "openai-chat@2", tools=False)
        final = await h.settled("c1", "op-1")
        assert final.state == S.CANCELLED and gave_up(final) and final.reason == ReasonCode.PROVIDER_REFUSED
        assert len(posts(h)) == 1
        assert h.worker.stats.counts["refusals_of_a_replaced_credential"] == 0
