"""The last line of defence for credentials: every secret value read is scrubbed from log lines.

Secrets never reach a manifest, a digest, an event or the journal by construction (they
exist only in request headers, built at send time). What could still carry one is text
the worker did not write itself: an exception message of a transport, a log line of a
library. `REDACTOR.scrub` replaces every registered value (and its Bearer/header forms,
which contain it) by `***`; `RedactingFilter` applies it to every log record of the
handlers it is installed on (`install_log_redaction`), and the worker passes every
give-up detail, and a provider's error text inside a stream (`stream_read.scrubbed`), through it
before it becomes an event.
"""

from __future__ import annotations

import logging
import threading

MASK = "***"
MIN_SECRET_CHARS = 6  # shorter values would scrub ordinary words; no real credential is that short


class Redactor:
    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def register(self, value: str) -> None:
        if len(value) >= MIN_SECRET_CHARS:
            with self._lock:
                self._values.add(value)

    def scrub(self, text: str) -> str:
        if not self._values:
            return text
        for value in sorted(self._values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, MASK)
        return text


REDACTOR = Redactor()


class RedactingFilter(logging.Filter):
    """Formats the record's message once, scrubbed; exception text is scrubbed too."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = REDACTOR.scrub(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if REDACTOR.scrub(text) != text:
                record.exc_info = None
                record.exc_text = REDACTOR.scrub(text)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Put a `RedactingFilter` on every handler of `logger` (root by default), once."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
