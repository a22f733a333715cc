"""The spec's rollout, as a switch: which manifests the protocol sends, and who runs tool calls.

1. `manifests-only`: the processor builds manifests; the legacy gateway sends every
   request, and `turnledger shadow diff` compares its requests with our manifests.
2. `without-tools`: the protocol sends requests without tools; the legacy gateway keeps
   the tool turns.
3. `all`: the protocol sends everything and runs the canonical tool calls.

"Without tools" means: the request declares no tool, and its sequence holds no tool
call and no tool result. A request that only carries tool history still renders tool
blocks, so it belongs to the tool turns.

Whatever the legacy gateway sends, its responses reach the history only through the
canonical CAS, like ours: `turnledger legacy record` (gateway/legacy.py) replays them
as the attempt of the operation's manifest. So manifests stay comparable turn after
turn, and no stage can write a partial or duplicate answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum

from turnledger.model.canonical import digest_of
from turnledger.model.graph import BlockKind
from turnledger.model.manifest import DispatchManifest

EMPTY_TOOLSET_DIGEST = digest_of([])
"""The manifest's `toolsetDigest` of a request that declares no tools (prepare.py digests the list)."""

TOOL_BLOCK_KINDS = frozenset({BlockKind.TOOL_CALL.value, BlockKind.TOOL_RESULT.value})


class RolloutStage(StrEnum):
    MANIFESTS_ONLY = "manifests-only"
    WITHOUT_TOOLS = "without-tools"
    ALL = "all"


def uses_tools(manifest: DispatchManifest) -> bool:
    """Does the request declare tools or carry tool calls or results?"""
    return manifest.toolset_digest != EMPTY_TOOLSET_DIGEST or any(
        block.kind in TOOL_BLOCK_KINDS for block in manifest.blocks
    )


PROTOCOL_SENDS: Mapping[RolloutStage, Callable[[DispatchManifest], bool]] = {
    RolloutStage.MANIFESTS_ONLY: lambda manifest: False,
    RolloutStage.WITHOUT_TOOLS: lambda manifest: not uses_tools(manifest),
    RolloutStage.ALL: lambda manifest: True,
}

PROTOCOL_RUNS_TOOL_CALLS: Mapping[RolloutStage, bool] = {
    RolloutStage.MANIFESTS_ONLY: False,
    RolloutStage.WITHOUT_TOOLS: False,  # every tool call comes from a tool turn, and those are legacy
    RolloutStage.ALL: True,
}


def protocol_sends(stage: RolloutStage, manifest: DispatchManifest) -> bool:
    """Does our worker send this manifest at this stage (else the legacy gateway does)?"""
    return PROTOCOL_SENDS[stage](manifest)


def protocol_runs_tool_calls(stage: RolloutStage) -> bool:
    return PROTOCOL_RUNS_TOOL_CALLS[stage]
