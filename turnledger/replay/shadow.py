"""`shadow diff`: legacy provider requests against our manifests (rollout step one).

Legacy capture format (JSON Lines, UTF-8): one object per line,

    {"operationId": "<the operation id the gateway used>", "request": {<the JSON body sent>}}

Optional keys are ignored. Blank lines and lines starting with `#` are skipped. The
operation id joins a legacy request to the manifest our processor issued for the
same operation (the last ManifestIssued of that operation on `turnledger.manifests`).
Byte equality compares the canonical JSON of the legacy body with our request bytes;
the semantic diff says what differs when they are not equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from turnledger.model.canonical import canonical_json
from turnledger.model.manifest import DispatchManifest
from turnledger.replay.semantic_diff import Difference, semantic_diff


class LegacyFormatError(ValueError):
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


@dataclass
class ShadowResult:
    operation_id: str
    line: int
    manifest_digest: str | None = None
    adapter: str | None = None
    bytes_equal: bool = False
    differences: list[Difference] = field(default_factory=list)

    @property
    def status(self) -> str:
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
        out.append(LegacyRequest(item["operationId"], item["request"], n))
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


def compare_all(
    legacy: Iterable[LegacyRequest], manifests: dict[str, DispatchManifest]
) -> list[ShadowResult]:
    return [compare(item, manifests.get(item.operation_id)) for item in legacy]
