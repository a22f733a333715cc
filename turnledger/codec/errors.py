"""The codec's typed errors: every failure to encode or decode is one of these."""

from __future__ import annotations

from turnledger.errors import TurnledgerError
from turnledger.model.reasons import ReasonCode


class CodecError(TurnledgerError):
    """Base of every codec failure; `reason` is the code a rejection record carries."""

    reason: ReasonCode = ReasonCode.UNDECODABLE_RECORD


class NotSingleObjectEncoded(CodecError):
    """Too short, or without the C3 01 marker: not an Avro single-object encoding."""


class UnknownFingerprint(CodecError):
    """The writer schema's fingerprint is not in the registry."""

    reason = ReasonCode.UNKNOWN_FINGERPRINT


class CorruptRecord(CodecError):
    """The body does not decode under the writer schema, or does not make a valid model."""


class UnencodableRecord(CodecError):
    """The model (or datum) does not fit its schema, or no schema is known for it."""

    reason = ReasonCode.INVALID_EVENT
