"""The `x-fake-fault` header: items separated by commas or semicolons, `none` and blanks skipped, a number
after `=` where the kind takes one (0 included); an unknown kind, a number that is not an integer or is
negative, or a number for a kind that takes none is refused with the API's 400 and a message naming it."""

from __future__ import annotations

import pytest

from turnledger.fake_provider import BadRequestError, Fault, FaultKind
from turnledger.fake_provider.faults import parse_fault_header

K = FaultKind
KNOWN = (
    "disconnect_at_byte, duplicate_event, missing_stop, truncate_tool_args, slow_ms, error_event, "
    "late_events, rate_limited, http_status, refusal_after, max_tokens_in_call, hold_open, thinking_only"
)


def test_items_are_split_on_commas_and_semicolons_and_none_and_blanks_are_skipped() -> None:
    header = "none, disconnect_at_byte=300; , duplicate_event = 4;missing_stop,refusal_after=0, thinking_only"
    assert parse_fault_header(header) == (
        Fault(K.DISCONNECT, 300),
        Fault(K.DUPLICATE, 4),
        Fault(K.MISSING_STOP),
        Fault(K.REFUSAL_AFTER, 0),
        Fault(K.THINKING_ONLY),
    )
    assert parse_fault_header("none") == ()


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("slow_ms=5, NONE", f"unknown fault 'NONE' in x-fake-fault; known: {KNOWN}"),
        ("thinking", f"unknown fault 'thinking' in x-fake-fault; known: {KNOWN}"),
        ("slow_ms=fast", "fault 'slow_ms' needs an integer, got 'fast'"),
        ("slow_ms=-1", "fault 'slow_ms' needs a non-negative integer"),
        ("thinking_only=1", "fault 'thinking_only' takes no value, got '1'"),
        ("missing_stop = 2", "fault 'missing_stop' takes no value, got '2'"),
    ],
)
def test_a_bad_item_is_refused_naming_it(header: str, message: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_fault_header(header)
    assert (caught.value.message, caught.value.status) == (message, 400)
