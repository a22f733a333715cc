"""Per-module mutation scores from mutmut's results in ./mutants (`make mutation` prints this).

Run from the repository root after `mutmut run`: one row per mutated module that has results
(killed / tested, where tested excludes mutants not yet checked), then every surviving mutant by name,
for docs/mutation-report.md. Reads only mutmut's own `.meta` files.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code


def main(root: Path = Path("mutants")) -> int:
    survivors: list[str] = []
    print(f"{'module':45} {'killed':>6} {'tested':>6} {'score':>7}  other")
    for meta in sorted(root.glob("turnledger/**/*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        statuses = Counter(status_by_exit_code[code] for code in codes.values())
        killed = statuses["killed"] + statuses["timeout"] + statuses["caught by type check"]
        tested = sum(n for status, n in statuses.items() if status != "not checked")
        if not tested:
            continue
        module = str(meta.relative_to(root))[: -len(".meta")]
        other = ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()) if s not in ("killed", "timeout"))
        print(f"{module:45} {killed:6} {tested:6} {100 * killed / tested:6.1f}%  {other}")
        survivors += [
            name for name, code in codes.items() if status_by_exit_code[code] in ("survived", "no tests")
        ]
    print("\nsurvived / no tests:")
    for name in sorted(survivors):
        print(" ", name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
