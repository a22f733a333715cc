"""Golden request bytes per adapter version, and the guarded way to (re)generate them.

Layout: tests/golden/adapters/<adapter_id>/<conversation>.json holds the exact body
bytes; <adapter_id>/digests.json records the adapter digest and, per conversation,
the request digest or the UnsupportedKind outcome.

Regeneration (`UPDATE_GOLDEN=1 pytest tests/unit/adapters` or
`python -m tests.unit.adapters.golden`) only ADDS: a new adapter version's directory
or a new conversation. It refuses to overwrite existing bytes, and refuses to touch a
directory whose recorded adapter digest differs from the adapter's: a byte change is
a new adapter version (new id, new directory), never an edit of an old one.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.unit.adapters.conversations import GOLDEN_CONVERSATIONS, params_for
from turnledger.adapters.base import Adapter, Rendered, RenderOutcome, UnsupportedKind

GOLDEN_ROOT = Path(__file__).resolve().parents[2] / "golden" / "adapters"
DIGESTS = "digests.json"


class GoldenVersionError(RuntimeError):
    """Refused: the change would rewrite an existing adapter version's golden."""


def render_all(adapter: Adapter) -> dict[str, RenderOutcome]:
    return {
        name: adapter.render(make(), params_for(adapter.provider))
        for name, make in GOLDEN_CONVERSATIONS.items()
    }


def _record(outcome: RenderOutcome) -> dict[str, Any]:
    if isinstance(outcome, Rendered):
        return {"requestDigest": outcome.request_digest}
    return {"unsupportedKind": outcome.kind, "blockId": outcome.block_id}


@dataclass
class Comparison:
    problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.missing


def compare(adapter: Adapter, outcomes: dict[str, RenderOutcome] | None = None) -> Comparison:
    outcomes = outcomes if outcomes is not None else render_all(adapter)
    result = Comparison()
    directory = GOLDEN_ROOT / adapter.adapter_id
    digests_path = directory / DIGESTS
    if not digests_path.exists():
        result.missing.append(str(digests_path))
        return result
    recorded = json.loads(digests_path.read_text())
    if recorded.get("adapterDigest") != adapter.digest:
        result.problems.append(
            f"{adapter.adapter_id}: rules digest {adapter.digest} != recorded {recorded.get('adapterDigest')}"
        )
    for name, outcome in outcomes.items():
        expected = recorded.get("conversations", {}).get(name)
        if expected is None:
            result.missing.append(f"{adapter.adapter_id}/{name}")
            continue
        if _record(outcome) != expected:
            result.problems.append(
                f"{adapter.adapter_id}/{name}: outcome {_record(outcome)} != recorded {expected}"
            )
        if isinstance(outcome, Rendered):
            path = directory / f"{name}.json"
            if not path.exists():
                result.problems.append(f"{path} missing")
            elif path.read_bytes() != outcome.body:
                result.problems.append(f"{adapter.adapter_id}/{name}: bytes differ from {path}")
    return result


def update(adapter: Adapter) -> list[str]:
    """Write goldens that do not exist yet; refuse any change to existing ones."""
    outcomes = render_all(adapter)
    directory = GOLDEN_ROOT / adapter.adapter_id
    digests_path = directory / DIGESTS
    recorded: dict[str, Any] = {"adapterDigest": adapter.digest, "conversations": {}}
    if digests_path.exists():
        recorded = json.loads(digests_path.read_text())
        if recorded.get("adapterDigest") != adapter.digest:
            raise GoldenVersionError(
                f"{adapter.adapter_id}: rules changed "
                f"(digest {adapter.digest} != {recorded.get('adapterDigest')}); "
                "bump the adapter version instead of rewriting its goldens"
            )
    written: list[str] = []
    for name, outcome in outcomes.items():
        old = recorded["conversations"].get(name)
        if old is not None:
            if old != _record(outcome):
                raise GoldenVersionError(
                    f"{adapter.adapter_id}/{name}: output changed; bump the adapter version"
                )
            continue
        directory.mkdir(parents=True, exist_ok=True)
        if isinstance(outcome, Rendered):
            path = directory / f"{name}.json"
            if path.exists() and path.read_bytes() != outcome.body:
                raise GoldenVersionError(f"{path}: bytes changed; bump the adapter version")
            path.write_bytes(outcome.body)
        recorded["conversations"][name] = _record(outcome)
        written.append(f"{adapter.adapter_id}/{name}")
    if written:
        digests_path.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    return written


def main() -> int:
    from turnledger.adapters.registry import ADAPTERS

    for adapter in ADAPTERS.values():
        for item in update(adapter):
            print("wrote", item)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Comparison", "GoldenVersionError", "UnsupportedKind", "compare", "render_all", "update"]
