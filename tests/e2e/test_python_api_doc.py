"""docs/python-api.md's walk-through, run word for word as a notebook would run its cells.

Every ``python`` block of the page, in order, in one fresh interpreter reading its program from
stdin (as a notebook kernel does: no main module for spawned workers to import again), against
moto on a free port instead of the page's ``http://127.0.0.1:5000``. Each ``print`` whose line
ends in a comment must print what the comment says (``…`` stands for a job id or a path; text
after a ``:`` in the comment explains, and is not printed).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import Services, unique_name

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "python-api.md"
DOC_ENDPOINT = "http://127.0.0.1:5000"


def cells() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def expected_prints(program: str) -> list[re.Pattern[str]]:
    """What each commented print should show, as a pattern (``…`` matches anything)."""
    patterns = []
    for line in program.splitlines():
        if line.startswith("print(") and "  # " in line:
            comment = line.split("  # ", 1)[1]
            if ": " in comment:
                comment = comment.split(": ", 1)[0]
            patterns.append(re.compile(".*".join(re.escape(part) for part in comment.split("…"))))
    return patterns


def test_the_walk_through_runs_and_prints_what_the_page_says(services: Services, tmp_path: Path) -> None:
    program = "\n".join(cells())
    assert "lambdaml.train(" in program and "load_model" in program and "to_sklearn" in program and "to_onnx" in program
    runnable = (
        program.replace(DOC_ENDPOINT, services.moto_url)
        .replace('"lambdaml-data"', f'"{unique_name("data")}"')
        .replace('"lambdaml-comm"', f'"{unique_name("comm")}"')
    )
    patterns = expected_prints(runnable)  # the page's bucket names replaced as in the code
    done = subprocess.run(
        [sys.executable, "-"], input=runnable, capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()
    assert len(printed) == len(patterns), done.stdout
    for line, pattern in zip(printed, patterns, strict=True):
        assert pattern.fullmatch(line), f"the page says {pattern.pattern!r}, the code printed {line!r}"
    assert (tmp_path / "bc.onnx").is_file()
