"""The roles, block kinds and result statuses the adapters' loops compare against, as plain strings.

On CPython 3.11 looking up an enum member (`BlockKind.TOOL_CALL`) costs several times the string
comparison it feeds, and a render makes a few of them per block. The values are the enums' own.
"""

from __future__ import annotations

from turnledger.model.graph import BlockKind, ResultStatus, Role

SYSTEM: str = Role.SYSTEM.value
USER: str = Role.USER.value
ASSISTANT: str = Role.ASSISTANT.value
TOOL: str = Role.TOOL.value

TOOL_CALL: str = BlockKind.TOOL_CALL.value
TOOL_RESULT: str = BlockKind.TOOL_RESULT.value
CALL_OR_RESULT: frozenset[str] = frozenset({TOOL_CALL, TOOL_RESULT})

ERROR: str = ResultStatus.ERROR.value
CANCEL: str = ResultStatus.CANCEL.value
FAILED: frozenset[str] = frozenset({ERROR, CANCEL})
