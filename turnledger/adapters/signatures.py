"""Which signatures an adapter may send: only those its own API minted.

A signature is a provider's opaque token for its own reasoning (an Anthropic thinking `signature`,
a Gemini `thoughtSignature`, an OpenAI Responses `encrypted_content`, a Bedrock reasoning
`signature`). A provider checks the ones it is sent and refuses the request when one is not its
own (Gemini: "Corrupted thought signature."; Anthropic: an invalid signature in a thinking block),
and the refusal repeats on every later request of the conversation. So when a conversation moves
from one API to another, a block's signature goes only to the API that minted it (`Block.signed_by`,
stamped at commit with the operation adapter's `api`), and a block whose signer is unknown (an
older log, a block submitted without `signed_by`) is sent as it always was.

What a renderer does without the signature is the API's own: reasoning that cannot be sent signed
is left out, as an unsigned thinking block always was; a Gemini function call keeps its place and
carries `FOREIGN_CALL_SIGNATURE` (below).
"""

from __future__ import annotations

from turnledger.model.graph import Block

FOREIGN_CALL_SIGNATURE = "skip_thought_signature_validator"
"""What Gemini documents for a function call it did not generate (history moved from another model):
Gemini 3 refuses a call of the current turn without a signature ("Function call is missing a
thought_signature"), and accepts this value in its place (ai.google.dev/gemini-api/docs/
thought-signatures, FAQ; used so by gemini-cli and Google's .NET SDK, per earendil-works/pi#1829 and
tensorzero/tensorzero#5640)."""


def own_signature(block: Block, api: str) -> str | None:
    """The block's signature when `api` may send it: minted by `api`, or by no one we know of."""
    if block.signed_by is None or block.signed_by == api:
        return block.signature
    return None


def foreign_signature(block: Block, api: str) -> bool:
    """Does the block carry a signature that another API minted?"""
    return block.signature is not None and block.signed_by is not None and block.signed_by != api
