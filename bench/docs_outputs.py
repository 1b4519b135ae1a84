"""Rewrite the outputs that README.md and docs/*.md show from real runs: ``make docs-outputs``.

Every block marked ``<!-- output: NAME -->`` is what the shell block before it printed (or, for
``demo``, what ``make demo`` prints), run on loopback against a moto this script starts, in a
scratch directory, then cut to the lines the page shows (``...`` where lines are left out).
A page's runnable blocks run in order, in a directory and against a moto of the page's own, so a
block may use what an earlier one made (the tour's dataset, results and JOB_ID). It takes a few
minutes (the local stack, the demo); ``--skip NAME`` leaves a block as it is.
tests/unit/test_docs_outputs.py and tests/e2e/test_docs_runnable.py hold the shown blocks to
what the code prints.

    .venv/bin/python bench/docs_outputs.py [--skip demo --skip tour-stack]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lambdaml.local.services import running, start_moto
from tests.docs_blocks import Block, Runner, blocks, documents


@dataclass(frozen=True)
class Recipe:
    """How a shown block is made: which commands' output (by index in its block: -1 the last),
    and which lines it keeps (each a regular expression; none: every line)."""

    keep: tuple[str, ...] = ()
    show: tuple[int, ...] | None = None  # None: every command's
    command: str | None = None  # instead of the block before: this command
    start: str | None = None  # the lines from the first that matches this on (before: none, and no "...")


#: The lines a result ends with, as ``print_result`` prints them.
RESULT_LINES = (r"^test accuracy", r"^job \S+ finished in", r"^cost ", r"^result: ", r"^collective ")
#: A job's first line and its last epoch (the epochs and progress lines before it vary in number).
JOB_LINES = (r"^job \S+: training ", r"^\s*epoch\s+(\d+)/\1\s+loss ")

RECIPES = {
    "demo": Recipe(command=".venv/bin/lambdaml demo", start=r"^test accuracy"),
    "tour-train": Recipe(
        show=(-1,),
        keep=(*JOB_LINES, r"^time and traffic per worker", r"^rank ", r"^─+$", r"^\s+0\s", *RESULT_LINES),
    ),
    "tour-use": Recipe(keep=(r"^job \S+ \(\w+\) on ", r"^accuracy ", r"^\d+ predictions of job ")),
    "tour-compare": Recipe(show=(-1,)),
    "tour-stack": Recipe(keep=(r"^local stack .* is (up|down)", *JOB_LINES, r"^job \S+ finished in")),
    "tour-advise": Recipe(),
}


def excerpt(text: str, keep: Sequence[str]) -> str:
    """The lines that match one of ``keep`` (all, if none given); each run of lines left out is one ``...``."""
    if not keep:
        return text.rstrip("\n") + "\n"
    patterns = [re.compile(p) for p in keep]
    lines: list[str] = []
    dropped: str | None = None  # the first line of the run being left out
    for line in text.rstrip("\n").splitlines():
        if any(p.search(line) for p in patterns):
            if dropped is not None:
                lines.append(" " * (len(dropped) - len(dropped.lstrip())) + "...")
                dropped = None
            lines.append(line)
        elif dropped is None:
            dropped = line
    if dropped is not None:
        lines.append(" " * (len(dropped) - len(dropped.lstrip())) + "...")
    return "\n".join(lines) + "\n"


def regenerate(path: Path, runner: Runner, skip: set[str]) -> list[str]:
    """Run the page's blocks in order and rewrite its marked outputs; the names rewritten."""
    text = path.read_text()
    replaced: list[tuple[Block, str]] = []
    before: Block | None = None  # the shell block before the next output block
    printed: list[str] | None = None  # what it printed, command by command, once run
    for block in blocks(path, text):
        if block.output is None:
            if block.language == "sh":
                before, printed = block, (runner.run_each(block) if block.runnable else None)
            continue
        recipe = RECIPES.get(block.output)
        if recipe is None:
            raise SystemExit(f"{block.where}: no recipe for output {block.output!r} in {__file__}")
        if block.output in skip:
            print(f"  {block.output}: skipped")
            continue
        print(f"  {block.output} ...", flush=True)
        if recipe.command is not None:
            outs = runner.run_each(Block(path, "sh", (), recipe.command + "\n", 0, 0, None))
        elif before is None:
            raise SystemExit(f"{block.where}: no shell block before output {block.output!r}")
        else:
            outs = printed if printed is not None else runner.run_each(before)
        chosen = "".join(outs if recipe.show is None else [outs[i] for i in recipe.show])
        if recipe.start is not None:
            found = re.search(recipe.start, chosen, re.M)
            if found is None:
                raise SystemExit(f"{block.where}: no line matches {recipe.start!r} in what it printed:\n{chosen}")
            chosen = chosen[found.start() :]
        replaced.append((block, excerpt(chosen, recipe.keep)))
        before, printed = None, None
    # The page as it is now (minutes later): its blocks found again by name.
    text = path.read_text()
    now = {b.output: b for b in blocks(path, text) if b.output}
    for block, body in sorted(((now[b.output], body) for b, body in replaced if b.output in now),
                              key=lambda r: r[0].start, reverse=True):  # fmt: skip
        text = text[: block.start] + body + text[block.end :]
    path.write_text(text)
    return [b.output or "" for b, _ in replaced]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", action="append", default=[], metavar="NAME", help="leave this output as it is")
    args = parser.parse_args()
    unknown = set(args.skip) - set(RECIPES)
    if unknown:
        parser.error(f"no output named {', '.join(sorted(unknown))}; known: {', '.join(RECIPES)}")
    for path in documents():
        if not any(b.output for b in blocks(path)):
            continue
        print(f"{path.name}:", flush=True)
        # Each page on its own, as a reader takes it: a fresh directory and moto.
        with tempfile.TemporaryDirectory(prefix="lambdaml-docs-") as scratch, running(start_moto()) as (moto,):
            runner = Runner(Path(scratch), moto.url)
            try:
                done = regenerate(path, runner, set(args.skip))
            finally:
                runner.stop_stacks()
        print(f"  rewrote {', '.join(done) or 'nothing'}")


if __name__ == "__main__":
    main()
