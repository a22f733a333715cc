"""Typed errors of the fake provider."""

from __future__ import annotations


class FakeProviderError(Exception):
    """Base class of every error the fake provider raises on purpose."""


class NonLoopbackBindError(FakeProviderError, ValueError):
    """Raised when asked to bind anything but 127.0.0.1.

    The fake provider injects faults and echoes request bodies; it must never be reachable from another
    machine, so it refuses every address but the IPv4 loopback one instead of silently binding it.
    """

    def __init__(self, host: str) -> None:
        super().__init__(f"the fake provider binds 127.0.0.1 only, refused host {host!r}")
        self.host = host


class BadRequestError(FakeProviderError):
    """A request the fake provider cannot serve; answered with HTTP 400 in the API's own error shape
    (`code`: the specific error name, where the API gives one: OpenAI's `code`; `kind`: the error
    type where the API's differs from the one of its status)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.kind = kind
