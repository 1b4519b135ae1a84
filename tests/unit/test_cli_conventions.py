"""The ``lambdaml`` command's conventions: --version, -v/-q anywhere, and every mistake on the
command line as one line with exit 1 (argparse's own errors included), while --help still works."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest

from lambdaml import cli
from lambdaml.cli.parser import build_parser, subcommands, verbosity, version
from lambdaml.errors import ConfigError

ADVISE = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "1.2GB", "--samples", "11e6"]
SMALL = ["--workers", "2", "--memory", "3008", "--instances", "c5.large", "--json"]


def lambdaml(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=60)


def test_version_prints_the_name_and_the_installed_version() -> None:
    done = lambdaml("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"lambdaml {metadata.version('lambdaml')}\n" and done.stderr == ""


def test_version_falls_back_to_the_package_version_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import lambdaml

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    monkeypatch.setattr(lambdaml, "__version__", "9.8.7")
    assert version() == "9.8.7"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-v", "train", "job.yaml"], 1),
        (["train", "job.yaml", "-v"], 1),
        (["train", "-v", "job.yaml"], 1),
        (["-v", "train", "job.yaml", "-v"], 2),
        (["-q", "train", "job.yaml"], -1),
        (["train", "job.yaml", "--quiet"], -1),
        (["local", "-v", "up", "-vv"], 3),
        (["-v", "data", "prepare", "d", "--synthetic", "higgs", "--shards", "1", "-q"], 0),
        (["status", "j", "--stack", "s"], 0),
    ],
)
def test_verbose_and_quiet_count_wherever_they_stand(argv: list[str], expected: int) -> None:
    assert verbosity(build_parser().parse_args(argv)) == expected


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["-v", *ADVISE, *SMALL], logging.INFO),
        ([*ADVISE, *SMALL, "-v"], logging.INFO),
        (["-v", *ADVISE, *SMALL, "-v"], logging.DEBUG),
        ([*ADVISE, "-q", *SMALL], logging.ERROR),
        (["-q", *ADVISE, *SMALL], logging.ERROR),
        ([*ADVISE, *SMALL], logging.WARNING),
    ],
)
def test_a_command_logs_at_the_level_its_flags_ask_for(
    argv: list[str], level: int, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    before = root.level
    try:
        assert cli.main(argv) == 0
        assert root.level == level
        assert cli.output.progress.quiet == (level == logging.ERROR)
    finally:
        root.setLevel(before)
    assert capsys.readouterr().out.startswith("{")  # the result itself is printed either way


def test_every_subcommand_takes_verbose_and_quiet() -> None:
    for parser, _ in subcommands(build_parser()):
        flags = {flag for action in parser._actions for flag in action.option_strings}
        assert {"-v", "--verbose", "-q", "--quiet"} <= flags, parser.prog


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        ([], ("lambdaml:", "required: COMMAND")),
        (["trian", "job.yaml"], ("invalid choice: 'trian'", "'train'")),
        (["train"], ("lambdaml train:", "required: job")),
        (["train", "job.yaml", "--workers", "x"], ("--workers", "invalid int value: 'x'")),
        (["train", "job.yaml", "--no-such-flag"], ("unrecognized arguments: --no-such-flag",)),
        (["local"], ("lambdaml local:", "required: COMMAND")),
        (["data", "prepare", "d", "--shards", "1"], ("one of the arguments --input --synthetic --builtin",)),
        (["advise", "--model", "lr"], ("lambdaml advise:", "--samples is required", "--job")),
        (["status"], ("lambdaml status:", "required: job_id")),
    ],
)
def test_a_command_line_mistake_is_one_line_and_exit_1(
    argv: list[str], fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == cli.EXIT_ERROR == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: lambdaml"), captured.err
    assert "usage:" not in captured.err and captured.out == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_as_a_process_a_missing_argument_is_one_line_and_exit_1() -> None:
    done = lambdaml("train")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "error: lambdaml train: the following arguments are required: job (see: lambdaml train --help)\n"
    )


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["local", "up", "-h"]])
def test_help_still_prints_the_usage_and_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    prog = " ".join(["lambdaml", *argv[:-1]])
    assert captured.out.startswith(f"usage: {prog} ") and captured.err == ""


# --- closed sets are the parser's choices, from the catalogue, checked before any work ---------


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["train", "job.yaml", "--backend", "lambda"], ("--backend", "invalid choice: 'lambda'", "'iaas-local'")),
        (["data", "prepare", "d", "--synthetic", "higs", "--shards", "1"], ("--synthetic", "'higs'", "'higgs'")),
        (["data", "prepare", "d", "--builtin", "mnist", "--shards", "1"], ("--builtin", "'mnist5k'")),
        (["data", "prepare", "d", "--input", "f", "--format", "svm", "--shards", "1"], ("--format", "'libsvm'")),
        (["calibrate", "--channels", "s3,memory"], ("--channels", "unknown channel 'memory'", "dynamodb")),
        (["advise", "--patterns", "ring", "--model", "lr"], ("--patterns", "unknown pattern 'ring'")),
    ],
)
def test_a_name_outside_a_closed_set_is_refused_by_the_parser(
    argv: list[str], fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    # The job file does not exist: a check after parsing would name it instead.
    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    for fragment in fragments:
        assert fragment in line, (fragment, line)


def test_the_closed_sets_are_what_the_code_accepts() -> None:
    from lambdaml import catalogue
    from lambdaml.backends import BACKENDS
    from lambdaml.calibrate import KINDS
    from lambdaml.data import builtin

    parser = build_parser()
    options = {(p.prog, flag): a for p, _ in subcommands(parser) for a in p._actions for flag in a.option_strings}
    backends = options["lambdaml train", "--backend"].choices or ()
    assert sorted(backends) == BACKENDS.names() == sorted(catalogue.BACKENDS)
    assert tuple(options["lambdaml data prepare", "--builtin"].choices or ()) == tuple(builtin.BUILTIN)
    assert options["lambdaml calibrate", "--channels"].type("s3, dynamodb") == ["s3", "dynamodb"]
    assert build_parser().parse_args(["calibrate"]).channels == list(KINDS) == ["s3", "redis", "memcached", "dynamodb"]


# --- compare draws its PNG only when asked; --output json wherever a table is printed ---------


@pytest.fixture
def two_results(tmp_path: Path) -> list[str]:
    from tests.unit.test_tables_fit import job_result

    paths = []
    for i, result in enumerate([job_result(workers=2), job_result(backend="local", channel="s3", workers=2)]):
        path = tmp_path / f"result-{i}.json"
        path.write_text(json.dumps(result.to_json()))
        paths.append(str(path))
    return paths


def test_compare_writes_no_png_unless_asked(
    two_results: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", *two_results]) == 0
    assert not list(tmp_path.rglob("*.png")) and "plot:" not in capsys.readouterr().out

    assert cli.main(["compare", *two_results, "--plot"]) == 0  # the default name, here
    assert (tmp_path / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "plot: comparison.png" in capsys.readouterr().out

    # An optional file name must not swallow a result file (and overwrite it with a picture).
    assert cli.main(["compare", "--plot", *two_results]) == 1
    assert "argument --plot: " in capsys.readouterr().err and json.loads(Path(two_results[0]).read_text())

    named = tmp_path / "plots" / "runs.png"
    named.parent.mkdir()
    assert cli.main(["compare", *two_results, "--plot", str(named), "--json"]) == 0
    assert named.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(capsys.readouterr().out)["plot"] == str(named)


def test_json_and_output_json_are_the_same_flag(capsys: pytest.CaptureFixture[str]) -> None:
    small = [a for a in SMALL if a != "--json"]
    assert cli.main([*ADVISE, *small, "--json"]) == 0
    short = capsys.readouterr()
    assert cli.main([*ADVISE, *small, "--output", "json"]) == 0
    long = capsys.readouterr()
    assert short == long and json.loads(long.out)["recommended"]
    assert cli.main([*ADVISE, *small, "--output", "yaml"]) == 1
    assert "argument --output: invalid choice: 'yaml'" in capsys.readouterr().err


def test_every_command_that_prints_a_table_takes_output_json() -> None:
    # predict's --output names the file its predictions go to, not a format of what it prints
    takes = {
        p.prog
        for p, _ in subcommands(build_parser())
        if any("--output" in a.option_strings and a.choices for a in p._actions)
    }
    tables = {
        "train",
        "attach",
        "jobs",
        "local status",
        "data list",
        "compare",
        "status",
        "cancel",
        "calibrate",
        "advise",
        "evaluate",
        "logs",  # its lines, one JSON object each
    }
    assert takes == {f"lambdaml {name}" for name in tables}


@pytest.mark.parametrize("command", ["compare", "advise"])
def test_plot_into_a_missing_directory_is_one_line_naming_it_and_creates_nothing(
    command: str, two_results: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    args = two_results if command == "compare" else ADVISE[1:]
    assert cli.main([command, *args, "--plot", str(missing / "x.png")]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert f"its directory '{missing}' does not exist" in line and line.startswith(f"error: lambdaml {command}:")
    assert captured.out == "", "it did some work before refusing"
    assert not (tmp_path / "nonexistent").exists()

    a_file = tmp_path / "file"
    a_file.write_text("")
    assert cli.main([command, *args, "--plot", str(a_file / "x.png")]) == 1
    assert f"its directory '{a_file}' is not a directory" in capsys.readouterr().err


# --- options are never abbreviated; a near miss gets a "did you mean" -------------------------


def test_no_parser_takes_an_abbreviated_option() -> None:
    for parser, _ in subcommands(build_parser()):
        assert parser.allow_abbrev is False, parser.prog
    with pytest.raises(ConfigError, match=r"unrecognized arguments: --worker 2"):
        build_parser().parse_args(["train", "job.yaml", "--worker", "2"])
    assert build_parser().parse_args(["train", "job.yaml", "--workers", "2"]).workers == 2


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["trian", "job.yaml"], ("lambdaml:", "invalid choice: 'trian'", "did you mean 'train'?")),
        (["local", "upp"], ("lambdaml local:", "invalid choice: 'upp'", "did you mean 'up'?")),
        (["train", "job.yaml", "--backend", "lcal"], ("--backend", "did you mean 'local'?")),
        # an unknown option is named by the subcommand it was given to, with that one's closest option
        (["train", "job.yaml", "--worker", "2"], ("lambdaml train:", "--worker 2", "did you mean --workers?")),
        (["train", "job.yaml", "--wrkers=2"], ("lambdaml train:", "did you mean --workers?")),
        (["local", "up", "--nme", "x"], ("lambdaml local up:", "did you mean --name?", "lambdaml local up --help")),
        (["calibrate", "--channels", "s3,redsi"], ("unknown channel 'redsi'", "did you mean 'redis'?")),
    ],
)
def test_a_near_miss_gets_a_did_you_mean_in_its_one_line(
    argv: list[str], fragments: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    for fragment in fragments:
        assert fragment in line, (fragment, line)


@pytest.mark.parametrize("argv", [["train", "job.yaml", "--no-such-flag"], ["xyzzy"]])
def test_nothing_close_gets_no_guess(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 1
    assert "did you mean" not in capsys.readouterr().err


# --- -q leaves the results; Ctrl-C ends any command with one line and 130 ----------------------


def test_quiet_prints_a_jobs_results_without_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    from lambdaml.cli.output import configure, print_result
    from tests.unit.test_tables_fit import job_result

    cost = {
        "total_dollars": 0.01,
        "prices_checked": "2026-12-01",
        "lambda": {"invocations": 4, "cold_starts": 4, "gb_seconds": 1.0, "dollars": 0.009},
        "channel": {"kind": "memcached", "requests": 100, "dollars": 0.001},
    }
    result = job_result(workers=2, cost=cost)
    print_result(result)
    loud = capsys.readouterr().out
    configure(quiet=True, json=False)
    print_result(result)
    quiet = capsys.readouterr().out
    assert "time and traffic per worker" in loud and "time and traffic per worker" not in quiet
    assert [line.split()[0] for line in quiet.splitlines()] == ["test", "job", "cost"], quiet
    assert set(quiet.splitlines()) <= set(loud.splitlines())


def test_an_interrupted_command_says_in_one_line_what_stopped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_data", interrupted)
    assert cli.main(["data", "list"]) == cli.EXIT_INTERRUPTED == 130
    captured = capsys.readouterr()
    assert captured.err == "interrupted: lambdaml data list stopped\n" and captured.out == ""


def test_a_second_ctrl_c_while_a_command_stops_is_ignored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = []

    def stopping(args: argparse.Namespace) -> int:
        try:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # Ctrl-C
        finally:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # and again, while it stops
            stopped.append(True)
        return 0

    monkeypatch.setattr(cli, "cmd_jobs", stopping)
    assert cli.main(["jobs"]) == 130
    assert stopped == [True] and capsys.readouterr().err == "interrupted: lambdaml jobs stopped\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C as before, for the caller
