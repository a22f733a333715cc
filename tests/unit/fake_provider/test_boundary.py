"""The fake provider stands alone: it imports nothing of turnledger but itself, so it tests our parsers
and adapters instead of agreeing with them by construction."""

from __future__ import annotations

import ast
from pathlib import Path

import turnledger.fake_provider

PACKAGE = Path(turnledger.fake_provider.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            modules.add(node.module)
    return modules


def _outside(module: str) -> bool:
    return module.split(".")[0] == "turnledger" and module.split(".")[:2] != ["turnledger", "fake_provider"]


def test_fake_provider_imports_no_other_turnledger_package() -> None:
    sources = sorted(PACKAGE.glob("*.py"))
    assert len(sources) > 1
    outside = {(p.name, module) for p in sources for module in _imported_modules(p) if _outside(module)}
    assert not outside
