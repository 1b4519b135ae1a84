"""The local result file: its directory is checked before a job starts, and it is written whole or not at all.

An unwritable ``--results-dir`` used to be found only after training, as a FileExistsError
traceback while the bucket said succeeded; a full disk left a 0-byte result JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.runtime.reports import JobResult
from lambdaml.runtime.results import check_results_dir, save_result
from tests.unit.test_reports import RESULT


def test_a_file_in_the_way_of_the_results_dir_is_refused_before_anything(tmp_path: Path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="a file of that name is in the way"):
        check_results_dir(blocker)
    with pytest.raises(ConfigError, match=r"results/inner: cannot write there \(Not a directory\)"):
        check_results_dir(blocker / "inner")
    check_results_dir(tmp_path / "new" / "folder")  # made if missing
    assert (tmp_path / "new" / "folder").is_dir() and not list((tmp_path / "new" / "folder").iterdir())


def test_a_result_that_cannot_be_written_leaves_no_file_and_says_the_job_succeeded(tmp_path: Path) -> None:
    result = JobResult.from_json(RESULT)
    (tmp_path / f"{result.job_id}.json").mkdir()  # the name taken by a directory: the rename fails
    with pytest.raises(LambdaMLError, match=f"job {result.job_id} succeeded .* could not be written"):
        save_result(result, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{result.job_id}.json"]
    saved = save_result(result, tmp_path / "ok")
    assert saved.result_path == str(tmp_path / "ok" / f"{result.job_id}.json")
    assert JobResult.from_json(json.loads(Path(saved.result_path).read_text())).job_id == result.job_id
