"""What the ``lambdaml`` command prints is printed as it is: never read as rich markup or emoji codes.

Messages carry job-file keys, paths, bucket names and servers' errors; ``[/x]`` in one used to
crash rich's markup parser with a traceback, and ``[blink]HELLO`` printed as ``HELLO``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.table import Table

from analytic_model.profile import save_profile
from lambdaml import cli
from lambdaml.cli.output import _print_profile
from lambdaml.config import parse_job
from lambdaml.errors import ConfigError

HOSTILE = "[/x] [blink]HELLO[/blink] [bold]B :x:"


def test_an_error_message_is_printed_literally_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(args: Any) -> int:
        raise ConfigError(f"bucket '../../etc' {HOSTILE}\nsecond line from botocore")

    monkeypatch.setattr(cli, "cmd_cancel", fail)
    assert cli.main(["cancel", "job-1", "--stack", "s"]) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.err == f"error: bucket '../../etc' {HOSTILE} second line from botocore\n"


def test_a_table_cell_and_title_are_printed_literally(capsys: pytest.CaptureFixture[str]) -> None:
    table = Table(title="[/t]", title_justify="left")
    table.add_column("cell")
    table.add_row(HOSTILE)
    cli.console.print(table)
    out = capsys.readouterr().out
    assert out.startswith("[/t]") and f"│ {HOSTILE} │" in out, out  # brackets and emoji code intact


def test_the_profile_table_prints_names_from_the_profile_literally(capsys: pytest.CaptureFixture[str]) -> None:
    channel = {"latency_put_s": 0.01, "latency_get_s": 0.01, "bandwidth_put_Bps": 1e8, "bandwidth_get_Bps": 1e8}
    measured = {
        "target": "stack:[/x]",
        "channels": {"[/x]": {**channel, "server_get_s": 0.001}},
        "faas": {"cold_start_s": {"numpy": 1.0}, "invoke_s": 0.1},
    }
    _print_profile(measured)
    out = capsys.readouterr().out
    assert "channels (stack:[/x])" in out and "\n[/x]   " in out, out  # the name whole, at the start of its row


def test_advise_keeps_its_bold_banner_and_prints_the_profile_name_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "p.json"
    save_profile({"target": "[/x] [blink]HELLO", "faas": {"shared_cores": 2}}, profile)
    argv = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "1.2GB", "--samples", "11e6"]
    assert cli.main([*argv, "--workers", "2", "--memory", "3008", "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "profile [/x] [blink]HELLO" in out
    assert "[bold]" not in out and "[/]" not in out  # the intended style is a style, not text


def test_a_failure_the_stack_reports_is_printed_literally(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from lambdaml.backends import stack as remote
    from lambdaml.errors import JobFailed

    job = parse_job({"dataset": "d", "workers": 1, "algorithm": {"epochs": 1}})
    path = tmp_path / "job.yaml"
    path.write_text("dataset: d\n")

    def wait(self: Any, run: Any, **kwargs: Any) -> dict[str, Any]:
        raise JobFailed(f"job job-1 failed: {HOSTILE}")  # the server's status error, as watch raises it

    monkeypatch.setattr(remote, "resolve_stack", lambda *args, **kwargs: object())
    monkeypatch.setattr(remote, "bind", lambda *args, **kwargs: job)
    run = SimpleNamespace(job=job, attempt=SimpleNamespace(job_id="job-1", number=1, started_at=0.0))
    monkeypatch.setattr(remote.StackBackend, "launch", lambda self, job, **kwargs: run)
    monkeypatch.setattr(remote.StackBackend, "wait", wait)
    assert cli.main(["train", str(path), "--stack", "s", "--job-id", "job-1"]) == 1
    err = capsys.readouterr().err
    assert HOSTILE in err and err.count("\n") == 1, err
