"""Tracking in the job file and on the command line: ``tracking: {mlflow: URI}`` and ``train --mlflow``.

A URI is checked on load (a known scheme, no credentials), and where a job is tracked is no part
of what it computes: its spec hash, which tells a resumed job file from another, ignores it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from lambdaml import cli
from lambdaml.cli.parser import build_parser
from lambdaml.config import load_job, parse_job
from lambdaml.errors import ConfigError
from lambdaml.runtime.records import spec_hash
from lambdaml.tracking import INSTALL_HINT, REQUEST_BOUNDS, bounded_requests, reason, require_tracker

HINT = "tracking.mlflow: must be an MLflow tracking URI like http://127.0.0.1:5000"


def job(**extra: Any) -> dict[str, Any]:
    return {"dataset": "d", "algorithm": {"lr": 0.5}, **extra}


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_job(data, "job.yaml")
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --- the job file -------------------------------------------------------------------


def test_a_job_file_tracking_block_parses(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("dataset: d\ntracking:\n  mlflow: sqlite:///mlflow.db\n")
    spec = load_job(path)
    assert spec.tracking is not None and spec.tracking.mlflow == "sqlite:///mlflow.db"
    assert parse_job(job()).tracking is None  # optional: untracked by default


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://mlflow.example.com/prefix",
        "http://[::1]:5000",
        "sqlite:///mlflow.db",
        "sqlite:////var/lib/mlflow/runs.db",
        "sqlite:///My Runs/mlflow.db",
        "file:///tmp/mlruns",
        "databricks",
        "databricks://my-profile",
        "postgresql+psycopg2://db.internal:5432/mlflow",
    ],
)
def test_mlflow_tracking_uris_pass_unchanged(uri: str) -> None:
    spec = parse_job(job(tracking={"mlflow": uri}))
    assert spec.tracking is not None and spec.tracking.mlflow == uri


@pytest.mark.parametrize(
    "uri",
    ["ftp://host/x", "mlflow.db", "", "http://", "s3://bucket/runs", "http://h:99999", "http://h/?token=x", "a\tb"],
)
def test_a_bad_tracking_uri_is_refused_in_one_line(uri: str) -> None:
    message = refused(job(tracking={"mlflow": uri}))
    assert message.startswith(f"job.yaml: {HINT}"), message


def test_credentials_in_a_tracking_uri_are_refused_without_echoing_them() -> None:
    message = refused(job(tracking={"mlflow": "https://admin:hunter2@mlflow.example.com"}))
    assert "tracking: mlflow: a tracking URI never carries credentials" in message
    assert "hunter2" not in message and "MLFLOW_TRACKING_PASSWORD" in message


def test_tracking_refuses_unknown_keys_and_non_strings() -> None:
    assert "tracking.wandb: unknown field" in refused(job(tracking={"wandb": "x"}))
    assert "tracking.mlflow: Input should be a valid string" in refused(job(tracking={"mlflow": 5}))


# --- the job's identity ---------------------------------------------------------------


def test_where_a_job_is_tracked_is_no_part_of_its_spec_hash() -> None:
    untracked = parse_job(job())
    tracked = parse_job(job(tracking={"mlflow": "sqlite:///a.db"}))
    elsewhere = parse_job(job(tracking={"mlflow": "http://127.0.0.1:5000"}))
    assert spec_hash(untracked) == spec_hash(tracked) == spec_hash(elsewhere)
    assert spec_hash(parse_job(job(algorithm={"lr": 0.25}))) != spec_hash(untracked)


def test_a_job_from_before_tracking_existed_hashes_as_it_did() -> None:
    """The hash of a job claimed by an earlier version (its spec has no tracking key) is unchanged,
    so such a job can still be resumed."""
    spec = parse_job(job())
    before = {k: v for k, v in spec.model_dump(mode="json").items() if k != "tracking"}
    canonical = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert spec_hash(spec) == hashlib.sha256(canonical.encode()).hexdigest()[:16]


# --- the command line ------------------------------------------------------------------


def test_train_takes_mlflow() -> None:
    args = build_parser().parse_args(["train", "job.yaml", "--mlflow", "sqlite:///m.db"])
    assert args.mlflow == "sqlite:///m.db"
    assert build_parser().parse_args(["train", "job.yaml"]).mlflow is None


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("ftp://host/x", f"error: job.yaml with --mlflow: {HINT}"),
        ("http://u:hunter2@127.0.0.1:5000", "error: job.yaml with --mlflow: tracking: mlflow: a tracking URI never"),
    ],
)
def test_a_bad_mlflow_option_is_one_line_before_anything_runs(
    uri: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    # An endpoint nothing listens on: the option is refused before any client is made.
    Path("job.yaml").write_text("dataset: d\nstorage:\n  endpoint_url: http://127.0.0.1:9\n")
    assert cli.main(["train", "job.yaml", "--mlflow", uri]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected), err
    assert "hunter2" not in err[0]
    assert not (tmp_path / "results").exists()


# --- before any worker starts ----------------------------------------------------------


def test_tracking_without_mlflow_is_refused_with_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    require_tracker(parse_job(job()))  # untracked: nothing is needed
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow now raises ImportError
    with pytest.raises(ConfigError) as info:
        require_tracker(parse_job(job(tracking={"mlflow": "http://127.0.0.1:5000"})))
    assert str(info.value) == INSTALL_HINT == "tracking.mlflow needs MLflow: pip install 'lambdaml[mlflow]'"


def test_a_database_store_without_sqlalchemy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)
    with pytest.raises(ConfigError, match=r"a sqlite: store needs sqlalchemy and alembic: pip install"):
        require_tracker(parse_job(job(tracking={"mlflow": "sqlite:///m.db"})))
    require_tracker(parse_job(job(tracking={"mlflow": "http://127.0.0.1:5000"})))  # a server needs neither


def test_a_file_store_needs_mlflows_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = pytest.importorskip("mlflow.environment_variables")
    if not hasattr(environment, "MLFLOW_ALLOW_FILE_STORE"):
        pytest.skip("this MLflow takes a file: store without an opt-in")
    spec = parse_job(job(tracking={"mlflow": "file:///tmp/mlruns"}))
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError, match=r"MLFLOW_ALLOW_FILE_STORE=true; use a sqlite:///PATH.db store"):
        require_tracker(spec)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    require_tracker(spec)


# --- bounded, and one line -----------------------------------------------------------------


def test_request_bounds_hold_only_while_a_run_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with bounded_requests():
        assert {name: os.environ[name] for name in REQUEST_BOUNDS} == REQUEST_BOUNDS
        assert int(os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) <= 10
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "120"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def wrapped(inner: BaseException) -> RuntimeError:
    """``inner`` under a paragraph of URLs, as MLflow raises a network failure."""
    try:
        try:
            raise inner
        except OSError as exc:
            raise RuntimeError("API request to http://127.0.0.1:1/api/2.0/mlflow/x failed: " + "y" * 500) from exc
    except RuntimeError as outer:
        return outer


def test_a_trackers_failure_is_said_in_a_few_words() -> None:
    assert reason(wrapped(ConnectionRefusedError(111, "Connection refused"))) == "[Errno 111] Connection refused"
    assert reason(wrapped(TimeoutError("timed out"))) == "no answer within 5 s (timed out)"
    assert reason(RuntimeError("line one\n  line two")) == "line one line two"
    assert len(reason(RuntimeError("x" * 5000))) == 300
    assert reason(ModuleNotFoundError("No module named 'mlflow'", name="mlflow")) == INSTALL_HINT
    assert reason(ModuleNotFoundError("No module named 'onnx'", name="onnx")) == "No module named 'onnx'"
