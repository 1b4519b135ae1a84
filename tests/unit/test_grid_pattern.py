"""2-D ScatterReduce over the in-memory channel: the flat sum regrouped, the same bits on every
rank and every run, and about 6 sqrt(W) requests per worker per round instead of 3W-2."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from analytic_model.channel_perf import ChannelPerf
from analytic_model.collectives import collective, grid_requests
from analytic_model.collectives import grid_shape as modelled_shape
from analytic_model.transfers import Polling
from lambdaml import codec, seal
from lambdaml.channels.memory import MemoryChannel
from lambdaml.comm.grid import grid_shape
from lambdaml.config import parse_job
from lambdaml.errors import ConfigError
from tests.unit.test_patterns import MemoryView, make_inputs, rounds_left_before_finish, run_world


def test_grid_shape_is_the_squarest_grid_and_the_model_agrees() -> None:
    assert [grid_shape(w) for w in (2, 4, 6, 8, 9, 12, 16, 17)] == [
        (1, 2), (2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (4, 4), (1, 17),
    ]  # fmt: skip
    for w in range(1, 200):
        r, c = grid_shape(w)
        assert r * c == w and r <= c and modelled_shape(w) == (r, c)
        assert all(w % q for q in range(r + 1, math.isqrt(w) + 1))  # no squarer grid divides W


def assert_close_to_the_flat_sum(got: np.ndarray, flat: np.ndarray, xs: list[np.ndarray]) -> None:
    """Within float rounding of flat ScatterReduce's sum and of numpy's float64 sum."""
    exact = np.sum(np.stack(xs).astype(np.float64), axis=0)
    eps = np.finfo(got.dtype).eps
    # The rounding a sum of W terms can make: W ulps of the largest term's magnitude.
    bound = len(xs) * eps * np.max(np.abs(np.stack(xs)), axis=0) + np.finfo(got.dtype).tiny
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)
    assert np.all(np.abs(got.astype(np.float64) - flat) <= 2 * bound)
    scale = np.max(np.abs(flat))
    assert np.max(np.abs(got.astype(np.float64) - flat)) <= 1e-6 * scale


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("d", [1, 7, 1000])
@pytest.mark.parametrize("world", [4, 6, 9, 5])
def test_the_sum_is_the_flat_sum_identical_on_every_rank_and_run(world: int, d: int, dtype: type) -> None:
    inputs = make_inputs(world, d, dtype, rounds=2, seed=world * 1000 + d)
    store = MemoryChannel()
    flat = run_world([store] * world, inputs, "scatter_reduce")
    runs = [run_world([store] * world, inputs, "scatter_reduce_2d") for _ in range(2)]
    for i, xs in enumerate(inputs):
        first = runs[0][i][0]
        assert first.dtype == dtype and first.shape == (d,)
        for run in runs:
            for rank, got in enumerate(run[i]):
                assert got.tobytes() == first.tobytes(), f"rank {rank} round {i}"
        assert_close_to_the_flat_sum(first, flat[i][0], xs)
        if grid_shape(world)[0] == 1:  # a prime W is flat ScatterReduce, bit for bit
            assert first.tobytes() == flat[i][0].tobytes()
    assert store.list("comm/") == []


def test_shape_kept_input_untouched_and_result_owned() -> None:
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((5, 7)) for _ in range(4)]
    originals = [x.copy() for x in xs]
    results = run_world([MemoryChannel()] * 4, [xs], "scatter_reduce_2d")
    for got in results[0]:
        assert got.shape == (5, 7)
        assert np.allclose(got, sum(xs))
        got += 1.0  # writable, and not shared with another rank
    assert all(np.array_equal(x, o) for x, o in zip(xs, originals, strict=True))


def requests_per_worker(pattern: str, world: int, d: int) -> tuple[list[float], dict[str, float]]:
    """Data requests (puts, and gets that found a value) per worker per round, and all workers' totals."""
    stats: dict[int, list[dict[str, int]]] = {}
    hits: dict[int, list[int]] = {}
    for rounds in (1, 3):
        store = MemoryChannel()
        views = [MemoryView(store) for _ in range(world)]
        run_world(views, make_inputs(world, d, np.float64, rounds=rounds), pattern)
        stats[rounds] = [v.stats.as_dict() for v in views]
        hits[rounds] = [v.hits for v in views]
    per_worker = [(stats[3][r]["puts"] - stats[1][r]["puts"] + hits[3][r] - hits[1][r]) / 2 for r in range(world)]
    totals = {
        k: sum(stats[3][r][k] - stats[1][r][k] for r in range(world)) / 2
        for k in ("puts", "bytes_sent", "bytes_received")
    }
    totals["gets"] = sum(hits[3][r] - hits[1][r] for r in range(world)) / 2
    return per_worker, totals


@pytest.mark.parametrize("world", [9, 16])
def test_a_grid_round_takes_at_most_half_the_requests_of_a_flat_one(world: int) -> None:
    flat, _ = requests_per_worker("scatter_reduce", world, 1000)
    grid, _ = requests_per_worker("scatter_reduce_2d", world, 1000)
    r, c = grid_shape(world)
    assert flat == [3 * world - 2] * world  # W=9: 25, W=16: 46
    assert grid == [3 * (r + c) - 4] * world  # W=9: 14, W=16: 20
    if world == 16:
        assert max(grid) <= min(flat) / 2


@pytest.mark.parametrize("world", [6, 9, 16])
def test_the_cost_model_counts_what_the_pattern_issues(world: int) -> None:
    d = 1000
    _, measured = requests_per_worker("scatter_reduce_2d", world, d)
    header = len(codec.encode(np.zeros(0))) + seal.OVERHEAD
    model = grid_requests(world, d * 8, header)
    assert measured["puts"] == model.puts
    assert measured["gets"] == model.gets
    # Chunks differ by one element where W does not divide d: a float each at most.
    assert measured["bytes_sent"] == pytest.approx(model.bytes_sent, abs=8 * world * world)
    assert measured["bytes_received"] == pytest.approx(model.bytes_received, abs=16 * world * world)


def test_old_rounds_are_retired_while_the_job_runs() -> None:
    assert rounds_left_before_finish("scatter_reduce_2d", world=6, rounds=5) == [{4}]


def test_compression_is_refused_in_one_line() -> None:
    job = {
        "dataset": "higgs",
        "sync": {"pattern": "scatter_reduce_2d"},
        "algorithm": {"name": "ga_sgd", "compression": {"name": "onebit"}},
    }
    with pytest.raises(ConfigError, match="not 'scatter_reduce_2d'"):
        parse_job(job)
    parse_job({**job, "algorithm": {"name": "ga_sgd"}})


def test_the_modelled_round_pays_off_where_the_store_serves_requests() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    figures = {"latency_put_s": 0.01, "latency_get_s": 0.01, "extra_put_s": 0.0, "extra_get_s": 0.0}
    figures |= {"bandwidth_put_Bps": 1e8, "bandwidth_get_Bps": 1e8}
    busy = ChannelPerf("test", **figures, server_put_s=0.002, server_get_s=0.002)  # type: ignore[arg-type]
    flat = collective(busy, "scatter_reduce", 16, 4e4, 1e12, polling, 0)
    grid = collective(busy, "scatter_reduce_2d", 16, 4e4, 1e12, polling, 0)
    assert grid.seconds < flat.seconds / 2  # the store's busy time sets both rounds
    assert grid.requests.puts + grid.requests.gets < (flat.requests.puts + flat.requests.gets) / 2
    # A prime W's round is flat ScatterReduce's.
    assert collective(busy, "scatter_reduce_2d", 7, 4e4, 1e12, polling, 0) == collective(
        busy, "scatter_reduce", 7, 4e4, 1e12, polling, 0
    )


def test_a_grid_wait_loses_what_a_wait_among_all_workers_loses_where_they_share_cores() -> None:
    polling = Polling(0.0005, 1.5, 0.025)
    figures = {"latency_put_s": 0.001, "latency_get_s": 0.001, "extra_put_s": 0.0, "extra_get_s": 0.0}
    figures |= {"bandwidth_put_Bps": 1e9, "bandwidth_get_Bps": 1e9, "server_put_s": 1e-5, "server_get_s": 1e-5}
    figures |= {"wait_s": 0.002, "wait_per_worker_s": 0.003}
    apart = ChannelPerf("test", **figures)  # type: ignore[arg-type]  # separate machines (AWS)
    shared = dataclasses.replace(apart, shared_cores=2.0)  # one machine's cores (a local profile)
    # A 2 x 4 grid: its row waits are on 4 workers, its column waits on 2, in a job of 8.
    on_aws = collective(apart, "scatter_reduce_2d", 8, 4e4, 1e12, polling, 0).phases
    local = collective(shared, "scatter_reduce_2d", 8, 4e4, 1e12, polling, 0).phases
    assert on_aws["late_row_pieces"] == pytest.approx(apart.straggle(4, "scatter_reduce_2d"))
    assert on_aws["late_column_pieces"] == pytest.approx(apart.straggle(2, "scatter_reduce_2d"))
    assert local["late_row_pieces"] == local["late_column_pieces"] == pytest.approx(shared.straggle(8))
    assert shared.straggle(8) > apart.straggle(4) > apart.straggle(2)
