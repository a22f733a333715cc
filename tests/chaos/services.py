"""The services of a chaos run, each a `turnledger` command in its own OS process, killable at will."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from turnledger.fake_provider.auth import FakeKeys
from turnledger.fake_provider.server import ReceivedRequest


@dataclass
class Service:
    """One `turnledger …` process; `start()` again after a kill starts a new one with the same command."""

    name: str
    args: list[str]
    logs: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    kills: int = 0

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        self.starts += 1
        log = (self.logs / f"{self.name}.log").open("ab")
        env = {**os.environ, **self.env, **(extra_env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "turnledger.cli", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no goodbye; what it had not committed is gone."""
        if self.alive:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def pause(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 30) -> None:
        if not self.alive:
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, lines: int = 30) -> str:
        path = self.logs / f"{self.name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def fake_keys_env() -> dict[str, str]:
    return FakeKeys().as_env()


def read_request_log(path: Path) -> list[ReceivedRequest]:
    """The fake provider's `--request-log`, as the records the demo's send check reads."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        out.append(
            ReceivedRequest(
                raw["id"], raw["method"], raw["path"], raw["headers"], base64.b64decode(raw["body"])
            )
        )
    return out
