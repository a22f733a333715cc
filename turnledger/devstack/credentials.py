"""Passwords the devstack makes for itself: random, in files only their owner can read (mode 0600)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def new_password() -> str:
    """32 characters of [A-Za-z0-9_-]: nothing a JAAS string, a properties file, the StorageTool's
    `--add-scram` parser (which splits on `,` and `=`) or a shell would read specially."""
    return secrets.token_urlsafe(24)


def write_private(path: Path, text: str) -> None:
    """Write `text` to a new file created with mode 0600, never readable by others, not even briefly."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def stored_password(path: Path) -> str:
    """The password kept in `path`, made first when there is none. Written to a temporary file and
    linked into place, so two processes making it at once agree on the first one and nobody reads a
    half-written file."""
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    link_private(path, new_password() + "\n")
    return _read(path)


def link_private(path: Path, text: str) -> None:
    """Make `path` hold `text` (mode 0600) unless another process made it first: written whole to a
    private draft, then linked into place, so nobody reads a half-written file and the first one wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    write_private(draft, text)
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()
