"""Measures of the code itself, one test each: a measure that slips fails here, naming where."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import add_inner_blocks, cc_visit
from radon.visitors import Class

ROOT = Path(__file__).resolve().parents[2]

#: Packages whose every function (methods and nested functions included) stays readable: the
#: worker core, the runtime around it and the backends, where new features tend to land.
COMPLEXITY_PACKAGES = ("lambdaml/runtime", "lambdaml/backends")
MAX_COMPLEXITY = 15


def test_no_function_in_the_runtime_or_backends_exceeds_the_complexity_bound() -> None:
    over = []
    for package in COMPLEXITY_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for block in add_inner_blocks(cc_visit(path.read_text())):
                if not isinstance(block, Class) and block.complexity > MAX_COMPLEXITY:
                    over.append(f"{path.relative_to(ROOT)}:{block.lineno} {block.fullname} ({block.complexity})")
    assert not over, f"cyclomatic complexity over {MAX_COMPLEXITY} (radon): " + ", ".join(sorted(over))
