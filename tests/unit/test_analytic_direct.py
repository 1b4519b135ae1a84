"""The cost model knows the direct channel: a round over links (doubling or ring, by ``small_bytes``),
its rendezvous service priced, its shipped figures FMI's published ones and said to be so."""

from __future__ import annotations

import math

import pytest

from analytic_model import Workload, advise, aws_profile
from analytic_model.cache_billing import CacheBilling
from analytic_model.collectives import PATTERNS, collective
from analytic_model.kinds import PUBLISHED_NOTE
from analytic_model.links import DOUBLING, RING, link_round, plan, rendezvous_dollars
from analytic_model.prediction import predict_faas
from analytic_model.profile import with_figures
from analytic_model.tables import prices
from analytic_model.transfers import Polling
from lambdaml import cli

W = 10
D_BYTES = 4e6  # d = 1e6 float32
HEADER = aws_profile().codec_header_bytes
# A model of 1e6 float32 parameters (an MLP of 7,801 features: 128 x 7,801 + 1,418).
MLP = Workload("mlp", dataset_bytes=1e9, samples=100_000, features=7_801, batch_size=100, epochs=1)


def _round(kind: str, pattern: str, workers: int = W, vector_bytes: float = D_BYTES) -> float:
    profile = aws_profile()
    perf = profile.channel(kind, authenticated=True)
    add_Bps = profile.compute.add_Bps
    if kind == "direct":
        return link_round(perf, workers, vector_bytes, add_Bps, HEADER).seconds
    return collective(perf, pattern, workers, vector_bytes, add_Bps, Polling.of(profile, kind), HEADER).seconds


def test_a_direct_round_is_faster_than_redis_and_s3_on_the_aws_figures() -> None:
    direct = _round("direct", "allreduce")
    for kind in ("redis", "s3"):
        best = min(_round(kind, pattern) for pattern in PATTERNS)
        assert direct < best, (kind, direct, best)
    # The same through a whole prediction: the communication of 1e6 float32 a round at W = 10.
    assert MLP.vector_bytes(aws_profile().model("mlp")) == pytest.approx(D_BYTES, rel=1e-3)
    comm = {
        kind: min(predict_faas(MLP, W, kind, p, 3008, aws_profile()).time["communicate_s"] for p in PATTERNS)
        for kind in ("direct", "redis", "s3")
    }
    assert comm["direct"] < comm["redis"] < comm["s3"]


def test_the_sum_switches_from_doubling_to_the_ring_past_small_bytes() -> None:
    small = int(aws_profile().channel("direct").small_bytes or 0)
    assert small == 64 * 1024  # DirectSpec's default
    for workers in (2, 5, 8, 10):
        steps = math.ceil(math.log2(workers))
        at = plan(workers, small, HEADER, small)  # at most small_bytes: recursive doubling
        assert at.algorithm == DOUBLING and len(at.step_bytes) == steps
        assert at.sent == pytest.approx((workers - 1) * (small + HEADER))  # every other rank's vector
        past = plan(workers, small + 1, HEADER, small)  # larger: reduce-scatter and all-gather
        assert past.algorithm == RING and len(past.step_bytes) == 2 * (workers - 1)
        assert past.sent == pytest.approx(2 * (workers - 1) * ((small + 1) / workers + HEADER))
    # A prediction's row names the sum the communicator picks; a profile's small_bytes moves the switch.
    lr = Workload("lr", dataset_bytes=1e8, samples=100_000, features=10_000, batch_size=100, epochs=1)  # 80 KB
    assert predict_faas(lr, W, "direct", "allreduce", 3008, aws_profile()).pattern == RING
    wider = with_figures(aws_profile(), {"channels": {"direct": {"small_bytes": 1_000_000}}})
    assert predict_faas(lr, W, "direct", "allreduce", 3008, wider).pattern == DOUBLING
    # Past the switch the ring moves fewer bytes a rank than doubling would: (W-1)/W against W-1 vectors.
    assert (
        _round("direct", "", W, 4 * small)
        < link_round(
            wider.channel("direct", authenticated=True), W, 4 * small, aws_profile().compute.add_Bps, HEADER
        ).seconds
    )


def test_the_rendezvous_service_is_priced_by_its_lifetime_and_never_free() -> None:
    profile, table = aws_profile(), prices("us-east-1")
    assert profile.rendezvous is not None and profile.rendezvous.instance == "t4g.nano"

    def dollars(wall_s: float, cache: CacheBilling) -> float:
        assert profile.rendezvous is not None
        return rendezvous_dollars(profile.rendezvous, table, workers=W, wall_s=wall_s, cache=cache)

    by_hour = CacheBilling()  # advise's default: node-hours for the job's time rounded up to the hour
    assert 0 < dollars(1.0, by_hour) == dollars(3000.0, by_hour) < dollars(3700.0, by_hour) < dollars(9000.0, by_hour)
    assert dollars(3000.0, CacheBilling(hours=24)) > dollars(3000.0, CacheBilling(hours=2)) > dollars(3000.0, by_hour)
    share = CacheBilling(pricing="share")  # the job's own seconds of one that outlives it
    assert 0 < dollars(10.0, share) < dollars(100.0, share)
    # In a prediction: the channel's cost is the rendezvous service (the links are free), never zero.
    row = predict_faas(MLP, W, "direct", "allreduce", 3008, profile, cache=by_hour)
    assert row.costs["channel"] == pytest.approx(dollars(row.time_s, by_hour))
    assert row.costs["channel"] > 0 and "t4g.nano" in (row.rendezvous_billing or "")


def test_advise_lists_direct_rows_marked_as_published_figures(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["advise", "--model", "lr", "--features", "28", "--samples", "11e6", "--algorithm", "ga_sgd",
            "--batch-size", "100", "--workers", "10", "--memory", "3008", "--instances", "c5.large"]  # fmt: skip
    assert cli.main([*argv, "--channels", "s3,redis,direct"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if "FaaS  10 direct~ doubling 3008MB" in line], out
    assert "FaaS  10 redis AR 3008MB" in out and "FaaS  10 s3 AR 3008MB" in out
    assert f"~ direct: {PUBLISHED_NOTE} (latency and bandwidth from FMI's published model" in out
    assert "rendezvous service is priced as one t4g.nano per instance-hour for 1 h" in out
    # Tried only when named: its figures are published, not measured here.
    assert cli.main(argv) == 0
    assert "direct" not in capsys.readouterr().out
    # A profile that measured the links says nothing of published figures.
    measured = with_figures(aws_profile(), {"channels": {"direct": {"latency_put_s": 0.001, "bandwidth_put_Bps": 1e9,
                                                                    "latency_get_s": 0.001, "bandwidth_get_Bps": 1e9}}},
                            why="measured by 'lambdaml calibrate' on a test")  # fmt: skip
    lr = Workload("lr", dataset_bytes=1e8, samples=100_000, features=28, batch_size=100, epochs=1)
    rows = advise(lr, measured, workers=[10], memory_mb=[3008], instances=[], channels=["direct"]).rows
    assert rows and all(PUBLISHED_NOTE not in r.notes for r in rows)
    shipped = advise(lr, workers=[10], memory_mb=[3008], instances=[], channels=["direct"]).rows
    assert shipped and all(r.notes == (PUBLISHED_NOTE,) for r in shipped)


def test_what_links_do_not_carry_is_skipped_with_its_reason() -> None:
    asp = Workload("lr", dataset_bytes=1e8, samples=100_000, features=28, batch_size=100, epochs=1, protocol="asp")
    advice = advise(asp, workers=[1, 10], memory_mb=[3008], instances=["c5.large"], channels=["s3", "direct"])
    assert not [r for r in advice.rows if r.option == "direct" and r.workers > 1]
    assert any("over direct" in s and "BSP rounds of an uncompressed vector" in s for s in advice.skipped)


def test_outside_a_vpc_a_faster_function_network_lifts_the_links() -> None:
    scaled = {"faas": {"network_scaled_from_mb": 2048, "network_scaled_max_Bps": 1.25e9}}
    fast = with_figures(aws_profile(), scaled)
    flat = predict_faas(MLP, W, "direct", "allreduce", 10240, aws_profile())
    lifted = predict_faas(MLP, W, "direct", "allreduce", 10240, fast)
    assert lifted.time["communicate_s"] < flat.time["communicate_s"]
    # Below the published 400 MB/s the function's network leaves the links as they are.
    slow = with_figures(aws_profile(), {"faas": {"network_scaled_from_mb": 2048}})  # 3 Gbps at most
    same = predict_faas(MLP, W, "direct", "allreduce", 10240, slow)
    assert same.time["communicate_s"] == pytest.approx(flat.time["communicate_s"])
