"""``workers: auto`` (and ``runtime.memory_mb: auto``, ``channel: auto`` or a list) with ``train
--deadline`` or ``--budget``, or with neither (the advisor's recommendation): the cost model picks the
configuration before any worker starts, says so in one line, and the result holds the choice; a goal
nothing can meet stops in one line, with nothing started.

Each command runs as a user runs it, in a process of its own with a fresh ``LAMBDAML_HOME`` (no
profile calibrated: the shipped AWS defaults predict), against a real moto S3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytic_model import aws_profile
from analytic_model.advisor import DEFAULT_MEMORY_MB, Advice
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.data.shards import read_manifest
from lambdaml.planning import Goal, choose_configuration, parse_goal
from lambdaml.runtime.prediction_record import predict_job, workload_of
from lambdaml.storage import open_storage
from tests.e2e.test_prediction_record import User
from tests.helpers import Services, channel_spec, small_dataset_bucket, unique_name

SHARDS = 4  # worker counts 1, 2 and 4 split it evenly


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


@pytest.fixture(scope="module")
def storage(moto_url: str) -> StorageSpec:
    return small_dataset_bucket(moto_url, SHARDS)


def auto_job(user: User, storage: StorageSpec, **changes: object) -> Path:
    job: dict[str, Any] = {
        "name": "auto",
        "workers": "auto",
        "dataset": "small",
        "storage": storage.model_dump(),
        "channel": {"kind": "s3", "bucket": unique_name("comm"), "endpoint_url": storage.endpoint_url},
        "algorithm": {"name": "ga_sgd", "epochs": 1, "batch_size": 50},
        "sync": {"timeout_s": 20},
        **changes,
    }
    path = user.cwd / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def predictions(path: Path) -> dict[int, Any]:
    """The model's prediction of the job at each count its shards allow, as the choice sees them."""
    raw = yaml.safe_load(path.read_text())
    template = parse_job({**raw, "workers": 1})
    workload = workload_of(template, read_manifest(open_storage(template.storage), template.dataset))
    return {w: predict_job(template, workload, aws_profile(), "local", workers=w) for w in (1, 2, 4)}


def nothing_started(user: User) -> None:
    listed = user.run("jobs")
    assert listed.returncode == 0 and listed.stdout.startswith("no jobs"), listed.stdout
    assert not (user.cwd / "results").exists()


def test_a_deadline_job_prints_its_choice_and_its_result_holds_it(user: User, storage: StorageSpec) -> None:
    path = auto_job(user, storage)
    done = user.run("train", str(path), "--deadline", "10m", "--output", "json")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("chose ")]
    printed = json.loads(done.stdout)
    chosen = printed["prediction"]
    workers = len(printed["workers"])
    assert line.startswith("chose for the deadline 10.0m: ") and f" for FaaS {workers} x Lambda (" in line, line
    assert chosen["chosen_for"] == "the deadline 10.0m" and chosen["time_high_s"] <= 600
    assert printed["spec"]["workers"] == workers
    # The cheapest count whose predicted upper time meets the deadline (every count does, here).
    by_count = predictions(path)
    assert all(p.time_range_s[1] <= 600 for p in by_count.values())
    assert workers == min(by_count, key=lambda w: by_count[w].cost)
    assert chosen["cost"] == pytest.approx(by_count[workers].cost)


def test_a_budget_job_picks_the_fastest_that_fits_and_costs_no_more(user: User, storage: StorageSpec) -> None:
    path = auto_job(user, storage)
    done = user.run("train", str(path), "--budget", "0.50", "--output", "json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    chosen, workers = printed["prediction"], len(printed["workers"])
    assert chosen["chosen_for"] == "the budget $0.5000" and chosen["cost_high"] <= 0.50
    by_count = predictions(path)
    assert workers == min(by_count, key=lambda w: by_count[w].time_s)
    assert printed["cost"]["total_dollars"] <= 0.50


def test_an_impossible_deadline_stops_in_one_line_with_nothing_started(user: User, storage: StorageSpec) -> None:
    path = auto_job(user, storage)
    done = user.run("train", str(path), "--deadline", "1s")
    assert done.returncode == 1
    fastest = min(predictions(path).values(), key=lambda p: p.time_range_s[1])
    assert done.stderr.startswith(
        f"error: nothing meets the 1.0s deadline: the fastest, {fastest.label}, is predicted "
    )
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == "", done.stderr
    nothing_started(user)


@pytest.fixture(scope="module")
def million_rows(moto_url: str) -> StorageSpec:
    """A bucket holding "small": a million Higgs-like rows, in 8 shards."""
    spec = StorageSpec(bucket=unique_name("data"), endpoint_url=moto_url)
    store = open_storage(spec)
    store.ensure()
    X, y, _ = synthetic.higgs_like(1_000_000, seed=0)
    shards.prepare(store, "small", X, y, shards=8)
    return spec


def test_one_second_for_an_epoch_of_a_million_rows_stops_before_any_worker_starts(
    user: User, million_rows: StorageSpec
) -> None:
    path = auto_job(user, million_rows)
    done = user.run("train", str(path), "--deadline", "1s")
    assert done.returncode == 1
    assert done.stderr.startswith("error: nothing meets the 1.0s deadline: the fastest, FaaS "), done.stderr
    assert "allow at least " in done.stderr and len(done.stderr.strip().splitlines()) == 1
    nothing_started(user)


def test_an_impossible_budget_stops_in_one_line_naming_the_cheapest(user: User, storage: StorageSpec) -> None:
    path = auto_job(user, storage)
    done = user.run("train", str(path), "--budget", "0.00001")
    assert done.returncode == 1
    cheapest = min(predictions(path).values(), key=lambda p: p.cost_range[1])
    assert done.stderr.startswith(f"error: nothing fits the $0.000010 budget: the cheapest, {cheapest.label}, is "), (
        done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1
    nothing_started(user)


@pytest.mark.parametrize(
    ("workers", "flags", "said"),
    [
        (
            2,
            ["--deadline", "10m"],
            "--deadline chooses the configuration: set workers (or memory_mb, or channel) to auto",
        ),
        ("auto", ["--deadline", "10m", "--workers", "2"], "--workers and --deadline conflict"),
        ("auto", ["--deadline", "10 minutes"], "--deadline must be a duration (e.g. 90s, 10m, 1.5h)"),
        ("auto", ["--budget", "-1"], "--budget must be positive"),
        ("auto", ["--budget", "1", "--deadline", "1m"], "give --deadline or --budget, not both"),
    ],
)
def test_a_goal_asked_wrongly_is_one_line(
    user: User, storage: StorageSpec, workers: object, flags: list[str], said: str
) -> None:
    done = user.run("train", str(auto_job(user, storage, workers=workers)), *flags)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and said in done.stderr, done.stderr
    nothing_started(user)


def test_the_choice_is_made_from_the_jobs_own_counts(storage: StorageSpec) -> None:
    raw = {"workers": "auto", "dataset": "small", "storage": storage.model_dump()}
    choice = choose_configuration(raw, Goal(deadline_s=3600.0), parse_job, "local")
    assert SHARDS % choice.workers == 0 and choice.recorded().chosen_for == "the deadline 60.0m"
    assert choice.apply(raw)["workers"] == choice.workers
    assert parse_goal(None, None) is None and parse_goal("1.5h", None) == Goal(deadline_s=5400.0)


def test_memory_and_channel_left_to_the_model_are_chosen_among_what_the_file_offers(
    user: User, storage: StorageSpec, services: Services
) -> None:
    redis = channel_spec("redis", services).model_dump()
    s3 = {"kind": "s3", "bucket": unique_name("comm"), "endpoint_url": storage.endpoint_url}
    path = auto_job(user, storage, runtime={"memory_mb": "auto"}, channel=[s3, redis])
    done = user.run("train", str(path), "--deadline", "10m", "--output", "json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    spec = printed["spec"]
    assert spec["runtime"]["memory_mb"] in DEFAULT_MEMORY_MB and spec["channel"]["kind"] in ("s3", "redis")
    raw = yaml.safe_load(path.read_text())
    every = [
        predict_job(parse_job({**raw, "workers": w, "runtime": {"memory_mb": m}, "channel": c}), *context(raw))
        for w in (1, 2, 4)
        for m in DEFAULT_MEMORY_MB
        for c in (s3, redis)
    ]
    cheapest = min((p for p in every if p.time_range_s[1] <= 600), key=lambda p: (p.cost, p.time_s))
    assert printed["prediction"]["configuration"] == cheapest.label


def test_auto_without_a_goal_takes_the_advisors_recommendation(user: User, storage: StorageSpec) -> None:
    path = auto_job(user, storage)
    done = user.run("train", str(path), "--output", "json")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("chose ")]
    assert line.startswith("chose for the advisor's recommendation: ")
    printed = json.loads(done.stdout)
    assert printed["prediction"]["chosen_for"] == "the advisor's recommendation"
    raw = yaml.safe_load(path.read_text())
    rows = [predict_job(parse_job({**raw, "workers": w}), *context(raw)) for w in (1, 2, 4)]
    template = parse_job({**raw, "workers": 1})
    best = Advice(context(raw)[0], template.storage.region, "", rows).recommended
    assert printed["prediction"]["configuration"] == best.label


def test_channel_auto_without_a_stack_is_one_line(user: User, storage: StorageSpec) -> None:
    done = user.run("train", str(auto_job(user, storage, channel="auto")), "--deadline", "10m")
    assert done.returncode == 1
    assert "channel: auto chooses among a stack's channels (give --stack)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    nothing_started(user)


def context(raw: dict[str, Any]) -> tuple[Any, Any, str]:
    """What ``predict_job`` takes beside the job: the workload, the shipped profile, the backend."""
    channel = raw["channel"][0] if isinstance(raw["channel"], list) else raw["channel"]
    template = parse_job({**raw, "workers": 1, "runtime": {}, "channel": channel})
    workload = workload_of(template, read_manifest(open_storage(template.storage), template.dataset))
    return workload, aws_profile(), "local"
