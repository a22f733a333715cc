"""Where a conversation's state lives on the changelog: the snapshot formats, and the key of each
part of a state with the tag that says which part it is (the layout: `state_layout.py`).

Keys never collide. A split conversation id holds no separator, so a key's first separator ends the
conversation id and the tag after it says which kind of part it is. A content chunk's key has its
two integers (no separator in them) before the operation id: its fourth separator ends them, and
the rest is the operation id whatever separators it holds, so the key names one (conversation,
operation, block, chunk) and no part of another kind. (An operation or request key ends with the
operation id after its tag in the same way, a toolset key with the digest.)

A conversation id that contains the separator (U+001F) keeps the whole state in format 3 under the
id after two separators (`head_key`): no part key starts so (a part key's first separator is
followed by its tag), and no head holds a separator, so such a conversation and any other can never
write the same key, whatever their ids. Format 3 kept it under the bare id, which could be another
conversation's part key: such a value is read back only if it is this conversation's own whole
state (then moved to its key on the next write), and never deleted otherwise.
"""

from __future__ import annotations

from turnledger.dispatch.state import STATE_FORMAT_VERSION

SPLIT_FORMAT = 8
"""The snapshot format of a head and of its parts (their content is the format-3 state's)."""

ROWS_FORMAT = 7
"""The split format before a request's toolset was kept apart: read, never written."""

OBJECT_PARTS_FORMAT = 6
"""The split format before an operation's parts were rows (JSON objects): read, never written."""

PROGRESS_INLINE_FORMAT = 5
"""The split format before an operation's progress was kept apart: read, never written."""

INLINE_CONTENTS_FORMAT = 4
"""The split format before the assembler's contents were kept apart: read, never written."""

SPLIT_FORMATS = frozenset(
    {INLINE_CONTENTS_FORMAT, PROGRESS_INLINE_FORMAT, OBJECT_PARTS_FORMAT, ROWS_FORMAT, SPLIT_FORMAT}
)

SEPARATOR = "\x1f"
OPERATION_TAG = "o"
PROGRESS_TAG = "p"
REQUEST_TAG = "r"
TOOLSET_TAG = "s"
BLOCKS_TAG = "b"
TURNS_TAG = "t"
HANDLES_TAG = "h"
CONTENTS_TAG = "x"
CONTENTS_INFIX = f"{SEPARATOR}{CONTENTS_TAG}{SEPARATOR}"
"""What follows the conversation id in the key of a content chunk (`content_key`)."""
CHUNK = 16
"""Turn ids and handles per chunk: they only grow, so every chunk but the last is written once."""


def operation_key(conversation_id: str, operation_id: str) -> str:
    return f"{conversation_id}{SEPARATOR}{OPERATION_TAG}{SEPARATOR}{operation_id}"


def progress_key(conversation_id: str, operation_id: str) -> str:
    return f"{conversation_id}{SEPARATOR}{PROGRESS_TAG}{SEPARATOR}{operation_id}"


def request_key(conversation_id: str, operation_id: str) -> str:
    return f"{conversation_id}{SEPARATOR}{REQUEST_TAG}{SEPARATOR}{operation_id}"


def toolset_key(conversation_id: str, digest: str) -> str:
    return f"{conversation_id}{SEPARATOR}{TOOLSET_TAG}{SEPARATOR}{digest}"


def blocks_key(conversation_id: str, ordering: int) -> str:
    return f"{conversation_id}{SEPARATOR}{BLOCKS_TAG}{SEPARATOR}{ordering}"


def chunk_key(conversation_id: str, tag: str, index: int) -> str:
    return f"{conversation_id}{SEPARATOR}{tag}{SEPARATOR}{index}"


def content_key(conversation_id: str, operation_id: str, block_index: int, chunk: int) -> str:
    """Chunk `chunk` of the content of the operation's assembler block: the integers before the
    operation id, which may hold separators (module docstring)."""
    return f"{conversation_id}{CONTENTS_INFIX}{block_index}{SEPARATOR}{chunk}{SEPARATOR}{operation_id}"


def is_split(conversation_id: str) -> bool:
    return SEPARATOR not in conversation_id


WHOLE_PREFIX = SEPARATOR * 2


def head_key(conversation_id: str) -> str:
    """The key of the conversation's first record: its head, or its whole state (module docstring)."""
    return conversation_id if is_split(conversation_id) else WHOLE_PREFIX + conversation_id


def format_of(conversation_id: str) -> int:
    """The snapshot format every key of this conversation is written in."""
    return SPLIT_FORMAT if is_split(conversation_id) else STATE_FORMAT_VERSION
