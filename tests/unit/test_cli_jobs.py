"""The job commands' argument checks: what only a stack's job can do is refused, in one line, elsewhere."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lambdaml import cli


@pytest.mark.parametrize("flag", ["--detach", "--cancel-on-interrupt"])
def test_following_flags_need_a_stack(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "missing-job.yaml", flag]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} needs --stack" in err[0]


def test_without_a_stack_a_job_command_looks_only_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    for command in ("attach", "status", "logs", "cancel"):
        assert cli.main([command, "some-job"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"error: no job 'some-job' among the jobs run on this machine ({tmp_path}/jobs); "
            "for a stack's job add --stack NAME"
        ], command


def test_attach_to_an_unknown_local_stack_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    assert cli.main(["attach", "some-job", "--stack", "nowhere"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown stack 'nowhere'" in err[0]


def test_local_up_refuses_a_taken_port_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["local", "up", "--name", "ported", "--port", str(port)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"port {port} on 127.0.0.1 is taken" in err[0]
    assert not (tmp_path / "local" / "ported").exists() and not (tmp_path / "stacks").exists()


def test_local_status_of_an_unknown_stack_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    assert cli.main(["local", "status", "--name", "nowhere"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: no local stack named 'nowhere'; local stacks: none"]


def test_a_jobs_log_lines_are_its_invocations_from_start_to_the_next() -> None:
    from lambdaml.platforms.aws_lambda.logs import lines_of_job

    def event(at: int, message: str) -> dict[str, object]:
        return {"timestamp": at, "message": message + "\n", "eventId": str(at), "logStreamName": "s"}

    one = [  # one sandbox: an invocation of another job, then one of ours, then another again
        event(1, "START RequestId: r1 Version: $LATEST"),
        event(2, "[INFO]\tt\tr1\tlambdaml job other-job rank 0 attempt 1 invocation 1"),
        event(3, "other's line"),
        event(4, "START RequestId: r2 Version: $LATEST"),
        event(5, "[INFO]\tt\tr2\tlambdaml job our-job rank 3 attempt 1 invocation 1"),
        event(7, "our line"),
        event(8, "END RequestId: r2"),
        event(10, "START RequestId: r3 Version: $LATEST"),
        event(11, "[INFO]\tt\tr3\tlambdaml job our-job-2 rank 1 attempt 1 invocation 1"),  # a longer id
    ]
    two = [event(6, "START RequestId: r4 Version: $LATEST"), event(9, "\tlambdaml job our-job rank 0 attempt 2 ")]
    lines = lines_of_job([one, list(reversed(two))], "our-job")
    assert [(line.at_ms, line.rank) for line in lines] == [(4, 3), (5, 3), (6, 0), (7, 3), (8, 3), (9, 0)]
    assert lines[3].message == "our line"


class _InterruptedBackend:
    """A stack backend stand-in whose launch or wait is where Ctrl-C lands."""

    name = "lambda"
    uses_channel = True

    def __init__(self, interrupt_in: str) -> None:
        self.interrupt_in = interrupt_in

    def launch(self, job: object, *, job_id: str, resume: bool) -> object:
        if self.interrupt_in == "launch":
            raise KeyboardInterrupt
        from types import SimpleNamespace

        return SimpleNamespace(job=job, attempt=SimpleNamespace(job_id=job_id, number=1, started_at=0.0))

    def wait(self, run: object, *, on_event: object = None, on_progress: object = None) -> object:
        raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("interrupt_in", "expected"),
    [
        ("launch", "interrupted while starting job j-1; see whether it started with: lambdaml status j-1 --stack s"),
        (
            "wait",
            "interrupted: job j-1 goes on in stack s; follow it with: lambdaml attach j-1 --stack s; "
            "cancel it with: lambdaml cancel j-1 --stack s",
        ),
    ],
)
def test_ctrl_c_on_a_stack_job_says_in_one_line_where_the_job_stands(
    interrupt_in: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from lambdaml.cli.train import train_on_stack
    from lambdaml.config import parse_job

    job = parse_job({"name": "j", "workers": 2, "dataset": "d"}, "job")
    args = argparse.Namespace(stack="s", cancel_on_interrupt=False, results_dir=None, output="table")
    backend = _InterruptedBackend(interrupt_in)
    assert train_on_stack(job, backend, job_id="j-1", resume=False, args=args) == 130
    assert capsys.readouterr().err.strip().splitlines() == [expected]
