"""Result files are input to ``compare`` and ``advise --from-result``: a malformed one, a JSON bomb
or one lacking a part the command reads ends in one line naming the file, and exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambdaml import cli
from lambdaml.runtime import reports
from tests.helpers import cli_error_line as one_line
from tests.unit.test_tables_fit import job_result

ADVISE = ["advise", "--model", "lr", "--features", "28", "--samples", "1e5", "--target-loss", "0.5"]


def result_json(**change: Any) -> dict[str, Any]:
    return {**job_result(workers=2).to_json(), **change}


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_sound_result_still_compares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "ok.json", json.dumps(result_json()))
    assert cli.main(["compare", path, "--output", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 1


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"spec": {"name": "x", "workers": 2}}, "channel.kind"),  # once a KeyError traceback
        ({"spec": {"name": "x", "channel": "s3"}}, "channel.kind"),
        ({"spec": {"name": "x", "channel": {"kind": "s3"}, "sync": ["allreduce"]}}, "spec.sync"),
        ({"workers": []}, "no workers"),
        ({"cost": {}}, "total_dollars"),
        ({"cost": {"total_dollars": "free"}}, "total_dollars"),
    ],
)
def test_compare_names_the_part_a_result_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], fragment: str
) -> None:
    path = write(tmp_path, "bad.json", json.dumps(result_json(**change)))
    one_line(["compare", path], capsys, path, fragment)


BOMB = "[" * 200_000 + "]" * 200_000  # json.loads recurses past Python's limit


@pytest.mark.parametrize(
    "text",
    [
        BOMB,
        # Nested inside a sound result's spec, within the recursion limit but beyond any real result.
        json.dumps(result_json(spec={"channel": {"kind": "s3"}, "deep": json.loads("[" * 100 + "]" * 100)})),
    ],
)
def test_deep_json_is_refused_before_it_is_parsed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = write(tmp_path, "deep.json", text)
    one_line(["compare", path], capsys, path, "nested deeper than 64")
    one_line([*ADVISE, "--from-result", path], capsys, path, "nested deeper than 64")


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = json.dumps({"a": "[" * 1000, "b": ['"]{' * 10]})
    assert not reports.json_depth_exceeds(text, 2)
    assert reports.json_depth_exceeds(json.dumps([[[1]]]), 2)


def test_advise_reads_the_result_as_a_typed_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "curve.json", json.dumps(result_json(loss_curve=[{"epoch": 1, "loss": "low"}])))
    one_line([*ADVISE, "--from-result", path], capsys, path, "loss_curve[0]")
    missing = str(tmp_path / "none.json")
    one_line([*ADVISE, "--from-result", missing], capsys, missing, "no such result file")


def test_an_oversized_result_file_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reports, "MAX_RESULT_FILE_BYTES", 1000)
    path = write(tmp_path, "big.json", json.dumps(result_json()))
    one_line(["compare", path], capsys, path, "too large")
