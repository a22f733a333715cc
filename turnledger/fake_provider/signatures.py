"""Reasoning signatures: minted as each API mints its own, and checked on every request, as each
real API checks the ones it is sent.

A provider's reasoning signature is an opaque token only that provider can make and check: an
Anthropic thinking block's `signature`, a Gemini part's `thoughtSignature`, a Bedrock reasoning
block's `signature`, a Responses reasoning item's `encrypted_content` (provider-formats §1b, §1d,
§2a, §2c, §2d). A request whose history holds one the API did not mint is refused with the API's
own 400, and so is every later request of that conversation.

Here a token is `header | nonce | HMAC-SHA256(key, nonce [| text])` in base64, the key derived from
(server seed, API): deterministic for a seeded server (the nonce comes from the request's id basis,
ids.py), checkable by any server of that seed, and by no other API. `header` makes a token look as
the API's do (Anthropic's `EqoB…`, Gemini's `CiQB…`, an OpenAI Fernet token's `gAAAAABo…`).
Anthropic and Bedrock sign the thinking text too: a changed text is refused, as Claude's are.

Which signatures a request holds, and how the API refuses a wrong one, are each API module's
(`SignatureRule.signed`, `.refusal`). The refusal texts are the real APIs', as users quote them:
Anthropic "messages.N.content.M: Invalid `signature` in `thinking` block" (invalid_request_error,
ding113/claude-code-hub#518), Gemini "Corrupted thought signature." (400 INVALID_ARGUMENT,
google-gemini/gemini-cli#13467), Bedrock "The model returned the following errors:
messages.N.content.M: Invalid signature in thinking block" (a ValidationException,
openclaw/openclaw#88020), Responses "The encrypted content gAAA...XXXX could not be verified."
(code invalid_encrypted_content, openai/codex#8145). provider-formats.md quotes none of them.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from turnledger.fake_provider.errors import BadRequestError
from turnledger.fake_provider.ids import digest

NONCE_BYTES = 16
MAC_BYTES = 32


@dataclass(frozen=True, slots=True)
class Signed:
    """One signature a request holds: where (in the API's own path words), the token, the text it
    signs, and whether it rides on a function call (where Gemini accepts its stand-in)."""

    where: str
    token: str
    text: str = ""
    on_call: bool = False


@dataclass(frozen=True)
class SignatureRule:
    """How one API mints its signatures, finds those a request holds, and refuses a wrong one."""

    api: str
    header: bytes
    signed: Callable[[dict[str, Any]], Iterable[Signed]]
    refusal: Callable[[Signed], BadRequestError]
    binds_text: bool = False
    urlsafe: bool = False
    call_stand_ins: frozenset[str] = frozenset()
    """Values the API takes on a function call in place of a signature it minted."""
    unsigned: Callable[[dict[str, Any]], BadRequestError | None] | None = None
    """The refusal of a request missing a signature its strict models require (Gemini 3: the first
    call of each step of the current turn), or None; checked only when the server is strict."""

    def mint(self, seed: int, basis: str, label: str, text: str = "") -> str:
        """The token for (seed, request basis, label), over `text` when the API binds it."""
        nonce = digest(seed, basis, label, "signature-nonce")[:NONCE_BYTES]
        raw = self.header + nonce + self._mac(seed, nonce, text)
        encode = base64.urlsafe_b64encode if self.urlsafe else base64.b64encode
        return encode(raw).decode()

    def minted(self, seed: int, signed: Signed) -> bool:
        """Is `signed.token` one this API minted (over `signed.text`, when it binds it)?"""
        if signed.on_call and signed.token in self.call_stand_ins:
            return True
        try:
            raw = base64.b64decode(signed.token, altchars=b"-_" if self.urlsafe else None, validate=True)
        except (binascii.Error, ValueError):
            return False
        head, nonce, mac = (
            raw[: len(self.header)],
            raw[len(self.header) : len(self.header) + NONCE_BYTES],
            raw[len(self.header) + NONCE_BYTES :],
        )
        if head != self.header or len(nonce) != NONCE_BYTES:
            return False
        return hmac.compare_digest(mac, self._mac(seed, nonce, signed.text))

    def check(self, body: dict[str, Any], seed: int, strict: bool = False) -> None:
        """Raise the API's refusal for the first signature of the request it did not mint, and, when
        `strict`, for a signature missing where the API requires one."""
        for signed in self.signed(body):
            if not self.minted(seed, signed):
                raise self.refusal(signed)
        missing = self.unsigned(body) if strict and self.unsigned is not None else None
        if missing is not None:
            raise missing

    def _mac(self, seed: int, nonce: bytes, text: str) -> bytes:
        key = digest(seed, "signature-key", self.api)
        message = nonce + (text.encode() if self.binds_text else b"")
        return hmac.new(key, message, "sha256").digest()


def abbreviated(token: str) -> str:
    """A token as OpenAI names one in an error: its first and last four characters."""
    return f"{token[:4]}...{token[-4:]}"
