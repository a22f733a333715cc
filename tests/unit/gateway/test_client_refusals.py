"""The gateway client refuses, before sending anything, what the ledger would refuse: a typed
`RefusedEventError` (a `GatewayError`) with the reason code the processor would give."""

from __future__ import annotations

from typing import Any

import pytest

from turnledger.codec import decode, encode
from turnledger.errors import GatewayError, TurnledgerError
from turnledger.gateway.client import EventFactory, GatewayClient, RefusedEventError, encode_for_sending
from turnledger.model.events import SubmittedBlock, TurnSubmitted
from turnledger.model.limits import DEFAULT_LIMITS, Limits
from turnledger.model.reasons import ReasonCode

R = ReasonCode
EVENTS = EventFactory()


class _Producer:
    """Stands in for the AIOKafkaProducer: records what was sent, acknowledges at once."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, topic: str, *, value: bytes, key: bytes) -> Any:
        self.sent.append(value)

        async def ack() -> None:
            return None

        return ack()


def _client(limits: Limits = DEFAULT_LIMITS) -> tuple[GatewayClient, _Producer]:
    client = GatewayClient("127.0.0.1:1", limits=limits)
    producer = _Producer()
    client._producer = producer  # type: ignore[assignment]
    return client, producer


def _turn(*texts: str) -> TurnSubmitted:
    blocks = tuple(
        SubmittedBlock(id=f"b{i}", role="user", kind="text", trust_label="user", text=t)
        for i, t in enumerate(texts)
    )
    return TurnSubmitted(
        conversation_id="conv-1", event_id="e1", occurred_at_ms=1, turn_id="u1", blocks=blocks
    )


def _refusal(event: TurnSubmitted, limits: Limits) -> tuple[ReasonCode, str]:
    with pytest.raises(RefusedEventError) as caught:
        encode_for_sending(event, limits)
    return caught.value.reason, caught.value.detail


async def test_a_lone_surrogate_is_refused_before_anything_is_sent() -> None:
    client, producer = _client()
    good = EVENTS.user_turn("conv-1", "fine")
    bad = EVENTS.user_turn("conv-1", "bad \ud800")
    with pytest.raises(RefusedEventError) as caught:
        await client.append_many([good, bad])
    assert producer.sent == []  # not even the valid event ahead of it
    error = caught.value
    assert isinstance(error, GatewayError) and isinstance(error, TurnledgerError)
    assert (error.reason, error.detail) == (
        R.UNENCODABLE_TEXT,
        "/blocks/0/text holds a lone surrogate (text with no UTF-8 form)",
    )
    with pytest.raises(RefusedEventError):
        await client.submit_user_turn("conv-1", "\udc00")
    assert producer.sent == []
    await client.append(good)
    assert [decode(v) for v in producer.sent] == [good]


def test_a_lone_surrogate_anywhere_in_any_event_is_named() -> None:
    event = EVENTS.user_turn("conv-1", "ok", turn_id="t\ud800")
    assert _refusal(event, Limits()) == (
        R.UNENCODABLE_TEXT,
        "/turn_id, /blocks/0/id holds a lone surrogate (text with no UTF-8 form)",
    )


def test_blocks_per_turn_at_the_limit_and_one_past() -> None:
    limits = Limits(max_blocks_per_turn=2)
    assert decode(encode_for_sending(_turn("a", "b"), limits)) == _turn("a", "b")
    assert _refusal(_turn("a", "b", "c"), limits) == (R.TOO_MANY_BLOCKS, "the turn has 3 blocks, at most 2")


def test_block_bytes_at_the_limit_and_one_past() -> None:
    limits = Limits(max_block_bytes=4)
    assert decode(encode_for_sending(_turn("éé"), limits)) == _turn("éé")
    assert _refusal(_turn("ééa"), limits) == (R.BLOCK_TOO_LARGE, "block b0 is 5 bytes, at most 4")


def test_record_bytes_at_the_limit_and_one_past() -> None:
    event = _turn("hello")
    size = len(encode(event))
    assert encode_for_sending(event, Limits(max_record_bytes=size)) == encode(event)
    assert _refusal(event, Limits(max_record_bytes=size - 1)) == (
        R.RECORD_TOO_LARGE,
        f"record of {size} bytes, at most {size - 1}",
    )
