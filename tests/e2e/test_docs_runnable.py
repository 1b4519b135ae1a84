"""Every shell block that README.md and docs/ mark runnable (```` ```sh runnable ````) runs as
written: a page's blocks in order (a block may use what an earlier one made), in a scratch
directory of the page's own, against a moto of the page's own that this test starts (the pages'
``http://127.0.0.1:5000`` is its address; JOB_ID is the job the page's blocks last trained). The
output shown after such a block (``<!-- output: NAME -->``) has only lines of the shapes the run
printed, figures aside."""

from __future__ import annotations

from pathlib import Path

import pytest

from lambdaml.local.services import running, start_moto
from tests.docs_blocks import Block, Runner, blocks, documents, unmatched

pytestmark = pytest.mark.timeout(600)


def runnable() -> list[Block]:
    return [b for path in documents() for b in blocks(path) if b.runnable]


def test_the_tour_is_marked_runnable() -> None:
    # Guards the test below against a marking lost in an edit.
    assert sum(b.path.name == "README.md" for b in runnable()) >= 4


def test_every_runnable_block_runs_and_prints_what_its_page_shows(tmp_path: Path) -> None:
    ran = 0
    for path in documents():
        page = blocks(path)
        if not any(b.runnable for b in page):
            continue
        work = tmp_path / path.stem
        work.mkdir()
        with running(start_moto(log_path=tmp_path / f"moto-{path.stem}.log")) as (moto,):
            runner = Runner(work, moto.url)
            try:
                for block, after in zip(page, [*page[1:], None], strict=True):
                    if not block.runnable:
                        continue
                    printed = runner.run(block)  # fails naming the command that failed
                    ran += 1
                    if after is not None and after.output is not None:
                        wrong = unmatched(after, printed)
                        assert not wrong, (
                            f"{after.where} ({after.output}) shows lines this run printed none like "
                            f"(make docs-outputs rewrites them):\n" + "\n".join(wrong) + f"\n--- printed:\n{printed}"
                        )
            finally:
                runner.stop_stacks()
    assert ran == len(runnable())
    assert list((tmp_path / "README" / "results" / "tour").glob("*.json")), "the tour's train wrote no result"
