"""Detached child processes tracked by pid files, stopped by pid and process group, never by name.

Each service runs in its own session (so its pid is also its process-group id); stopping signals that group,
which also takes down anything the service itself forked. A pid file is only acted on when the process
behind it still carries the expected marker in its command line, so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def spawn_detached(
    argv: Sequence[str],
    log: Path,
    pidfile: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start `argv` in a new session with stdout+stderr appended to `log`; record its pid in `pidfile`.
    `env` adds to (or overrides) this process's environment for the child only."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, **env} if env is not None else None,
        )
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _reap(pid: int) -> None:
    """Collect the exit status if `pid` is our own child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(pid: int) -> bool:
    _reap(pid)
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owns(pid: int, marker: str) -> bool:
    """True when `pid` is alive and is the service we started (its command line carries `marker`)."""
    return is_alive(pid) and marker in cmdline(pid)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_pid(pid: int, marker: str, grace_s: float = 20.0) -> bool:
    """SIGTERM the service's process group, wait up to `grace_s`, then SIGKILL.

    Returns True if the pid was ours to stop (alive and carrying `marker`)."""
    if not owns(pid, marker):
        return False
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            break
        time.sleep(0.1)
    else:
        _signal_group(pid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 5
        while is_alive(pid) and time.monotonic() < kill_deadline:
            time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)  # stragglers forked by the service, if any survived the leader
    return True


def kill_pidfile(pidfile: Path, marker: str) -> bool:
    """SIGKILL the service's process group at once (a crash: no shutdown sequence runs) and wait for it
    to be gone; True if the pid was ours to kill."""
    pid = read_pid(pidfile)
    if pid is None or not owns(pid, marker):
        pidfile.unlink(missing_ok=True)
        return False
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    pidfile.unlink(missing_ok=True)
    return True


def stop_pidfile(pidfile: Path, marker: str, grace_s: float = 20.0) -> bool:
    pid = read_pid(pidfile)
    stopped = pid is not None and stop_pid(pid, marker, grace_s)
    pidfile.unlink(missing_ok=True)
    return stopped


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"
