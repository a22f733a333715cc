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

The same holds for state the tests themselves build before mutmut forks a child per mutant: a test
module's codec built at collection (`FAST = Codec(...)` in `test_codec_compiled.py`) compiled its
readers and writers with the unmutated compiler, and every child inherits them. With `--pytest
TEST ...` the check is those tests, run with `-x` in a fresh interpreter per mutant instead
(`--jobs N` screens N mutants at once):

    .venv/bin/python tests/mutation_import_screen.py --jobs 2 --pytest tests/unit/test_codec.py < names.txt
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
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


_PYTEST_ARGS = ("--hypothesis-profile", "mutation")


def screen(name: str, root: Path, tests: Sequence[str] = (), timeout_s: float = 600) -> str:
    """ "killed" (the check fails, or the import itself does), "survived", or "timeout" (the check ran
    past `timeout_s`: mutmut too stops such a mutant and does not count it as a survivor)."""
    env = {**os.environ, "MUTANT_UNDER_TEST": name}
    env.pop("PYTHONPATH", None)
    command = (
        [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:timeout",
            *_PYTEST_ARGS,
            *tests,
        ]
        if tests
        else [sys.executable, "-c", _CHECK]
    )
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "killed" if done.returncode != 0 else "survived"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=Path("mutants"), help="mutmut's copy (default: mutants)")
    parser.add_argument("--pytest", nargs="+", default=(), metavar="TEST", help="check with these tests")
    parser.add_argument("--jobs", type=int, default=1, help="mutants screened at once (default: 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a check may run (default: 600)")
    args = parser.parse_args(argv)
    if screen("none", args.root, args.pytest) != "survived":
        print("the unmutated copy fails the check: nothing to screen", file=sys.stderr)
        return 2
    names = [line.strip() for line in sys.stdin if line.strip()]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(screen, n, args.root, args.pytest, args.timeout): n for n in names}
        for future in as_completed(futures):
            print(f"{future.result()} {futures[future]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
