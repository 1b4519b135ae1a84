"""Caches billed as AWS bills them, and Lambda's network as a function of memory and of a VPC.

Property tests (hypothesis) check what must hold whatever the figures: a longer-lived cache
never costs less, a function in a VPC never moves bytes faster than one outside, and more
workers never bring a compute-bound job below the compute one worker bills. The rest checks
the prices against the table and what ``lambdaml advise`` says it assumed.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytic_model import Workload
from analytic_model.cache_billing import CacheBilling
from analytic_model.network import in_vpc, lambda_network_Bps
from analytic_model.prediction import predict_faas
from analytic_model.profile import aws_profile, with_figures
from analytic_model.tables import gb_second_price, prices
from lambdaml.cli import main
from lambdaml.cost import channel_cost, job_cost
from lambdaml.errors import ConfigError

FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
US = prices("us-east-1")
HIGGS = Workload("lr", dataset_bytes=1e9, samples=1_000_000, features=28, algorithm="ga_sgd", epochs=2)
LR = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "1GB", "--samples", "1e6"]
ONE_WAY = ["--workers", "10", "--memory", "3008", "--channels", "redis", "--instances", "c5.large"]
#: The issue's figures switched on: 625 Mbps at 2,048 MB up to 3 Gbps at the largest memory.
SCALED = with_figures(aws_profile(), {"faas": {"network_scaled_from_mb": 2048}})

pricings = st.sampled_from(["node", "serverless", "share"])
engines = st.sampled_from(["redis", "valkey"])
channels = st.sampled_from(["redis", "memcached"])


@FEW
@given(
    pricings,
    engines,
    channels,
    st.floats(1.0, 50_000.0),
    st.floats(0.01, 1000.0),
    st.floats(0.0, 1000.0),
    st.floats(0.0, 3e9),
)
def test_a_longer_lived_cache_never_costs_less(
    pricing: str, engine: str, channel: str, wall_s: float, hours: float, more: float, stored: float
) -> None:
    def bill(lifetime: float | None) -> float:
        return CacheBilling(pricing, lifetime, engine).dollars(
            channel, US, node="cache.r7g.large", wall_s=wall_s, requests=1e5, bytes_moved=1e9, stored_bytes=stored
        )

    assert bill(hours + more) >= bill(hours) > 0
    assert bill(hours) >= bill(None) or hours < wall_s / 3600 + 1  # the default: the job's hours, rounded up


@FEW
@given(st.integers(1, 6), st.floats(0.1, 48.0), st.floats(0.0, 48.0), pricings, engines)
def test_a_longer_lived_cache_never_lowers_a_predicted_cost(
    workers: int, hours: float, more: float, pricing: str, engine: str
) -> None:
    def cost(lifetime: float) -> float:
        cache = CacheBilling(pricing, lifetime, engine)
        return predict_faas(HIGGS, workers + 1, "redis", "allreduce", 3008, aws_profile(), cache=cache).cost

    assert cost(hours + more) >= cost(hours)


@FEW
@given(st.integers(128, 10240), st.booleans())
def test_a_function_in_a_vpc_never_moves_bytes_faster(memory_mb: int, scaled: bool) -> None:
    profile = SCALED if scaled else aws_profile()
    inside = lambda_network_Bps(profile, memory_mb, vpc=True)
    outside = lambda_network_Bps(profile, memory_mb, vpc=False)
    assert 0 < inside <= outside
    assert inside == profile.faas.network_Bps  # the VPC keeps the flat figure (an assumption, said so)


def test_the_scaled_network_runs_from_625_mbps_to_3_gbps_outside_a_vpc() -> None:
    base = SCALED.faas.network_Bps
    assert lambda_network_Bps(SCALED, 2047, vpc=False) == base
    assert lambda_network_Bps(SCALED, 2048, vpc=False) == pytest.approx(625e6 / 8)
    assert lambda_network_Bps(SCALED, 10240, vpc=False) == pytest.approx(3e9 / 8)
    assert lambda_network_Bps(aws_profile(), 10240, vpc=False) == base  # shipped off: the figure only
    assert in_vpc("redis") and in_vpc("memcached") and not in_vpc("s3") and not in_vpc("dynamodb")


def test_a_cache_channel_keeps_the_vpc_network_and_s3_gains_outside() -> None:
    big = Workload("lr", dataset_bytes=4e9, samples=1_000_000, features=100_000, algorithm="ga_sgd", epochs=1)
    flat, scaled = aws_profile(), SCALED
    for channel, faster in (("s3", True), ("redis", False)):
        before = predict_faas(big, 10, channel, "scatter_reduce", 10240, flat)
        after = predict_faas(big, 10, channel, "scatter_reduce", 10240, scaled)
        assert (after.time["communicate_s"] < 0.9 * before.time["communicate_s"]) is faster, channel
        assert (after.time["load_s"] < 0.5 * before.time["load_s"]) is faster, channel


@FEW
@given(
    st.integers(1, 64),
    st.sampled_from([1769, 2048, 3008]),
    st.sampled_from(["s3", "redis", "dynamodb", "memcached"]),
    st.sampled_from(["x86_64", "arm64"]),
    st.booleans(),
)
def test_more_workers_never_cost_less_than_one_workers_compute(
    workers: int, memory_mb: int, channel: str, arch: str, scaled: bool
) -> None:
    profile = SCALED if scaled else aws_profile()
    # Compute-bound: 2,000 features, 200 epochs: compute is most of one worker's time.
    job = Workload(
        "lr", dataset_bytes=3.2e8, samples=20_000, features=2000, algorithm="ga_sgd", epochs=200, batch_size=1000
    )
    alone = predict_faas(job, 1, channel, "allreduce", memory_mb, profile, architecture=arch)
    assert alone.time["compute_s"] > 0.5 * alone.time_s
    compute_dollars = alone.time["compute_s"] * memory_mb / 1024 * gb_second_price(US["lambda"], arch)
    for cache in (None, CacheBilling("node"), CacheBilling("serverless", engine="valkey")):
        many = predict_faas(job, workers, channel, "allreduce", memory_mb, profile, architecture=arch, cache=cache)
        assert many.cost >= compute_dollars * (1 - 1e-9)


def test_a_node_is_billed_by_the_hour_for_its_lifetime() -> None:
    node = US["elasticache"]["cache.r7g.large"]
    default = CacheBilling()
    assert default.lifetime_h(517) == 1 and default.lifetime_h(3601) == 2
    assert default.dollars("redis", US, node="cache.r7g.large", wall_s=517, requests=0, bytes_moved=0) == node
    stated = CacheBilling(hours=24)
    assert stated.dollars("redis", US, node="cache.r7g.large", wall_s=517, requests=0, bytes_moved=0) == 24 * node
    valkey = CacheBilling(hours=24, engine="valkey")
    # Valkey's nodes cost 20% less; a Memcached channel is priced as Memcached whatever the engine.
    assert valkey.dollars("redis", US, node="cache.r7g.large", wall_s=1, requests=0, bytes_moved=0) == pytest.approx(
        0.8 * 24 * node
    )
    assert valkey.dollars("memcached", US, node="cache.r7g.large", wall_s=1, requests=0, bytes_moved=0) == 24 * node
    share = CacheBilling("share")
    assert share.dollars("redis", US, node="cache.r7g.large", wall_s=1800, requests=0, bytes_moved=0) == node / 2


def test_serverless_bills_ecpus_and_stored_gb_hours_above_its_floor() -> None:
    engines = US["elasticache_engines"]
    redis = CacheBilling("serverless", hours=1)
    idle = redis.dollars("redis", US, node="-", wall_s=60, requests=0, bytes_moved=0)
    assert idle == pytest.approx(engines["redis_min_gb"] * engines["redis_gb_hour"])  # the floor alone
    # A million 10 KB GETs: 10 ECPUs each.
    busy = redis.dollars("redis", US, node="-", wall_s=60, requests=1e6, bytes_moved=1e6 * 10 * 1024)
    assert busy - idle == pytest.approx(1e7 * engines["redis_ecpu"])
    # 3 GB stored for the job's hour: 2 GB above the 1 GB floor.
    full = redis.dollars("redis", US, node="-", wall_s=3600, requests=0, bytes_moved=0, stored_bytes=3 * 2**30)
    assert full == pytest.approx(3 * engines["redis_gb_hour"])
    valkey = CacheBilling("serverless", hours=1, engine="valkey")
    assert valkey.dollars("redis", US, node="-", wall_s=60, requests=1e6, bytes_moved=1e10) < busy


def test_a_finished_jobs_cache_is_priced_as_told() -> None:
    traffic = {"puts": 10, "gets": 10, "requests": 20}
    share = channel_cost("redis", traffic, wall_s=517, region="us-east-1")["dollars"]
    lifetime = channel_cost("redis", traffic, wall_s=517, region="us-east-1", cache=CacheBilling())["dollars"]
    assert lifetime == pytest.approx(US["elasticache"]["cache.t4g.small"]) and share < lifetime / 6
    cost = job_cost("redis", traffic, [], wall_s=517, region="us-east-1", cache=CacheBilling(hours=10))
    assert cost["total_dollars"] == pytest.approx(10 * US["elasticache"]["cache.t4g.small"])


def test_a_bad_cache_billing_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="cache pricing"):
        CacheBilling("reserved")
    with pytest.raises(ConfigError, match="cache engine"):
        CacheBilling(engine="dragonfly")
    with pytest.raises(ConfigError, match="cache hours"):
        CacheBilling(hours=0)
    with pytest.raises(
        ConfigError, match="no eu-west-1 prices for a redis cache priced serverless; priced in: us-east-1"
    ):
        predict_faas(HIGGS, 2, "redis", "allreduce", 3008, aws_profile(), region="eu-west-1",
                     cache=CacheBilling("serverless"))  # fmt: skip


def test_advise_says_which_cache_pricing_it_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LR, *ONE_WAY]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        "cache billed as cache.r7g.large (redis) per node-hour for 1 h (the job's time rounded up to the hour)" in line
    )
    assert main([*LR, *ONE_WAY, "--cache-hours", "720", "--all"]) == 0
    out = capsys.readouterr().out
    assert "per node-hour for 720 h (stated)" in out.strip().splitlines()[-1]
    assert main([*LR, *ONE_WAY, "--cache-pricing", "serverless", "--cache-engine", "valkey"]) == 0
    assert "ElastiCache Serverless (valkey): ECPUs and GB-hours" in capsys.readouterr().out


def test_advise_prices_a_cache_by_the_hour_not_the_second(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    def redis_cost(*extra: str) -> float:
        assert main([*LR, *ONE_WAY, "--json", *extra]) == 0
        rows = json.loads(capsys.readouterr().out)["rows"]
        return min(r["costs"]["channel"] for r in rows if r["option"] == "redis")

    hour = redis_cost()
    assert hour == pytest.approx(US["elasticache"]["cache.r7g.large"])
    assert redis_cost("--cache-hours", "5") == pytest.approx(5 * hour)
    assert redis_cost("--cache-pricing", "serverless", "--cache-engine", "valkey") < hour


def test_advise_refuses_bad_cache_options_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*LR, *ONE_WAY, "--cache-hours", "-3"]) == 1
    assert capsys.readouterr().err.strip() == "error: --cache-hours must be positive, got '-3'"
