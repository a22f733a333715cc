"""The last line of defence for credentials (`gateway/redaction.py`): what is scrubbed, and where."""

from __future__ import annotations

import logging

import pytest

from turnledger.gateway import redaction
from turnledger.gateway.redaction import MASK, RedactingFilter, Redactor, install_log_redaction


def test_a_value_of_six_characters_is_scrubbed_and_a_shorter_one_is_not() -> None:
    redactor = Redactor()
    redactor.register("abcdef")
    redactor.register("vwxyz")
    assert redactor.scrub("abcdef and vwxyz, abcdef") == "*** and vwxyz, ***"


def test_a_secret_that_contains_another_is_scrubbed_whole() -> None:
    """The longer value goes first: the shorter one first would leave the longer one's tail readable."""
    redactor = Redactor()
    for value in ("key-1234", "key-1234-tail-5678", "key-1234-tail", "zz-inner", "aa-zz-inner"):
        redactor.register(value)
    assert redactor.scrub("a key-1234-tail-5678 b key-1234-tail c key-1234") == "a *** b *** c ***"
    assert redactor.scrub("aa-zz-inner, zz-inner") == "***, ***"  # by length, not by the values' order


def test_with_nothing_registered_the_text_is_returned_as_it_is() -> None:
    text = "nothing to hide"
    assert Redactor().scrub(text) is text
    assert MASK == "***"


@pytest.fixture
def registered() -> str:
    secret = "sk-filter-test-777777"
    redaction.REDACTOR.register(secret)
    return secret


def _record(message: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("t", logging.ERROR, __file__, 1, message, args, exc_info)  # type: ignore[arg-type]


def test_the_filter_scrubs_the_formatted_message_and_keeps_a_clean_one_untouched(registered: str) -> None:
    record = _record("sent %s to %s", f"Bearer {registered}", "host")
    assert RedactingFilter().filter(record) is True
    assert (record.msg, record.args, record.getMessage()) == (
        "sent Bearer *** to host",
        None,
        "sent Bearer *** to host",
    )
    clean = _record("sent %s", "nothing")
    RedactingFilter().filter(clean)
    assert (clean.msg, clean.args) == ("sent %s", ("nothing",))


def test_an_exception_carrying_a_secret_is_logged_as_scrubbed_text(registered: str) -> None:
    """Also an exception that was never raised (no traceback), as a transport may hand one over."""
    error = RuntimeError(f"transport said {registered}")
    record = _record("failed", exc_info=(RuntimeError, error, None))
    RedactingFilter().filter(record)
    assert record.exc_info is None
    assert record.exc_text == "RuntimeError: transport said ***"
    formatted = logging.Formatter().format(record)
    assert formatted == "failed\nRuntimeError: transport said ***"


def test_an_exception_without_a_secret_keeps_its_traceback(registered: str) -> None:
    error = RuntimeError("plain")
    record = _record("failed", exc_info=(RuntimeError, error, None))
    RedactingFilter().filter(record)
    assert record.exc_info == (RuntimeError, error, None) and record.exc_text is None


def test_installing_puts_one_filter_on_every_handler_once() -> None:
    logger = logging.getLogger("test.redaction.install")
    first, second = logging.StreamHandler(), logging.NullHandler()
    second.addFilter(logging.Filter("other"))
    logger.addHandler(first)
    logger.addHandler(second)
    try:
        install_log_redaction(logger)
        install_log_redaction(logger)
        assert [len([f for f in h.filters if isinstance(f, RedactingFilter)]) for h in (first, second)] == [
            1,
            1,
        ]
        assert len(second.filters) == 2
    finally:
        logger.removeHandler(first)
        logger.removeHandler(second)


def test_installing_without_a_logger_filters_the_root_handlers() -> None:
    root = logging.getLogger()
    handler = logging.NullHandler()
    root.addHandler(handler)
    try:
        install_log_redaction()
        assert [type(f) for f in handler.filters] == [RedactingFilter]
    finally:
        root.removeHandler(handler)
