"""The analytic model: its arithmetic, its data files, and its agreement with the code it models."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analytic_model import Workload, advise, aws_profile, load_profile, pareto_front, predict_faas, predict_iaas
from analytic_model.advisor import epochs_to_target
from analytic_model.collectives import (
    collective,
    packed_index_bytes,
    pattern_requests,
)
from analytic_model.compute import faas_speed, lambda_vcpus
from analytic_model.prediction import Prediction, heartbeats
from analytic_model.profile import ChannelPerf, save_profile, with_figures
from analytic_model.tables import aws_defaults, is_figure, price_table, prices
from analytic_model.transfers import Poll, Polling, call_s, store_s
from analytic_model.workload import schedule
from lambdaml import codec, seal
from lambdaml.calibrate.exchange import crowded_bytes
from lambdaml.channels import CHANNELS, memcached
from lambdaml.channels.base import Backoff
from lambdaml.channels.dynamodb import DEFAULT_MAX_ITEM_BYTES as DYNAMODB_ITEM
from lambdaml.channels.dynamodb import GET_BATCH
from lambdaml.channels.memory import MemoryChannel
from lambdaml.cli.arguments import parse_bytes
from lambdaml.errors import ChannelError, ConfigError
from tests.capabilities import ORDERED_WRITE_CHANNELS, RANGED_READ_CHANNELS
from tests.unit.test_patterns import MemoryView, make_inputs, run_world

HIGGS = Workload("lr", dataset_bytes=1e9, samples=1_000_000, features=28, algorithm="admm", epochs=10)


# ---- data files -------------------------------------------------------------------------------


def test_price_table_keeps_its_shape_and_covers_cpu_and_gpu_instances() -> None:
    table = price_table()
    assert table["_source"] and table["_checked"]
    assert len(table["regions"]) >= 3
    for region, section in table["regions"].items():
        # S3 Express One Zone (modelled only) is priced where its prices were checked, us-east-1.
        assert set(section) - {"s3express"} == {"lambda", "s3", "dynamodb", "elasticache", "ec2"}, region
        assert {"p3.2xlarge", "g4dn.xlarge", "g5.xlarge", "c5.large", "c5.4xlarge", "m5.xlarge"} <= set(section["ec2"])
        assert all(v > 0 for v in section["ec2"].values()) and all(v > 0 for v in section["elasticache"].values())
    # What lambdaml.cost reads is still where it was.
    assert prices("us-east-1")["elasticache"]["cache.t4g.small"] == 0.032
    assert prices("us-east-1")["lambda"]["gb_second_x86"] == 0.0000166667


def test_every_default_figure_says_where_it_came_from() -> None:
    def walk(node: object, path: str) -> list[str]:
        if is_figure(node):
            assert isinstance(node, dict)
            return [] if str(node["source"]).strip() else [path]
        if isinstance(node, dict):
            if path.endswith(("instances", "models")):
                assert str(node.get("_source", "")).strip(), path
                return []
            labels = ("_", "target")  # notes, and the name of the profile
            return [p for k, v in node.items() if not k.startswith(labels) for p in walk(v, f"{path}.{k}")]
        return [path]  # a bare number: no source

    assert walk(aws_defaults(), "defaults") == []
    profile = aws_profile()
    assert "1,769 MB" in profile.origin["lambda.vcpu_one_at_mb"]
    assert set(profile.instances) == set(prices("us-east-1")["ec2"])  # every instance is priced, and vice versa


def test_defaults_agree_with_the_code_they_describe() -> None:
    profile = aws_profile()
    backoff = Backoff()
    assert (profile.number("poll.initial_s"), profile.number("poll.factor"), profile.number("poll.max_s")) == (
        backoff.initial_s,
        backoff.factor,
        backoff.max_s,
    )
    first_poll = {kind: CHANNELS.get(kind).first_poll_s for kind in CHANNELS}
    assert {k: Polling.of(profile, k).initial_s for k in first_poll} == first_poll  # each channel's own
    assert set(profile.poll.channel_initial_s) == {k for k, s in first_poll.items() if s != backoff.initial_s}
    assert profile.poll.channel_initial_s  # the in-memory stores poll sooner
    assert profile.number("codec_header_bytes") == len(codec.encode(np.zeros(0))) + seal.OVERHEAD
    assert profile.channel("memcached").max_item_bytes == memcached.DEFAULT_MAX_ITEM_BYTES
    assert profile.channel("dynamodb").max_item_bytes == DYNAMODB_ITEM
    assert profile.channel("dynamodb").get_batch == GET_BATCH
    assert profile.channel("s3").get_batch == 1
    for kind in ("s3", "redis", "memcached", "dynamodb"):
        assert profile.channel(kind).put_batch == CHANNELS.get(kind).put_batch


# ---- the pieces ----------------------------------------------------------------------------


def test_lambda_vcpus_grow_with_memory_to_six_at_the_maximum() -> None:
    profile = aws_profile()
    assert lambda_vcpus(1769, profile) == pytest.approx(1.0)
    assert lambda_vcpus(10240, profile) == pytest.approx(6.0)
    assert lambda_vcpus(884.5, profile) == pytest.approx(0.5)
    shares = [lambda_vcpus(m, profile) for m in (128, 512, 1769, 3008, 6000, 10240)]
    assert shares == sorted(shares) and len(set(shares)) == len(shares)
    # More memory computes faster, and a local profile shares its cores between the workers.
    fast = predict_faas(HIGGS, 4, "s3", "allreduce", 10240, profile).time["compute_s"]
    slow = predict_faas(HIGGS, 4, "s3", "allreduce", 1769, profile).time["compute_s"]
    assert fast < slow / 3
    local = with_figures(profile, {"faas": {"shared_cores": 2}})
    assert faas_speed(local, 3008, 2) == 1.0 and faas_speed(local, 3008, 8) == 0.25


def test_rounds_follow_the_algorithm() -> None:
    ga = Workload("lr", dataset_bytes=1e6, samples=10_000, features=28, batch_size=100, epochs=3)
    assert schedule(ga, 4).rounds == 3 * 25  # 2,500 rows per worker in batches of 100
    assert schedule(ga, 4).samples_per_round == 100
    ma = Workload("lr", dataset_bytes=1e6, samples=10_000, features=28, algorithm="ma_sgd", epochs=6, local_epochs=2)
    assert schedule(ma, 4).rounds == 3
    assert schedule(ma, 4).samples_per_round == 2 * 2500
    fixed = Workload("lr", dataset_bytes=1e6, samples=10_000, features=28, rounds=40)
    assert schedule(fixed, 2).rounds == schedule(fixed, 8).rounds == 40


def test_polling_follows_the_backoff_schedule() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    assert polling.scheduled_wait(0.0, Poll(0.001, 0.0005)) == (0.0, 0.0)
    # Instant polls sleep 0.5, 0.75, 1.125, 1.69, 2.53, 3.80 ms: 10.4 ms in all, so six polls miss a
    # 10 ms wait and the data is seen half the last gap after it landed.
    late, misses = polling.scheduled_wait(0.010, Poll(0.0, 0.0))
    assert misses == 6 and late == pytest.approx(0.0038 / 2, rel=0.01)
    # Past the longest interval, one poll every 25 ms plus the poll itself.
    late, misses = polling.scheduled_wait(10.0, Poll(0.005, 0.0025))
    assert late == pytest.approx(0.015 - 0.0025) and 330 < misses <= 345
    # A poll that waits its turn at a busy store sees the data that lands meanwhile: fewer misses.
    assert polling.scheduled_wait(0.010, Poll(0.006, 0.005))[1] < polling.scheduled_wait(0.010, Poll(0.006, 0.003))[1]


def test_a_wait_expects_the_misses_of_waits_spread_around_its_length() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    poll = Poll(0.0037, 0.00186)  # S3 on moto at W = 2: its 6.3 ms AllReduce wait sees the data on the third poll
    assert polling.scheduled_wait(0.0063, poll)[1] == 2
    late, misses = polling.wait(0.0063, poll)
    assert 1.0 < misses < 2.0 and 0 < late < 0.0037  # shorter waits of the spread see it on the second
    assert polling.wait(0.0, poll) == (0.0, 0.0)
    # Where one schedule jumps by a whole poll, the expectation moves by a fraction of one, and
    # it never falls as the wait grows.
    lengths = [0.0001 * i for i in range(1, 400)]
    expected = [polling.wait(t, poll)[1] for t in lengths]
    steps = [b - a for a, b in itertools.pairwise(expected)]
    assert min(steps) >= -1e-12 and max(steps) < 0.5
    # Long waits: the spread averages out to the schedule's own count.
    assert polling.wait(10.0, poll)[1] == pytest.approx(polling.scheduled_wait(10.0, poll)[1], rel=0.02)


class RangedMemoryView(MemoryView):
    """A worker's client of a shared in-memory store that reads ranges natively, as S3 does."""

    ranged_reads = True

    def _get_range(self, key: str, start: int, stop: int) -> bytes:
        value = self._get(key)
        if stop > len(value):
            raise ChannelError(f"range {start}:{stop} of {key} runs past the end of its {len(value)} bytes")
        with self._hits_lock:
            self.hits += 1
        return value[start:stop]


def test_the_model_mirrors_the_channels_ranged_reads_ordered_writes_and_the_packed_index() -> None:
    assert {kind for kind in CHANNELS if CHANNELS.get(kind).ranged_reads} == RANGED_READ_CHANNELS
    assert {kind for kind in CHANNELS if CHANNELS.get(kind).ordered_writes} == ORDERED_WRITE_CHANNELS
    assert all(packed_index_bytes(n) == codec.packed_index_bytes(n) for n in range(10))


@pytest.mark.parametrize(
    ("pattern", "packed"), [("allreduce", False), ("scatter_reduce", False), ("scatter_reduce", True)]
)
@pytest.mark.parametrize("world", [2, 3, 5])
def test_request_counts_and_bytes_match_the_patterns(pattern: str, packed: bool, world: int) -> None:
    """Per round, the real collective puts and reads exactly what the model counts (misses aside)."""
    d = 1000
    stats: dict[int, dict[str, float]] = {}
    for rounds in (1, 3):
        store = MemoryChannel()
        views = [(RangedMemoryView if packed else MemoryView)(store) for _ in range(world)]
        run_world(views, make_inputs(world, d, np.float64, rounds=rounds), pattern)
        stats[rounds] = {
            "puts": sum(v.stats.puts for v in views),
            "hits": sum(v.hits for v in views),
            "bytes_sent": sum(v.stats.bytes_sent for v in views),
            "bytes_received": sum(v.stats.bytes_received for v in views),
            "lists": sum(v.stats.lists for v in views),
            "deletes": sum(v.stats.deletes for v in views),
        }
    per_round = {k: (stats[3][k] - stats[1][k]) / 2 for k in stats[1]}
    header = len(codec.encode(np.zeros(0))) + seal.OVERHEAD
    value = d * 8 + header if pattern == "allreduce" else d * 8 / world + header
    model = pattern_requests(pattern, world, value, packed=packed)
    assert per_round["puts"] == model.puts
    assert per_round["hits"] == model.gets
    assert per_round["bytes_sent"] == pytest.approx(model.bytes_sent, abs=8 * world * world)
    assert per_round["bytes_received"] == pytest.approx(model.bytes_received, abs=16 * world * world)
    # Every rank deletes what it wrote the round before in one batch, without listing the store.
    assert per_round["lists"] == 0
    assert per_round["deletes"] == world
    if packed:  # one packed value of pieces and one merged chunk per worker
        assert model.puts == 2 * world and model.gets == 2 * world * (world - 1)
    elif pattern == "scatter_reduce":
        assert model.puts + model.gets == world * (3 * world - 2)  # 3W-2 per worker
    else:  # the aggregator moves W values: W-1 in, one out
        assert (model.puts + model.gets) == 3 * world - 2


def _channel(**changes: float) -> ChannelPerf:
    figures = {
        "latency_put_s": 0.01,
        "latency_get_s": 0.01,
        "extra_put_s": 0.0,
        "extra_get_s": 0.0,
        "bandwidth_put_Bps": 1e8,
        "bandwidth_get_Bps": 1e8,
        "server_put_s": 0.0,
        "server_get_s": 0.0,
        **changes,
    }
    return ChannelPerf("test", **figures)  # type: ignore[arg-type]


def test_a_round_adds_latency_and_bytes_over_bandwidth() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    channel = _channel()
    # ScatterReduce, no waiting: four phases, each one latency plus its bytes.
    sr = collective(channel, "scatter_reduce", 4, 4e6, add_Bps=1e12, polling=polling, header=0)
    expected = 4 * 0.01 + (3 + 3 + 1 + 3) * 1e6 / 1e8
    assert sr.phases["late_pieces"] == sr.phases["late_merged"] == 0.0
    assert sr.seconds == pytest.approx(expected, rel=1e-3)
    # AllReduce moves whole vectors through the aggregator: slower for a large model ...
    ar = collective(channel, "allreduce", 4, 4e6, add_Bps=1e12, polling=polling, header=0)
    assert ar.phases["gather"] == pytest.approx(0.01 + 3 * 4e6 / 1e8)
    assert ar.seconds > 2 * sr.seconds
    # ... and a store that serves requests one at a time bounds a round by its busy time.
    fast_store = collective(channel, "scatter_reduce", 4, 4e3, 1e12, polling, 0)
    slow_store = collective(_channel(server_put_s=0.05), "scatter_reduce", 4, 4e3, 1e12, polling, 0)
    assert slow_store.seconds >= slow_store.phases["store_busy"] >= 16 * 0.05  # 16 puts, one after another
    assert slow_store.seconds > 10 * fast_store.seconds
    # Each rank's clean-up thread takes the CPU its calls need; stragglers make both waits late.
    cleaning = collective(_channel(cleanup_cpu_s=0.03, cpu_share_get=1.0), "scatter_reduce", 4, 4e6, 1e12, polling, 0)
    assert cleaning.seconds == pytest.approx(sr.seconds + 0.03)
    straggling = collective(_channel(wait_s=0.004), "scatter_reduce", 4, 4e6, 1e12, polling, 0)
    assert straggling.phases["late_pieces"] == straggling.phases["late_merged"] >= 0.004
    assert straggling.seconds >= sr.seconds + 2 * 0.004
    # A pattern's slowdown stretches its bytes, not its latencies; ScatterReduce's own figure wins.
    slowed = _channel(bytes_slowdown=2.0, sr_bytes_slowdown=1.5)
    ar_slowed = collective(slowed, "allreduce", 4, 4e6, 1e12, polling, 0)
    assert ar_slowed.phases["gather"] == pytest.approx(0.01 + 2.0 * 3 * 4e6 / 1e8)
    sr_slowed = collective(slowed, "scatter_reduce", 4, 4e6, 1e12, polling, 0)
    assert sr_slowed.seconds == pytest.approx(4 * 0.01 + 1.5 * (3 + 3 + 1 + 3) * 1e6 / 1e8, rel=1e-3)


def test_the_stores_byte_slowdown_stretches_its_bytes_not_its_requests_nor_the_workers() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    store = {"server_put_s": 0.002, "server_get_s": 0.002, "server_put_Bps": 1e9, "server_get_Bps": 4e9}
    plain, slowed = _channel(**store), _channel(**store, store_bytes_slowdown=4.0)
    assert store_s(slowed, "put", 10, 8e6) == pytest.approx(10 * 0.002 + 4.0 * 8e6 / 1e9)
    assert store_s(slowed, "get", 10, 0) == store_s(plain, "get", 10, 0) == pytest.approx(10 * 0.002)
    # A round the store sets grows with it; the workers' own calls do not.
    small, small_slowed = (collective(c, "scatter_reduce", 8, 4e3, 1e12, polling, 0) for c in (plain, slowed))
    big, big_slowed = (collective(c, "scatter_reduce", 8, 4e7, 1e12, polling, 0) for c in (plain, slowed))
    assert small_slowed.seconds == pytest.approx(small.seconds, rel=1e-2)
    assert big_slowed.phases["store_busy"] > 2 * big.phases["store_busy"]
    assert big_slowed.phases["gather_pieces"] >= big.phases["gather_pieces"]


def test_workers_crowd_each_other_s_bytes_only_as_many_at_once_as_there_are_cores() -> None:
    own = _channel(crowding=0.5)  # separate machines: every further worker crowds
    shared = replace(own, shared_cores=2.0)
    assert [own.crowd_factor(w) for w in (1, 2, 4, 8)] == [1.0, 1.5, 2.5, 4.5]
    assert [shared.crowd_factor(w) for w in (1, 2, 4, 8)] == [1.0, 1.5, 1.5, 1.5]
    # Beyond the cores the calls' CPU waits for a core instead (their CPU share, here none).
    assert call_s(shared, "get", 3, 1e6, crowd=8) == call_s(shared, "get", 3, 1e6, crowd=2)
    assert call_s(own, "get", 3, 1e6, crowd=8) > call_s(own, "get", 3, 1e6, crowd=2)


def test_a_chunked_value_costs_one_round_trip_each_way_where_the_store_keeps_a_requests_order() -> None:
    elsewhere = replace(_channel(), max_item_bytes=1_000_000)  # the manifest a round trip after the parts
    memcached = replace(elsewhere, kind="memcached")
    for op in ("put", "get"):
        assert call_s(elsewhere, op, 1, 3e6) - call_s(memcached, op, 1, 3e6) == pytest.approx(elsewhere.latency(op))
        assert call_s(elsewhere, op, 1, 5e5) == call_s(memcached, op, 1, 5e5)  # one item: no manifest


def test_calibrated_crowding_leaves_out_the_mac_the_model_counts_apart() -> None:
    plain = _channel(shared_cores=2.0)
    authenticated = replace(plain, mac_Bps=1e9)
    extra = 4e6  # each of 2 workers puts 4 MB and gets the other's: 80 ms alone at 100 MB/s
    hashing = authenticated.mac_s(2 * extra, 2)
    assert hashing == pytest.approx(0.008)
    measured = 0.08 * 1.5 + hashing  # bytes slowed 1.5x, and the MAC on top
    assert crowded_bytes(authenticated, 2, int(extra), measured) == pytest.approx(1.5)
    assert crowded_bytes(plain, 2, int(extra), measured) == pytest.approx(1.6)  # no MAC: all of it is bytes
    store_bound = replace(authenticated, server_put_Bps=1e6)
    assert crowded_bytes(store_bound, 2, int(extra), measured) is None


def test_a_store_that_reads_whole_objects_for_a_range_pays_for_the_packed_values() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    s3 = replace(_channel(server_get_s=0.002, server_put_s=0.002), kind="s3")  # S3 packs pieces
    moto = replace(s3, server_range_Bps=4e9)
    m, w = 4e7, 8

    def busy(channel: ChannelPerf, pattern: str) -> float:
        return collective(channel, pattern, w, m, 1e12, polling, 0).phases["store_busy"]

    # Each of the W(W-1) pieces is read out of its sender's value of W-1 pieces.
    piece, index = m / w, packed_index_bytes(w - 1)
    assert busy(moto, "scatter_reduce") - busy(s3, "scatter_reduce") == pytest.approx(
        w * (w - 1) * ((w - 1) * piece) / 4e9, rel=0.01
    )
    assert index < 0.01 * piece
    # On a 2 x 4 grid: the row values hold 3 segments of m/4, the column values one piece.
    assert busy(moto, "scatter_reduce_2d") - busy(s3, "scatter_reduce_2d") == pytest.approx(
        (w * 3 * (3 * m / 4) + w * 1 * piece) / 4e9, rel=0.01
    )
    assert busy(moto, "allreduce") == busy(s3, "allreduce")  # nothing read in ranges
    # Unpacked (a channel without ranged reads) the figure changes nothing.
    assert busy(replace(moto, kind="test"), "scatter_reduce") == busy(replace(s3, kind="test"), "scatter_reduce")


def test_values_over_mallocs_mmap_threshold_move_at_the_big_value_rates() -> None:
    plain = _channel()
    big = _channel(
        big_from_bytes=32 * 2**20, big_value_bytes=48e6, bandwidth_put_big_Bps=5e7, bandwidth_get_big_Bps=2.5e7
    )
    # Up to the threshold a value moves as fitted; over it, every byte at the big value's rate.
    assert big.bytes_s("get", 8e6) == plain.bytes_s("get", 8e6) == 8e6 / 1e8
    assert big.bytes_s("get", 40e6) == 40e6 / 2.5e7 and big.bytes_s("put", 40e6) == 40e6 / 5e7
    polling = Polling(0.0005, 1.5, 0.025)
    # AllReduce of a 40 MB vector moves its bytes at the big rates; ScatterReduce's 10 MB pieces do not.
    ar, ar_plain = (collective(c, "allreduce", 4, 40e6, 1e12, polling, 0).seconds for c in (big, plain))
    sr, sr_plain = (collective(c, "scatter_reduce", 4, 40e6, 1e12, polling, 0).seconds for c in (big, plain))
    assert ar > 2 * ar_plain and sr == sr_plain


def test_chunked_values_cost_their_parts() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    whole = collective(_channel(), "allreduce", 2, 3.5e6, 1e12, polling, 0)
    chunked = collective(_channel(max_item_bytes=1e6), "allreduce", 2, 3.5e6, 1e12, polling, 0)  # type: ignore[arg-type]
    assert chunked.requests.puts == 2 * 5  # 4 parts and a manifest per value
    assert chunked.seconds > whole.seconds


# ---- predictions and costs ---------------------------------------------------------------------


def test_faas_cost_is_gb_seconds_plus_requests_plus_the_channel() -> None:
    profile = aws_profile()
    table = prices("us-east-1")
    p = predict_faas(HIGGS, 10, "s3", "scatter_reduce", 2048, profile)
    billed = p.time_s - p.time["startup_s"] + profile.number("faas.cold_start_s.numpy")  # INIT is billed
    gb_s = 10 * billed * 2
    assert p.costs["lambda"] == pytest.approx(
        gb_s * table["lambda"]["gb_second_x86"] + 11 * table["lambda"]["request"], rel=1e-3
    )
    rounds = p.rounds
    r = p.requests
    s3 = table["s3"]
    expected = rounds * (
        (r["puts"] + r["lists"] + r["deletes"]) * s3["put_like_request"] + r["gets"] * s3["get_like_request"]
    )
    assert p.costs["channel"] == pytest.approx(expected)
    cache = predict_faas(HIGGS, 10, "redis", "scatter_reduce", 2048, profile, cache_node="cache.t4g.small")
    assert cache.costs["channel"] == pytest.approx(cache.time_s / 3600 * 0.032)
    assert p.cost == pytest.approx(sum(p.costs.values()))


def test_every_epoch_ends_with_the_workers_heartbeats_timed_and_priced() -> None:
    # A shared local store serves W workers' heartbeats one after another: each further worker adds its share.
    every_epoch = with_figures(aws_profile(), {"faas": {"heartbeat_every_s": 0.0}})
    quiet = with_figures(every_epoch, {"faas": {"heartbeat_s": 0.0, "heartbeat_per_worker_s": 0.0}})
    unsaved = with_figures(quiet, {"lambda": {"checkpoint_every": None}})  # storage requests: heartbeats alone
    beating = with_figures(every_epoch, {"faas": {"heartbeat_s": 0.04, "heartbeat_per_worker_s": 0.01}})
    s3 = prices("us-east-1")["s3"]
    for workers in (1, 4):
        before = predict_faas(HIGGS, workers, "redis", "allreduce", 2048, quiet)
        after = predict_faas(HIGGS, workers, "redis", "allreduce", 2048, beating)
        added = HIGGS.epochs * (0.04 + 0.01 * (workers - 1))
        assert after.time["heartbeat_s"] == pytest.approx(added) and before.time["heartbeat_s"] == 0.0
        assert after.time_s - before.time_s == pytest.approx(added)
        # One record PUT and one cancel-key GET per worker and epoch, on either profile.
        beats = workers * HIGGS.epochs * (s3["put_like_request"] + s3["get_like_request"])
        silent = replace(HIGGS, epochs=0.5 * HIGGS.epochs)
        longer = predict_faas(HIGGS, workers, "redis", "allreduce", 2048, unsaved)
        fewer = predict_faas(silent, workers, "redis", "allreduce", 2048, unsaved)
        assert longer.costs["storage"] - fewer.costs["storage"] == pytest.approx(beats / 2)
        ring = predict_iaas(HIGGS, workers, "c5.large", beating).time["heartbeat_s"]
        assert ring == pytest.approx(added)  # the torchrun ranks beat the same way


def test_short_epochs_beat_once_per_heartbeat_interval() -> None:
    """A worker beats after its first and last epoch, and in between once ``heartbeat_every_s`` has
    passed: epochs far shorter than the interval share one beat, longer ones each have their own."""
    profile = aws_profile()
    assert profile.faas.heartbeat_every_s == 1.0
    assert heartbeats(profile, 102, 0.05) == pytest.approx(7.0)  # the first, the last, one every 20 epochs
    assert heartbeats(profile, 102, 0.3) == pytest.approx(27.0)  # ... every 4th epoch
    assert heartbeats(profile, 10, 2.0) == 10  # every epoch
    assert heartbeats(profile, 3, 0.01) == pytest.approx(2.01)  # the first and the last
    assert heartbeats(profile, 1, 0.01) == 1
    assert heartbeats(with_figures(profile, {"faas": {"heartbeat_every_s": 0.0}}), 100, 0.05) == 100
    short = replace(HIGGS, samples=10_000, dataset_bytes=1e7, epochs=50)
    p = predict_faas(short, 2, "redis", "allreduce", 2048, profile)
    epoch_s = p.rounds * p.round_s / short.epochs
    assert epoch_s < 0.5  # short enough to share beats
    expected = heartbeats(profile, short.epochs, epoch_s)
    assert 1 <= expected < short.epochs / 2
    assert p.time["heartbeat_s"] == pytest.approx(expected * profile.faas.heartbeat_s)


def test_iaas_bills_per_second_with_a_minute_minimum() -> None:
    profile = with_figures(aws_profile(), {"ec2": {"startup_s": 10.0, "unbilled_startup_s": 5.0}})
    tiny = Workload("lr", dataset_bytes=1e6, samples=1000, features=28, epochs=1)
    p = predict_iaas(tiny, 4, "c5.large", profile)
    assert p.time_s < 60
    assert p.costs["ec2"] == pytest.approx(4 * 60 * 0.085 / 3600)
    long = predict_iaas(HIGGS, 4, "c5.large", with_figures(profile, {"ec2": {"startup_s": 600.0}}))
    assert long.costs["ec2"] == pytest.approx(4 * (long.time_s - 5.0) * 0.085 / 3600)


def test_a_worker_past_the_15_minute_limit_continues_at_a_price() -> None:
    profile = aws_profile()
    long = Workload("resnet18", dataset_bytes=6e8, samples=50_000, batch_size=32, epochs=2)
    p = predict_faas(long, 4, "s3", "scatter_reduce", 3008, profile)
    worker_s = p.time_s - p.time["startup_s"] - p.time["continuation_s"]
    usable = 900 - 10
    assert worker_s > 2 * usable
    assert p.invocations >= 4 * math.ceil(worker_s / usable)
    assert p.time["continuation_s"] > 0
    short = predict_faas(HIGGS, 4, "s3", "scatter_reduce", 3008, profile)
    assert short.invocations == 4 and short.time["continuation_s"] == 0


def test_a_gpu_counts_for_neural_networks_but_not_for_linear_models() -> None:
    profile = aws_profile()
    cnn = Workload("resnet18", dataset_bytes=6e8, samples=50_000, batch_size=32, epochs=1)
    gpu, cpu = predict_iaas(cnn, 1, "g4dn.xlarge", profile), predict_iaas(cnn, 1, "c5.xlarge", profile)
    assert gpu.time["compute_s"] < cpu.time["compute_s"] / 10
    lr_gpu, lr_cpu = predict_iaas(HIGGS, 1, "g4dn.xlarge", profile), predict_iaas(HIGGS, 1, "c5.xlarge", profile)
    assert lr_gpu.time["compute_s"] == pytest.approx(lr_cpu.time["compute_s"])  # both have 4 vCPUs


def test_pareto_front_keeps_only_undominated_rows() -> None:
    def row(t: float, c: float) -> Prediction:
        return Prediction("faas", 1, t, c, "s3")

    rows = [row(10, 5), row(20, 1), row(15, 6), row(5, 9), row(30, 1)]
    assert [(p.time_s, p.cost) for p in pareto_front(rows)] == [(5, 9), (10, 5), (20, 1)]


def test_advise_sweeps_skips_what_does_not_fit_and_recommends_from_the_front() -> None:
    advice = advise(HIGGS, workers=[1, 4, 16], memory_mb=[512, 3008], instances=["c5.large", "c5.4xlarge"])
    assert advice.recommended in advice.pareto
    assert all(r.time_s > 0 and r.cost > 0 for r in advice.rows)
    assert any("512 MB" in s for s in advice.skipped)  # 1 GB over 1 worker does not fit 512 MB
    kinds = {(r.platform, r.option, r.pattern) for r in advice.rows if r.workers == 4}
    assert ("faas", "dynamodb", "scatter_reduce") in kinds and ("iaas", "c5.large", None) in kinds
    data = json.loads(advice.to_json())
    # Where the two best options' ranges overlap, the line says so instead of naming one.
    assert data["recommendation"].startswith("too close to call: " if data["too_close_to_call"] else "recommended: ")
    # Every row a front row stands for is flagged (redis|memcached: two rows of the same figures).
    assert sum(r["pareto"] for r in data["rows"]) == sum(len(p["option"].split("|")) for p in data["pareto"])


# ---- profiles and helpers -------------------------------------------------------------------------


def test_a_saved_profile_lays_over_the_defaults(tmp_path: Path) -> None:
    measured = {"_source": "measured here", "target": "local", "faas": {"shared_cores": 2}}
    measured["channels"] = {"redis": {"latency_get_s": 0.002}}
    path = save_profile(measured, tmp_path / "p.json")
    profile = load_profile(path)
    assert profile.target == "local" and profile.shared_cores == 2
    assert profile.channel("redis").latency_get_s == 0.002
    assert profile.channel("redis").latency_put_s == aws_profile().channel("redis").latency_put_s
    assert profile.origin["channels.redis.latency_get_s"] == "measured here"
    assert "ElastiCache" in profile.origin["channels.redis.latency_put_s"]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not found"),
        ("{not json", "not a JSON profile"),
        ('{"version": 99}', "not a lambdaml profile"),
        ('{"version": 1, "channels": {"redis": {"latency_put": 1}}}', "unknown field 'latency_put'"),
    ],
)
def test_bad_profiles_are_one_line_errors(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "profile.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_profile(path)


def test_sizes_and_targets_from_a_measured_run() -> None:
    assert parse_bytes("8e9") == 8e9
    assert parse_bytes("800MB") == 8e8
    assert parse_bytes("1.5GiB") == 1.5 * 2**30
    for bad in ("-5", "0", "ten", "5XB", "nan"):
        with pytest.raises(ConfigError):
            parse_bytes(bad)
    result = {"loss_curve": [{"epoch": 1, "loss": 0.69}, {"epoch": 2, "loss": 0.62}, {"epoch": 3, "loss": 0.6}]}
    assert epochs_to_target(result, 0.62) == 2
    with pytest.raises(ConfigError, match=r"never reached loss 0.5 in 3 epochs \(best 0.60000\)"):
        epochs_to_target(result, 0.5)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"samples": 0}, "samples must be a positive number"),
        ({"model": "gpt5"}, "unknown model 'gpt5'"),
        ({"algorithm": "lbfgs"}, "unknown algorithm 'lbfgs'"),
        ({"features": 0}, "needs --features"),
        ({"algorithm": "kmeans"}, "kmeans algorithm and the kmeans model go together"),
    ],
)
def test_bad_workloads_are_rejected(changes: dict[str, object], message: str) -> None:
    fields = {**HIGGS.__dict__, **changes}
    with pytest.raises(ConfigError, match=message):
        predict_faas(Workload(**fields), 2, "s3", "allreduce", 3008, aws_profile())  # type: ignore[arg-type]


def test_the_model_is_pure_python() -> None:
    """No cloud SDK, no numpy: the model runs anywhere, including in a notebook without AWS access."""
    code = (
        "import sys, analytic_model, analytic_model.advisor; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'boto3', 'botocore', 'numpy', 'matplotlib'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_arm64_lambda_costs_less_per_gb_second_and_runs_as_fast() -> None:
    profile = aws_profile()
    x86 = predict_faas(HIGGS, 10, "s3", "scatter_reduce", 2048, profile)
    arm = predict_faas(HIGGS, 10, "s3", "scatter_reduce", 2048, profile, architecture="arm64")
    assert arm.time_s == x86.time_s and arm.costs["channel"] == x86.costs["channel"]
    lam = prices("us-east-1")["lambda"]
    requests = x86.invocations + 1
    gb_s = (x86.costs["lambda"] - requests * lam["request"]) / lam["gb_second_x86"]
    assert arm.costs["lambda"] == pytest.approx(gb_s * lam["gb_second_arm"] + requests * lam["request"])
    assert arm.cost < x86.cost
