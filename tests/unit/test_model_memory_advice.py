"""The advisor counts the model's state, as the job's preflight does: a configuration whose
worker cannot hold the parameters, their optimizer state and the collectives' buffers is
infeasible, however small its shard of the data."""

from __future__ import annotations

import json

import pytest

from analytic_model import Workload, advise, aws_profile
from analytic_model.prediction import model_mb
from analytic_model.workload import model_memory_bytes
from lambdaml import cli

#: 1e9 features but a 100 MB dataset (sparse): the shards fit any Lambda, the model does not.
WIDE = ["advise", "--model", "lr", "--features", "1e9", "--samples", "1e6", "--dataset-bytes", "1e8"]


def test_no_lambda_memory_holds_a_model_of_a_billion_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*WIDE, "--memory", "3008", "--output", "json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert advice["rows"] and all(row["platform"] == "iaas" for row in advice["rows"])  # an instance with 32 GB
    assert any("FaaS 1 x 3008 MB" in why and "model's state" in why for why in advice["skipped"])


def test_nothing_fits_says_the_model_is_why(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main([*WIDE, "--memory", "3008,10240", "--instances", "c5.large"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "Traceback" not in lines[0]
    assert "no configuration fits" in lines[0] and "1,000,000,001 parameters" in lines[0], lines[0]


def test_the_advisor_counts_what_the_preflight_counts() -> None:
    profile = aws_profile()
    workload = Workload("lr", dataset_bytes=1e8, samples=1_000_000, features=10**8, optimizer="adam")
    info = workload.check(profile)
    need = model_memory_bytes(workload.n_params(info), info.bytes_per_param, "ga_sgd", "adam", error_feedback=False)
    assert model_mb(workload, info) * 2**20 == pytest.approx(need)
    advice = advise(workload, profile, workers=[1, 50], memory_mb=[3008, 10240], instances=["c5.large"])
    faas = {(r.workers, r.memory_mb) for r in advice.rows if r.platform == "faas"}
    # 6 vectors of 1e8 float64 parameters: 4.5 GiB, over 3008 MB at any W; 10240 MB holds it.
    assert faas and all(memory == 10240 for _, memory in faas)
