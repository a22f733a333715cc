"""The one place the projections and replay import the Avro codec from.

The codec is landing as `turnledger.model.codec` (the name the dispatch engine
imports); its first version lived at `turnledger.codec`. Importing through here keeps
that naming question out of every other module.
"""

from __future__ import annotations

try:
    from turnledger.model.codec import CodecError, decode, encode  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on which branch landed first
    from turnledger.codec import CodecError, decode, encode  # type: ignore[import-not-found,no-redef,unused-ignore]

__all__ = ["CodecError", "decode", "encode"]
