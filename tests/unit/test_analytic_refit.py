"""Refitting a profile from finished jobs (``analytic_model.refit``): each part's factor is the
median of measured over predicted, and the refit profile moves that part of every prediction by it."""

from __future__ import annotations

import pytest

from analytic_model import Workload, aws_profile, predict_faas
from analytic_model.refit import FACTOR_LIMITS, Factors, Observed, fit_factors, refit_profile

WORKLOAD = Workload("lr", dataset_bytes=4e8, samples=1_000_000, features=28, epochs=2)


def observed(channel: str, compute: float, comm: float, rest: float) -> Observed:
    """A job whose measured parts are the given multiples of its prediction's."""
    p = predict_faas(WORKLOAD, 4, channel, "allreduce", 3008, aws_profile())
    rest_predicted = p.time_s - p.time["compute_s"] - p.time["communicate_s"]
    measured_compute, measured_comm = compute * p.time["compute_s"], comm * p.time["communicate_s"]
    return Observed(
        channel, p.time, measured_compute, measured_comm, measured_compute + measured_comm + rest * rest_predicted
    )


def test_factors_are_the_median_of_measured_over_predicted_per_part() -> None:
    jobs = [observed("redis", 2.0, 3.0, 0.5), observed("redis", 2.2, 3.3, 0.6), observed("s3", 1.8, 0.9, 0.4)]
    jobs += [observed("s3", 2.0, 1.1, 0.5), observed("memcached", 2.0, 7.0, 0.5)]
    factors = fit_factors(jobs)
    assert factors.compute == pytest.approx(2.0)
    # Memcached's one job does not set its rounds' factor: every channel's median does.
    assert factors.channels == pytest.approx({"redis": 3.15, "s3": 1.0, "memcached": 3.0})
    assert factors.rest == pytest.approx(0.5) and factors.jobs == 5


def test_one_disturbed_job_does_not_set_a_factor_and_wild_ones_are_bounded() -> None:
    jobs = [observed("redis", 2.0, 1.0, 1.0), observed("redis", 2.0, 1.0, 1.0), observed("redis", 40.0, 1.0, 1.0)]
    assert fit_factors(jobs).compute == pytest.approx(2.0)
    assert fit_factors([observed("redis", 1e6, 1.0, 1.0)]).compute == FACTOR_LIMITS[1]


def test_the_refit_profile_moves_each_part_of_a_later_prediction_by_its_factor() -> None:
    before = aws_profile()
    after = refit_profile(before, Factors(compute=2.0, channels={"redis": 3.0}, rest=0.5, jobs=5), "a test")
    old, new = (predict_faas(WORKLOAD, 8, "redis", "scatter_reduce", 3008, p) for p in (before, after))
    assert new.time["compute_s"] == pytest.approx(2.0 * old.time["compute_s"])
    # The rounds' own figures scale by 3; the sum's arithmetic (compute.add_Bps) is left alone.
    assert 2.5 * old.time["communicate_s"] < new.time["communicate_s"] <= 3.0 * old.time["communicate_s"] * 1.0001
    assert new.time["startup_s"] == pytest.approx(0.5 * old.time["startup_s"], rel=0.05)
    # A channel no job ran on keeps its figures; settings are no figures to scale.
    assert after.channels["s3"] == before.channels["s3"]
    assert after.faas.heartbeat_every_s == before.faas.heartbeat_every_s
    assert after.origin["channels.redis.latency_put_s"] == "a test"
