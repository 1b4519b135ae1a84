"""``lambdaml compare`` tells the truth: its ratios are of wall time and billed cost (what a user
waits for and pays), its plot ends each run at its wall time and billed cost, and no two runs
share a label."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambdaml import cli
from lambdaml.cli.compare import labels, load_results, plot_comparison, plot_series, summaries
from lambdaml.runtime.reports import JobResult
from tests.unit.test_tables_fit import job_result


def run(
    job_id: str, *, wall_s: float, last_epoch_s: float, dollars: float, epochs: int = 5, **change: Any
) -> JobResult:
    """A 4-worker run whose workers' clocks end at ``last_epoch_s`` and the job at ``wall_s``."""
    curve = [{"epoch": e, "loss": 0.7 / e, "elapsed_s": last_epoch_s * e / epochs} for e in range(1, epochs + 1)]
    result = job_result(
        workers=4, job_id=job_id, wall_time_s=wall_s, loss_curve=curve, cost={"total_dollars": dollars}, **change
    )
    workers = []
    for w in result.to_json()["workers"]:
        workers.append({**w, "load_s": 0.02, "total_s": last_epoch_s + 0.1})
    return JobResult.from_json({**result.to_json(), "workers": workers})


#: Redis at 9.1 s wall, and the IaaS baseline at 19.7 s whose ranks trained for 2.5 s of it
#: (torchrun's start-up is the rest): per epoch IaaS is faster, per run it is not.
REDIS = run("higgs-lr-20261207-120000-aaaa", wall_s=9.0, last_epoch_s=8.5, dollars=0.0061, backend="local",
            channel="redis")  # fmt: skip
IAAS = run("higgs-lr-20261207-120100-bbbb", wall_s=20.0, last_epoch_s=2.5, dollars=0.005667, backend="iaas-local",
           channel="s3")  # fmt: skip


def written(tmp_path: Path, *results: JobResult) -> list[str]:
    paths = []
    for i, result in enumerate(results):
        path = tmp_path / f"result-{i}.json"
        path.write_text(json.dumps(result.to_json()))
        paths.append(str(path))
    return paths


def test_the_time_ratio_is_of_wall_time_not_of_time_per_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, iaas = summaries([REDIS, IAAS])
    assert iaas.epoch_s < base.epoch_s  # per epoch the IaaS run is faster (0.3 against 0.67) ...
    assert iaas.wall_ratio == pytest.approx(20 / 9)  # ... but it took 2.2 times as long
    assert iaas.cost_ratio == pytest.approx(0.005667 / 0.0061)

    paths = written(tmp_path, REDIS, IAAS)
    assert cli.main(["compare", *paths]) == 0
    out = capsys.readouterr().out
    iaas_line = next(line for line in out.splitlines() if line.startswith("iaas-local") and "$" in line)
    assert iaas_line.split()[5:7] == ["2.22", "0.93"], out  # wall x, cost x
    assert "wall x" in out and "time x" not in out

    assert cli.main(["compare", *paths, "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["wall_ratio"] for r in runs] == [1.0, pytest.approx(2.2222, abs=1e-4)]


def test_the_plot_ends_each_run_at_its_wall_time_and_billed_cost(tmp_path: Path) -> None:
    results = load_results(written(tmp_path, REDIS, IAAS))
    drawn = plot_series(results)
    assert [s.seconds[-1] for s in drawn] == [9.0, 20.0]
    assert [s.dollars[-1] for s in drawn] == [r.cost["total_dollars"] for r in results] == [0.0061, 0.005667]
    iaas = drawn[1]
    # The IaaS ranks' first epoch ends 0.5 s into their 2.6 s; the job had run 17.4 s before they started.
    assert iaas.seconds[0] == pytest.approx(20.0 - 2.6 + 0.5)
    assert iaas.losses[-1] == iaas.losses[-2] == pytest.approx(0.7 / 5)  # flat from the last epoch to the end
    for s in drawn:  # time and money only grow along a run
        assert s.seconds == sorted(s.seconds) and s.dollars == sorted(s.dollars)
        assert len(s.seconds) == len(s.dollars) == len(s.losses)
    png = plot_comparison(results, tmp_path / "compare.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_three_runs_of_one_channel_and_w_get_three_labels() -> None:
    local: dict[str, Any] = {"backend": "local", "channel": "s3"}
    three = [
        run("higgs-lr-20261207-120000-62b4", wall_s=20.0, last_epoch_s=19.0, dollars=0.01, epochs=3, **local),
        run("higgs-lr-20261207-120500-2f66", wall_s=30.0, last_epoch_s=29.0, dollars=0.02, **local),
        run("higgs-lr-20261207-121000-ae8c", wall_s=31.0, last_epoch_s=29.5, dollars=0.02, **local),
    ]
    assert labels(three) == ["local s3 W=4 3ep 62b4", "local s3 W=4 5ep 2f66", "local s3 W=4 5ep ae8c"]
    # The same epochs everywhere: not said; two attempts of one job: told apart by attempt.
    again = [three[1], JobResult.from_json({**three[1].to_json(), "attempt": 2})]
    assert labels(again) == ["local s3 W=4 2f66 #1", "local s3 W=4 2f66 #2"]
    # The very same result twice: by its place in the list.
    assert labels([three[2], three[2]]) == ["local s3 W=4 ae8c #1 (1)", "local s3 W=4 ae8c #1 (2)"]


def test_runs_that_differ_in_pattern_say_so() -> None:
    ar = run("j-20261207-120000-0001", wall_s=9.0, last_epoch_s=8.0, dollars=0.01, pattern="allreduce")
    sr = run("j-20261207-120000-0002", wall_s=9.0, last_epoch_s=8.0, dollars=0.01, pattern="scatter_reduce")
    assert labels([ar, sr]) == ["lambda memcached AR W=4 0001", "lambda memcached SR W=4 0002"]
    # gloo has collectives of its own: an IaaS run next to one channel run has no pattern to differ in.
    assert labels([ar, IAAS]) == ["lambda memcached W=4 0001", "iaas-local gloo W=4 bbbb"]
    assert labels([ar, sr, IAAS])[2] == "iaas-local gloo W=4 bbbb"
