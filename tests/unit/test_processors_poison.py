"""The fallback poison hook (`processors/poison.py`): a poisoned record is never dropped silently."""

from __future__ import annotations

from turnledger.processors.poison import json_poison_hook
from turnledger.records import OutputRecord, SourceRecord
from turnledger.topology import Topics


def test_a_poisoned_record_becomes_one_json_rejection_keyed_as_it_with_its_coordinates() -> None:
    record = SourceRecord("p.turnledger.ingress", 3, 41, b"conversation-7", b"\x00\x01")
    [rejection] = json_poison_hook(Topics("p."))(record, ValueError("bad magic byte"))
    assert rejection == OutputRecord(
        topic="p.turnledger.rejections",
        key=b"conversation-7",
        value=(
            b'{"detail":"ValueError: bad magic byte","reason":"UNSPECIFIED",'
            b'"source":{"offset":41,"partition":3,"topic":"p.turnledger.ingress"}}'
        ),
    )


def test_a_keyless_record_is_rejected_without_a_key() -> None:
    record = SourceRecord("turnledger.ingress", 0, 0, None, None)
    [rejection] = json_poison_hook(Topics())(record, KeyError("x"))
    assert (rejection.topic, rejection.key) == ("turnledger.rejections", None)
    assert rejection.value.startswith(b'{"detail":"KeyError: \'x\'","reason":"UNSPECIFIED"')


def test_the_detail_is_cut_at_2000_characters_type_name_included() -> None:
    record = SourceRecord("turnledger.ingress", 1, 2, b"k", b"v")
    exact = "e" * (2000 - len("RuntimeError: "))
    [whole] = json_poison_hook(Topics())(record, RuntimeError(exact))
    [cut] = json_poison_hook(Topics())(record, RuntimeError(exact + "tail"))
    assert whole.value == cut.value
    assert f'"detail":"RuntimeError: {exact}"'.encode() in cut.value
