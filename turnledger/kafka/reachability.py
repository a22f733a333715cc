"""Why no broker of a bootstrap list could be reached, in the operator's words.

aiokafka's bootstrap failure says only "Unable to bootstrap from [('127.0.0.1', 1, ...)]"; the reason for
each address (nothing listening, a name that does not resolve, no answer) is in a log line of its own,
which the commands keep for `--log-level DEBUG` (`cli_logging`). `unreachable` opens one TCP
connection to each address by hand (`connection.diagnose` does, for a plain listener; with TLS or SASL
it words the errors of the connections it makes anyway) and words what stopped it, so a service's
waiting and final outage lines say why, by these rules (the first that matches the connection's error):

| error | said |
|---|---|
| `socket.gaierror` | `HOST:PORT: the name does not resolve (<resolver's words>)` |
| `ConnectionRefusedError` | `HOST:PORT: refused the connection (nothing listens on that port)` |
| `TimeoutError` | `HOST:PORT: no answer within N s` |
| any other `OSError` | `HOST:PORT: <its words>` |

When any address takes the connection the broker is there and something else stood in the way (the
client's own error is kept: `connection.diagnose` tells a refused login apart)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Sequence

from aiokafka.errors import KafkaConnectionError

PROBE_TIMEOUT_S = 2.0

_WORDS: tuple[tuple[type[OSError], Callable[[OSError, float], str]], ...] = (
    (socket.gaierror, lambda e, _: f"the name does not resolve ({e.strerror or e})"),
    (ConnectionRefusedError, lambda _e, _t: "refused the connection (nothing listens on that port)"),
    (TimeoutError, lambda _e, t: f"no answer within {t:g} s"),
    (OSError, lambda e, _: e.strerror or str(e) or type(e).__name__),
)


def words_for(error: OSError, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """What stopped a connection, by the first rule of `_WORDS` its error matches."""
    return next(say(error, timeout_s) for kind, say in _WORDS if isinstance(error, kind))


def addresses(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port[,host:port]` as (host, port) pairs, an IPv6 literal's brackets taken off."""
    pairs = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        with contextlib.suppress(ValueError):
            pairs.append((host.strip("[]"), int(port)))
    return pairs


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _connect(host: str, port: int, timeout_s: float) -> str | None:
    """None when the address took a TCP connection, else what stopped it."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except OSError as exc:  # TimeoutError is an OSError
        return words_for(exc, timeout_s)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


def nobody_answered(stopped: Sequence[tuple[str, int, str]]) -> KafkaConnectionError:
    """The error that says, for each (host, port, what stopped it), why no broker answered."""
    said = "; ".join(f"{_shown(host)}:{port}: {reason}" for host, port, reason in stopped)
    return KafkaConnectionError(f"no broker answered: {said}")


async def unreachable(bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> KafkaConnectionError | None:
    """`nobody_answered` when each address refused a TCP connection, or None when one of them took it
    (or the list names no address: nothing to say better than the client did)."""
    pairs = addresses(bootstrap)
    if not pairs:
        return None
    stopped = await asyncio.gather(*(_connect(host, port, timeout_s) for host, port in pairs))
    if any(reason is None for reason in stopped):
        return None
    return nobody_answered(
        [(host, port, reason) for (host, port), reason in zip(pairs, stopped, strict=True) if reason]
    )
