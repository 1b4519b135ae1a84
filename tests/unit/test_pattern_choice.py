"""``sync.pattern: auto``: the cost model's choice of collective, from the shipped AWS figures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from analytic_model import load_profile
from analytic_model.collectives import collective
from analytic_model.pattern_choice import candidates, choose_pattern
from analytic_model.transfers import Polling, call_s
from lambdaml.comm.choice import PatternPlan, pattern_for
from lambdaml.config import parse_job
from lambdaml.errors import ConfigError

PROFILE = load_profile()


@pytest.mark.parametrize("channel", ["s3", "redis", "memcached", "dynamodb"])
@pytest.mark.parametrize("workers", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("vector_bytes", [400, 40_000, 4_000_000, 40_000_000])
def test_the_choice_is_the_fastest_candidate_the_model_predicts(channel: str, workers: int, vector_bytes: int) -> None:
    options = candidates(workers, compressed=False)
    choice = choose_pattern(PROFILE, channel, workers, vector_bytes, options)
    perf, polling = PROFILE.channel(channel), Polling.of(PROFILE, channel)
    for pattern in options:
        predicted = collective(
            perf, pattern, workers, vector_bytes, PROFILE.compute.add_Bps, polling, PROFILE.codec_header_bytes
        ).seconds
        assert choice.predictions[pattern] == predicted
        assert choice.predicted_round_s <= predicted
    assert choice.pattern in options and choice.predicted_round_s > 0


def test_small_vectors_go_through_one_aggregator_and_large_ones_are_scattered() -> None:
    assert choose_pattern(PROFILE, "s3", 8, 400, candidates(8, compressed=False)).pattern == "allreduce"
    assert choose_pattern(PROFILE, "s3", 8, 40_000_000, candidates(8, compressed=False)).pattern == "scatter_reduce"


def test_the_grid_pattern_is_a_candidate_only_where_it_differs_and_is_uncompressed() -> None:
    assert "scatter_reduce_2d" in candidates(16, compressed=False)
    assert "scatter_reduce_2d" not in candidates(16, compressed=True)
    assert "scatter_reduce_2d" not in candidates(7, compressed=False)  # a prime W: 1 x 7 is flat


def test_a_job_file_names_auto_or_a_pattern_and_the_worker_resolves_it() -> None:
    job = parse_job({"name": "j", "workers": 8, "dataset": "d"}, "job")
    assert job.sync.pattern == "auto"
    plan = pattern_for(job, 40_000_000)
    assert plan.pattern == "scatter_reduce"
    fixed = parse_job({"name": "j", "workers": 8, "dataset": "d", "sync": {"pattern": "allreduce"}}, "job")
    pinned = pattern_for(fixed, 40_000_000)
    assert pinned.pattern == "allreduce" and pinned.contenders == ()  # a named pattern is never timed against others
    assert pinned.predictions["allreduce"] > plan.predictions["scatter_reduce"]
    memory = parse_job({"name": "j", "workers": 8, "dataset": "d", "channel": {"kind": "memory"}}, "job")
    assert pattern_for(memory, 40_000_000) == PatternPlan("allreduce")
    with pytest.raises(ConfigError, match="or auto"):
        parse_job({"name": "j", "workers": 8, "dataset": "d", "sync": {"pattern": "ring"}}, "job")


@pytest.mark.parametrize("channel", ["s3", "redis", "memcached", "dynamodb"])
@pytest.mark.parametrize("workers", [2, 4, 16])
@pytest.mark.parametrize("vector_bytes", [400, 4_000_000, 40_000_000])
def test_contenders_are_the_choice_and_the_patterns_within_the_models_uncertainty_of_it(
    channel: str, workers: int, vector_bytes: int
) -> None:
    choice = choose_pattern(PROFILE, channel, workers, vector_bytes, candidates(workers, compressed=False))
    contenders = choice.contenders(PROFILE.uncertainty)
    assert contenders[0] == choice.pattern
    high = PROFILE.uncertainty.time_range(choice.predicted_round_s)[1]
    for pattern, predicted in choice.predictions.items():
        near = predicted / (1 + PROFILE.uncertainty.time_fraction) <= high  # no pattern is predicted faster
        assert (pattern in contenders) == near, pattern
    assert [choice.predictions[p] for p in contenders[1:]] == sorted(choice.predictions[p] for p in contenders[1:])


def test_auto_times_its_contenders_only_where_the_job_can_switch_patterns_between_rounds() -> None:
    def plan(**fields: object) -> PatternPlan:
        sync = {"timeout_s": 60, **fields.pop("sync", {})}  # type: ignore[dict-item]
        job = parse_job({"name": "j", "workers": 4, "dataset": "d", "sync": sync, **fields}, "job")
        return pattern_for(job, 400)

    timed = plan()  # S3 at W = 4 and 400 bytes: AllReduce and ScatterReduce are predicted close
    assert timed.pattern == "allreduce" and timed.contenders[0] == "allreduce" and len(timed.contenders) > 1
    assert plan(sync={"trial_rounds": 0}).contenders == ()
    assert plan(sync={"protocol": "asp"}).contenders == ()
    compressed = {"name": "ga_sgd", "compression": {"name": "topk", "ratio": 0.1}}
    assert plan(algorithm=compressed).contenders == ()  # error feedback is kept per chunk of one pattern
    assert plan(workers=1).contenders == ()


def test_a_job_whose_values_carry_a_mac_has_its_rounds_predicted_hashing_them() -> None:
    perf = PROFILE.channel("memcached", authenticated=True)
    plain = PROFILE.channel("memcached")
    assert perf.mac_Bps == PROFILE.compute.mac_Bps and plain.mac_Bps is None
    # One worker's get of 3 values of 1 MB: longer by hashing the 3 MB, and by nothing else.
    extra = call_s(perf, "get", 3, 1e6) - call_s(plain, "get", 3, 1e6)
    assert extra == pytest.approx(3e6 / PROFILE.compute.mac_Bps)
    sealed = choose_pattern(PROFILE, "memcached", 4, 4e6, ("allreduce",), authenticated=True)
    bound = choose_pattern(PROFILE, "memcached", 4, 4e6, ("allreduce",))
    assert sealed.predicted_round_s > bound.predicted_round_s
    # Memcached has no authentication of its own: a job on it MACs its values, and its prediction says so.
    job = parse_job({"name": "j", "workers": 4, "dataset": "d", "channel": {"kind": "memcached"},
                     "sync": {"pattern": "allreduce"}}, "job")  # fmt: skip
    assert job.channel.authenticates_values
    assert pattern_for(job, 4_000_000).predictions["allreduce"] == sealed.predicted_round_s


def test_a_worker_picks_its_pattern_without_importing_the_advisor() -> None:
    """Every cold start imports the worker: the advisor, predictions and calibration stay out of it."""
    code = (
        "import sys, lambdaml.runtime.worker; "
        "print(sorted(m for m in sys.modules if m in "
        "{'analytic_model.advisor', 'analytic_model.prediction', 'analytic_model.calibration'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
