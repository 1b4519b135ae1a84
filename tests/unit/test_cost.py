"""Cost accounting: billed GB-seconds, request prices and cache hours from the price table."""

from __future__ import annotations

import pytest

from lambdaml.cost import Invocation, channel_cost, job_cost, lambda_cost, price_table
from lambdaml.errors import ConfigError
from lambdaml.runtime.reports import Times, Traffic, WorkerRow, billed, total_traffic


def test_price_table_names_its_source_and_date() -> None:
    table = price_table()
    assert "aws.amazon.com/lambda/pricing" in table["_source"]
    assert table["_checked"]


def test_lambda_bills_duration_rounded_up_to_the_millisecond_times_memory() -> None:
    cost = lambda_cost([Invocation(1.0001, 2048), Invocation(0.5, 1024)], "us-east-1")
    assert cost["gb_seconds"] == pytest.approx(1.001 * 2 + 0.5)
    assert cost["dollars"] == pytest.approx(2.502 * 0.0000166667 + 2 * 0.0000002)


def test_arm64_invocations_bill_at_gravitons_gb_second_price() -> None:
    arm = lambda_cost([Invocation(2.0, 1024, architecture="arm64")], "us-east-1")
    assert arm["dollars"] == pytest.approx(2.0 * 0.0000133334 + 0.0000002)
    mixed = lambda_cost([Invocation(2.0, 1024, architecture="arm64"), Invocation(2.0, 1024)], "us-east-1")
    assert mixed["dollars"] == pytest.approx(2.0 * (0.0000133334 + 0.0000166667) + 2 * 0.0000002)
    assert mixed["architectures"] == ["arm64", "x86_64"]
    with pytest.raises(ConfigError, match="unknown Lambda architecture 'sparc'"):
        lambda_cost([Invocation(1.0, 1024, architecture="sparc")], "us-east-1")


def test_s3_requests_priced_by_class() -> None:
    traffic = {"puts": 1000, "gets": 2000, "lists": 10, "deletes": 10, "requests": 3020}
    cost = channel_cost("s3", traffic, wall_s=5, region="us-east-1")
    assert cost["dollars"] == pytest.approx(1020 * 0.000005 + 2000 * 0.0000004)


def test_dynamodb_bills_a_unit_per_kilobyte_written() -> None:
    traffic = {"puts": 10, "gets": 10, "bytes_sent": 100 * 1024, "bytes_received": 8 * 1024, "requests": 20}
    cost = channel_cost("dynamodb", traffic, wall_s=1, region="us-east-1")
    assert cost["dollars"] == pytest.approx(100 * 0.000000625 + 10 * 0.000000125)


def test_a_cache_is_billed_per_node_hour_of_the_job() -> None:
    assert channel_cost("redis", {}, wall_s=1800, region="us-east-1")["dollars"] == pytest.approx(0.016)


def _worker(rank: int, puts: float, duration_s: float) -> WorkerRow:
    times = Times(load_s=0, compute_s=0, communicate_s=0, wait_s=0, total_s=duration_s)
    channel = Traffic(puts=puts, gets=puts, requests=2 * puts, bytes_sent=0, bytes_received=0)
    return WorkerRow(rank=rank, rows=1, times=times, channel=channel, billed=(Invocation(duration_s, 1024),))


def test_job_cost_adds_workers_up_and_rejects_unknown_regions() -> None:
    workers = [_worker(0, 10, 1.0), _worker(1, 5, 2.0)]
    traffic, invocations = total_traffic(workers), billed(workers)
    assert traffic == {"puts": 15, "gets": 15, "requests": 30, "bytes_sent": 0, "bytes_received": 0}
    cost = job_cost("s3", traffic, invocations, wall_s=3, region="us-east-1")
    assert cost["lambda"]["invocations"] == 2
    assert cost["lambda"]["gb_seconds"] == pytest.approx(3.0)
    assert cost["channel"]["requests"] == 30
    assert cost["total_dollars"] == pytest.approx(cost["lambda"]["dollars"] + cost["channel"]["dollars"])
    with pytest.raises(ConfigError, match="no prices for region 'mars-1'; known: eu-west-1, us-east-1, us-west-2"):
        job_cost("s3", traffic, invocations, wall_s=3, region="mars-1")


def test_a_direct_jobs_channel_is_priced_as_its_store_and_its_rendezvous_instance() -> None:
    from analytic_model.tables import prices
    from lambdaml.cost import RENDEZVOUS_INSTANCE

    traffic = {"puts": 1000, "gets": 3000, "requests": 4000}
    on_s3 = channel_cost("s3", traffic, wall_s=1800, region="us-east-1")["dollars"]
    direct = channel_cost("direct", traffic, wall_s=1800, region="us-east-1", store="s3")["dollars"]
    instance = 0.5 * prices("us-east-1")["rendezvous"][RENDEZVOUS_INSTANCE]
    assert on_s3 > 0 and instance > 0
    assert direct == pytest.approx(on_s3 + instance)
    assert channel_cost("direct", {}, wall_s=3600, region="us-east-1", store="redis")["dollars"] > 0
