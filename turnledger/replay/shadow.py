"""`shadow diff`: legacy provider requests against our manifests (rollout step one).

Legacy capture format (JSON Lines, UTF-8): one object per line,

    {"operationId": "<the operation id the gateway used>", "request": {<the JSON body sent>},
     "conversationId": "<optional>"}

Other keys are ignored. Blank lines and lines starting with `#` are skipped. The
operation id (and the conversation id, when given) joins a legacy request to the
manifest our processor issued for the same operation: the last ManifestIssued of that
operation on `turnledger.manifests`. Operation ids are unique per conversation only, so
a line without a conversation id whose operation id several conversations use is
reported as ambiguous, never matched to one of them at random.
Byte equality compares the canonical JSON of the legacy body with our request bytes;
the semantic diff says what differs when they are not equal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from turnledger.errors import InputFileError
from turnledger.model.canonical import canonical_json
from turnledger.model.manifest import DispatchManifest
from turnledger.replay.semantic_diff import Difference, semantic_diff


class LegacyFormatError(InputFileError):
    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(
            f"{path}:{line}: {problem}. Expected one JSON object per line: "
            '{"operationId": "...", "request": {...}}'
        )


@dataclass(frozen=True, slots=True)
class LegacyRequest:
    operation_id: str
    request: Any
    line: int
    conversation_id: str | None = None


@dataclass
class ShadowResult:
    operation_id: str
    line: int
    manifest_digest: str | None = None
    adapter: str | None = None
    bytes_equal: bool = False
    differences: list[Difference] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)
    """Conversations that all have a manifest of this operation id (the line named none)."""

    @property
    def status(self) -> str:
        if self.ambiguous:
            return "ambiguous"
        if self.manifest_digest is None:
            return "no manifest"
        return "equal" if self.bytes_equal else ("differs" if self.differences else "same meaning")


def read_legacy(path: Path) -> list[LegacyRequest]:
    out = []
    for n, raw in enumerate(path.read_bytes().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LegacyFormatError(path, n, f"not JSON ({exc})") from exc
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("operationId"), str)
            or "request" not in item
        ):
            raise LegacyFormatError(path, n, "missing operationId (string) or request")
        conversation_id = item.get("conversationId")
        if conversation_id is not None and not isinstance(conversation_id, str):
            raise LegacyFormatError(path, n, "conversationId must be a string")
        out.append(LegacyRequest(item["operationId"], item["request"], n, conversation_id))
    return out


def compare(legacy: LegacyRequest, manifest: DispatchManifest | None) -> ShadowResult:
    result = ShadowResult(legacy.operation_id, legacy.line)
    if manifest is None:
        return result
    result.manifest_digest, result.adapter = manifest.manifest_digest, manifest.adapter
    ours = manifest.request_body.encode("utf-8")
    result.bytes_equal = canonical_json(legacy.request) == ours
    if not result.bytes_equal:
        result.differences = semantic_diff(legacy.request, orjson.loads(ours))
    return result


ManifestsByOperation = dict[tuple[str, str], DispatchManifest]
"""(conversation id, operation id) -> the last manifest issued for that operation."""


def compare_all(
    legacy: Sequence[LegacyRequest],
    manifests: ManifestsByOperation,
    progress: Callable[[int, int], None] | None = None,
) -> list[ShadowResult]:
    """A result per legacy line; `progress(done, total)`: the lines compared, after each."""
    by_operation: dict[str, dict[str, DispatchManifest]] = {}
    for (conversation_id, operation_id), manifest in manifests.items():
        by_operation.setdefault(operation_id, {})[conversation_id] = manifest
    results = []
    for item in legacy:
        candidates = by_operation.get(item.operation_id, {})
        if item.conversation_id is not None:
            results.append(compare(item, candidates.get(item.conversation_id)))
        elif len(candidates) > 1:
            results.append(ShadowResult(item.operation_id, item.line, ambiguous=sorted(candidates)))
        else:
            results.append(compare(item, next(iter(candidates.values()), None)))
        if progress is not None:
            progress(len(results), len(legacy))
    return results
