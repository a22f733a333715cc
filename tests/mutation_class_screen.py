"""Screen the mutants mutmut does not make: a module's class bodies and module-level statements.

mutmut mutates only the bodies of undecorated functions and methods. A module of pydantic models
(`model/events.py`) is all class bodies (field defaults, enum words, the field names a validator is
attached to) and properties, so mutmut makes no mutant of it at all. This script applies mutmut's own
operators to those statements (and, with `--functions`, to the functions' bodies too, edited into the
source instead of switched on), plus the hand-written mutants of `HAND` for properties, writes each
mutant into a copy of the repository and runs `pytest -x TEST ...` on it in a fresh interpreter (no
conftest, no plugins but those named with `--plugin`, e.g. `--plugin asyncio` for async tests). Prints
`killed` or `SURVIVED` and the mutation per mutant, then the counts.

    .venv/bin/python tests/mutation_class_screen.py turnledger/model/events.py \\
        tests/unit/test_model_events.py tests/unit/test_shared_models.py tests/unit/test_model_base.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import libcst as cst
from mutmut.mutation.file_mutation import create_mutations, deep_replace

HAND: dict[str, list[tuple[str, str]]] = {
    "turnledger/model/events.py": [
        (
            "DEFAULT_SETTLE_WITHIN_MS if self.settle_within_ms is None else",
            "DEFAULT_SETTLE_WITHIN_MS if self.settle_within_ms is not None else",
        ),
        (
            "DEFAULT_SETTLE_WITHIN_MS if self.settle_within_ms is None else",
            "DEFAULT_SETTLE_WITHIN_MS if not self.settle_within_ms else",
        ),
        ("return self.occurred_at_ms + within", "return self.occurred_at_ms - within"),
        ("return self.occurred_at_ms + within", "return within"),
        ("return self.text_offset + len(self.text)", "return self.text_offset - len(self.text)"),
        ("return self.text_offset + len(self.text)", "return len(self.text)"),
        ("return self.text_offset + len(self.text)", "return self.text_offset + len(self.text.encode())"),
    ],
    "turnledger/streaming/outcomes.py": [
        (
            "return self.status in (FeedStatus.ACCEPTED, FeedStatus.HELD)",
            "return self.status in (FeedStatus.ACCEPTED,)",
        ),
        (
            "return self.status in (FeedStatus.ACCEPTED, FeedStatus.HELD)",
            "return self.status in (FeedStatus.HELD,)",
        ),
        (
            "return self.status in (FeedStatus.ACCEPTED, FeedStatus.HELD)",
            "return self.status not in (FeedStatus.ACCEPTED, FeedStatus.HELD)",
        ),
        ("return self.status is FeedStatus.DUPLICATE", "return self.status is not FeedStatus.DUPLICATE"),
        ("return self.status is FeedStatus.FOREIGN", "return self.status is not FeedStatus.FOREIGN"),
        ('return tuple(b for b in self.blocks if b.kind == "tool_call")', "return self.blocks"),
        (
            'return tuple(b for b in self.blocks if b.kind == "tool_call")',
            'return tuple(b for b in self.blocks if b.kind != "tool_call")',
        ),
    ],
    "turnledger/sequence/validation.py": [
        ("return frozenset(r.code for r in self.rejections)", "return frozenset()"),
        (
            "return frozenset(r.code for r in self.rejections)",
            "return frozenset(r.code for r in self.rejections[:1])",
        ),
    ],
    "turnledger/model/deltas.py": [
        (
            "return (self.response_handle, self.generation, self.block_index, self.delta_sequence)",
            "return (self.response_handle, self.block_index, self.delta_sequence)",
        ),
        (
            "return (self.response_handle, self.generation, self.block_index, self.delta_sequence)",
            "return (self.response_handle, self.generation, self.delta_sequence)",
        ),
        (
            "return self.delta_sequence + len(following) if following else self.delta_sequence",
            "return self.delta_sequence - len(following) if following else self.delta_sequence",
        ),
        (
            "return self.delta_sequence + len(following) if following else self.delta_sequence",
            "return self.delta_sequence + len(following) - 1 if following else self.delta_sequence",
        ),
        (
            "return self.delta_sequence + len(following) if following else self.delta_sequence",
            "return self.delta_sequence",
        ),
    ],
    "turnledger/cli_refusals.py": [
        ("        DevstackSettingsError,\n", ""),
        ("        KafkaAccessError,\n", ""),
        ("        KafkaSettingsError,\n", ""),
        ("        LimitsConfigError,\n", ""),
        ("        MetricsServeError,\n", ""),
        ("        ModelRegistryError,\n", ""),
        ("        RedisAccessError,\n", ""),
        ("        RedisSettingsError,\n", ""),
        ("(KafkaUnavailableError, TopicMismatchError)", "(TopicMismatchError,)"),
        ("(KafkaUnavailableError, TopicMismatchError)", "(KafkaUnavailableError,)"),
        ('return f"{self.speaker}: {refusal}"', "return str(refusal)"),
        ('return f"{self.speaker}: {refusal}"', 'return f"{self.speaker}: {refusal!r}"'),
    ],
    "turnledger/replay/rebuild.py": [
        ("return not self.differences", "return self.differences"),
        ("return not self.differences", "return True"),
        ("return not self.differences", "return False"),
    ],
}
"""Mutants of property bodies (mutmut skips decorated functions), and of tables mutmut's operators leave whole
(a family dropped from `cli_refusals`'s), as (text, replacement)."""


def mutants(path: str, code: str, functions: bool = False) -> list[tuple[str, str]]:
    """(label, mutated source) for each mutant of `code`: outside functions, or with `functions`
    only inside them."""
    module, found, _, _ = create_mutations(path, code)
    out = []
    for mutation in found:
        if isinstance(mutation.contained_by_top_level_function, cst.FunctionDef) != functions:
            continue
        mutated = deep_replace(module, mutation.original_node, mutation.mutated_node)
        assert isinstance(mutated, cst.Module)
        before = module.code_for_node(mutation.original_node)[:60]
        after = module.code_for_node(mutation.mutated_node)[:60]
        out.append((f"{before!r} -> {after!r}", mutated.code))
    for old, new in [] if functions else HAND.get(path, []):
        assert code.count(old) == 1, old
        out.append((f"{old!r} -> {new!r}", code.replace(old, new)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("module", help="the module's path from the repository root")
    parser.add_argument("tests", nargs="+", help="the tests that must kill each mutant")
    parser.add_argument("--functions", action="store_true", help="mutate the functions' bodies instead")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        help="a pytest plugin the tests need, loaded by name (e.g. asyncio); repeatable",
    )
    args = parser.parse_args(argv)
    repo = Path.cwd()
    code = (repo / args.module).read_text()
    root = Path(tempfile.mkdtemp(prefix="class_screen_"))
    try:
        for name in ("turnledger", "tests", "schemas", "bench", "pyproject.toml"):
            if (repo / name).is_dir():
                shutil.copytree(repo / name, root / name, symlinks=True)
            else:
                shutil.copy(repo / name, root / name)
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--noconftest"]
        command += [arg for plugin in args.plugin for arg in ("-p", plugin)]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"
        }

        def fails() -> bool:
            done = subprocess.run(
                [*command, *args.tests], cwd=root, env=env, capture_output=True, check=False
            )
            return done.returncode != 0

        if fails():
            print("the unmutated copy fails the tests: nothing to screen", file=sys.stderr)
            return 2
        killed = survived = 0
        for label, mutated in mutants(args.module, code, args.functions):
            (root / args.module).write_text(mutated)
            if fails():
                killed += 1
                print("killed  ", label, flush=True)
            else:
                survived += 1
                print("SURVIVED", label, flush=True)
        print(f"mutants {killed + survived} killed {killed} survived {survived}")
    finally:
        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
