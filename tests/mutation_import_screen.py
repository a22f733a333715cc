"""Screen mutants of code that runs at import, which mutmut's own runs cannot switch on.

mutmut imports the package once, then switches a mutant on per test run (`MUTANT_UNDER_TEST`). Code
that runs while the package is imported (an adapter's rules table, the registry built from them)
ran before any mutant was switched on, so its mutants "survive" every test. This script runs each
named mutant in a fresh interpreter with the switch set before the first import, and checks what
such code feeds: every shipped adapter's digest (`test_adapter_digests.py`) and golden request
bytes (`tests/unit/adapters/golden.py`). Exit status per mutant: 1 killed, 0 survived.

Usage, from the repository root after `make mutation` (names one per line, e.g. from its summary):

    .venv/bin/python tests/mutation_import_screen.py < survivors.txt

It runs in `mutants/` (mutmut's copy, with every mutant behind its switch) and prints
`killed NAME` or `survived NAME` per line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_CHECK = """
import os, sys
sys.path.insert(0, os.getcwd())
from tests.unit.adapters import golden
from tests.unit.adapters.test_adapter_digests import SHIPPED_DIGESTS
from turnledger.adapters.registry import ADAPTERS
ok = {i: a.digest for i, a in ADAPTERS.items()} == SHIPPED_DIGESTS
ok = ok and all(golden.compare(adapter).ok for adapter in ADAPTERS.values())
sys.exit(0 if ok else 1)
"""


def screen(name: str, root: Path) -> bool:
    """Is the mutant killed (the check fails, or the import itself does)?"""
    env = {**os.environ, "MUTANT_UNDER_TEST": name}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", _CHECK], cwd=root, env=env, capture_output=True, timeout=300, check=False
    )
    return done.returncode != 0


def main(root: Path = Path("mutants")) -> int:
    if screen("none", root):
        print("the unmutated copy fails the check: nothing to screen", file=sys.stderr)
        return 2
    for line in sys.stdin:
        name = line.strip()
        if name:
            print(f"{'killed' if screen(name, root) else 'survived'} {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
