"""The turns and the verdict of a pattern trial (``lambdaml.comm.trial``), without a channel."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.cli import output
from lambdaml.cli.output import literal_console
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.trial import UNTIMED, PatternTrial, faster_than_kept, rounds_text
from lambdaml.errors import CodecError
from tests.helpers import unique_name
from tests.unit.test_tables_fit import job_result

PAIR = ("allreduce", "scatter_reduce")
ZERO = b'{"allreduce": 0, "scatter_reduce": 0}'


def test_each_contender_has_a_turn_of_rounds_in_a_row_from_the_attempts_first_round() -> None:
    trial = PatternTrial(PAIR, start=10, rounds=3)
    assert trial.end == 10 + 2 * (UNTIMED + 3)
    turns = [trial.pattern_at(r) for r in range(10, trial.end)]
    assert turns == ["allreduce"] * (UNTIMED + 3) + ["scatter_reduce"] * (UNTIMED + 3)
    # The turns are a function of the round alone: a rank resumed mid-trial replays the same ones.
    resumed = PatternTrial(PAIR, start=10, rounds=3)
    assert [resumed.pattern_at(r) for r in range(15, trial.end)] == turns[5:]


def test_only_timed_rounds_count_and_the_record_compares_the_largest_vector_all_reduced() -> None:
    trial = PatternTrial(PAIR, start=0, rounds=2)
    assert UNTIMED == 2  # the rounds below
    for number in range(trial.end + 2):
        trial.observe(number, 80, 1.0 + number)
        trial.observe(number, 8, 100.0)  # another collective of the step, smaller
    trial.observe(3, 800, 1000.0)  # a size only AllReduce reduced: no comparison there
    # AllReduce's turn is rounds 0-3, ScatterReduce's 4-7, each timed past its first two; 8+ are past the trial.
    timed = [(r, n, s) for r, n, s in trial.observed if n == 80]
    assert timed == [(2, 80, 3.0), (3, 80, 4.0), (6, 80, 7.0), (7, 80, 8.0)]
    assert json.loads(trial.record()) == {
        "bytes": 80,
        "round_s": {"allreduce": 3.5, "scatter_reduce": 7.5},
        "spread_s": {"allreduce": 0.5, "scatter_reduce": 0.5},  # the median absolute deviation
    }
    untimed = PatternTrial(PAIR, start=0, rounds=2)
    nothing = {"allreduce": None, "scatter_reduce": None}
    assert json.loads(untimed.record()) == {"bytes": None, "round_s": nothing, "spread_s": nothing}


def test_the_spread_is_the_median_absolute_deviation_of_a_candidates_timed_rounds() -> None:
    trial = PatternTrial(PAIR, start=0, rounds=5)
    seconds = iter([1.0, 1.1, 0.9, 5.0, 1.2, 2.0, 2.0, 2.0, 2.0, 2.0])  # one slow AllReduce round; ScatterReduce steady
    for number in range(trial.end):
        if (number - trial.start) % trial.turn >= UNTIMED:
            trial.observe(number, 8, next(seconds))
    record = json.loads(trial.record())
    assert record["round_s"] == {"allreduce": 1.1, "scatter_reduce": 2.0}
    assert record["spread_s"] == pytest.approx({"allreduce": 0.1, "scatter_reduce": 0.0})


def record(ar: float | None, sr: float | None, nbytes: int = 80, spread: tuple[float, float] = (0.0, 0.0)) -> bytes:
    """A rank's trial record of AllReduce's and ScatterReduce's rounds (and their spreads)."""
    spreads = {"allreduce": None if ar is None else spread[0], "scatter_reduce": None if sr is None else spread[1]}
    return json.dumps(
        {"bytes": nbytes, "round_s": {"allreduce": ar, "scatter_reduce": sr}, "spread_s": spreads}
    ).encode()


def test_the_verdict_is_the_fastest_slowest_rank_and_on_a_tie_the_models_order() -> None:
    trial = PatternTrial(PAIR, start=0, rounds=2)

    # A round lasts until its slowest rank has the sum: AllReduce's rank 1 finished early, not its round.
    chosen, rounds = trial.decide({0: record(0.004, 0.003), 1: record(0.001, 0.003)})
    assert chosen == "scatter_reduce" and rounds == {"allreduce": 0.004, "scatter_reduce": 0.003}
    assert trial.decide({0: record(0.002, 0.002), 1: record(0.002, 0.002)})[0] == "allreduce"
    # A rank that timed none of a contender's rounds: the model's choice, for every rank alike.
    assert trial.decide({0: record(0.004, 0.001), 1: record(0.004, None)}) == ("allreduce", None)
    # Ranks that timed different vectors: no comparison either.
    assert trial.decide({0: record(0.004, 0.001), 1: record(0.004, 0.001, nbytes=8)}) == ("allreduce", None)


def test_a_difference_within_the_rounds_spread_keeps_the_models_order() -> None:
    trial = PatternTrial(PAIR, start=0, rounds=4)
    # ScatterReduce was faster by 0.02 ms, and the rounds spread by 0.01 ms each: no verdict, the model's choice.
    noisy = {0: record(0.00045, 0.00043, spread=(1e-5, 1e-5)), 1: record(0.00044, 0.00042, spread=(1e-5, 1e-5))}
    assert trial.decide(noisy) == ("allreduce", {"allreduce": 0.00045, "scatter_reduce": 0.00043})
    # The largest spread over the ranks counts: rank 1's steadier rounds do not narrow it.
    assert trial.decide({0: record(0.004, 0.003, spread=(6e-4, 5e-4)), 1: record(0.004, 0.003)})[0] == "allreduce"
    # A difference beyond the spreads is a verdict.
    assert trial.decide({0: record(0.004, 0.003, spread=(4e-4, 5e-4)), 1: record(0.004, 0.003)})[0] == "scatter_reduce"
    # Beyond them by the smallest margin too: the spreads add, they are not a ratio.
    steady = {0: record(0.00045, 0.00043), 1: record(0.00044, 0.00042)}
    assert trial.decide(steady)[0] == "scatter_reduce"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"round_s": {"allreduce": 0.1, "scatter_reduce": 0.1}, "spread_s": {"allreduce": 0, "scatter_reduce": 0}}',
        b'{"bytes": -1, "round_s": {"allreduce": 0.1, "scatter_reduce": 0.1}, "spread_s": %s}' % ZERO,
        b'{"bytes": 8, "round_s": {"allreduce": 0.1}, "spread_s": {"allreduce": 0}}',  # a contender missing
        b'{"bytes": 8, "round_s": {"allreduce": 0.1, "scatter_reduce": 0.1, "scatter_reduce_2d": 0.1}, "spread_s": %s}'
        % ZERO,
        b'{"bytes": 8, "round_s": {"allreduce": -1, "scatter_reduce": 0.1}, "spread_s": %s}' % ZERO,
        b'{"bytes": 8, "round_s": {"allreduce": true, "scatter_reduce": 0.1}, "spread_s": %s}' % ZERO,
        b'{"bytes": 8, "round_s": {"allreduce": NaN, "scatter_reduce": 0.1}, "spread_s": %s}' % ZERO,
        b'{"bytes": 8, "round_s": {"allreduce": "fast", "scatter_reduce": 0.1}, "spread_s": %s}' % ZERO,
        b'{"bytes": 8, "round_s": {"allreduce": 0.1, "scatter_reduce": 0.1}}',  # no spreads
        b'{"bytes": 8, "round_s": {"allreduce": 0.1, "scatter_reduce": 0.1}, "spread_s": {"allreduce": -1e-3, '
        b'"scatter_reduce": 0}}',
        b'{"bytes": 8, "round_s": {"allreduce": 0.1, "scatter_reduce": 0.1}, "spread_s": {"allreduce": null, '
        b'"scatter_reduce": 0}}',  # a time without its spread
        b'{"bytes": 8, "round_s": {"allreduce": 0.1, "scatter_reduce": 0.1}, "spread_s": {"allreduce": Infinity, '
        b'"scatter_reduce": 0}}',
    ],
)
def test_a_malformed_record_fails_in_one_line_naming_its_rank(body: bytes) -> None:
    trial = PatternTrial(PAIR, start=0, rounds=2)
    good = record(0.1, 0.2, nbytes=8)
    with pytest.raises(CodecError, match=r"^rank 1's pattern trial record is not a round time for each of") as caught:
        trial.decide({0: good, 1: body})
    assert "\n" not in str(caught.value)


def test_a_trial_needs_two_contenders_and_a_timed_round() -> None:
    with pytest.raises(ValueError):
        PatternTrial(("allreduce",), start=0, rounds=2)
    with pytest.raises(ValueError):
        PatternTrial(PAIR, start=0, rounds=0)


def test_train_prints_the_pattern_a_trial_kept_with_each_contenders_measured_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    printed = literal_console(width=200)
    printed.record = True
    monkeypatch.setattr(output, "console", printed)
    auto = {"name": "higgs-lr", "workers": 4, "channel": {"kind": "redis"}, "sync": {"pattern": "auto"}}
    output.print_result(
        job_result(
            workers=4, spec=auto, cost={}, pattern="scatter_reduce", predicted_round_s=0.0021,
            trial_round_s={"allreduce": 0.0034, "scatter_reduce": 0.0019},
        )
    )  # fmt: skip
    assert (
        "collective scatter_reduce (sync.pattern auto): 2.1 ms a round predicted; kept after timing the first "
        "rounds: allreduce 3.4 ms, scatter_reduce 1.9 ms\n"
    ) in printed.export_text()
    printed = literal_console(width=200)
    printed.record = True
    monkeypatch.setattr(output, "console", printed)
    tied = {"allreduce": 0.00045, "scatter_reduce": 0.00043}
    output.print_result(job_result(workers=4, spec=auto, cost={}, pattern="allreduce", predicted_round_s=0.0005,
                                   trial_round_s=tied))  # fmt: skip
    assert (
        "kept after timing the first rounds: allreduce 0.5 ms, scatter_reduce 0.4 ms (a difference within the "
        "rounds' spread: the model's choice)"
    ) in printed.export_text()


def test_a_round_after_another_patterns_retires_one_round_later() -> None:
    """2-D hears only from its row and column, which is proof enough when they alone read its
    last round; after an AllReduce or ScatterReduce round every rank did, so it waits a round."""
    store, job_id, world = MemoryChannel(), unique_name("trial"), 4
    trio = ("allreduce", "scatter_reduce", "scatter_reduce_2d")
    comms = [
        ChannelCommunicator(store, job_id, r, world, pattern=trio[0], timeout_s=20.0, trial=PatternTrial(trio, 0, 1))
        for r in range(world)
    ]
    retired: list[list[int]] = [[] for _ in range(world)]
    for rank, comm in enumerate(comms):
        real = comm._retire_through
        comm._retire_through = lambda through, rank=rank, real=real: (retired[rank].append(through), real(through))[1]  # type: ignore[method-assign]
    rounds = 12  # turns of 3 (rounds 0-2, 3-5, 6-8), then the kept pattern
    xs = np.arange(world * 8, dtype=np.float64).reshape(world, 8)

    def worker(rank: int) -> str:
        for _ in range(rounds):
            np.testing.assert_array_equal(comms[rank].allreduce(xs[rank]), xs.sum(axis=0))
        comms[rank].finish()
        return comms[rank].pattern_name

    with ThreadPoolExecutor(world) as pool:
        kept = set(pool.map(worker, range(world)))
    assert len(kept) == 1
    switches = {0, 3, 6} | ({9} if kept != {trio[-1]} else set())
    for rank in range(world):
        assert retired[rank] == [n - 1 - (n in switches) for n in range(rounds)], rank
    assert store.list(keys.comm_prefix(job_id)) == []


def test_the_faster_pattern_a_trial_passed_over_is_named_and_rounds_print_in_milliseconds() -> None:
    rounds = {"allreduce": 0.00045, "scatter_reduce": 0.00043}
    assert faster_than_kept("allreduce", rounds) == "scatter_reduce"
    assert faster_than_kept("scatter_reduce", rounds) is None
    assert faster_than_kept("scatter_reduce_2d", rounds) is None  # not a contender: nothing to compare
    assert faster_than_kept("allreduce", {}) is None
    assert rounds_text(rounds) == "allreduce 0.5 ms, scatter_reduce 0.4 ms"
    assert rounds_text(rounds, digits=2) == "allreduce 0.45 ms, scatter_reduce 0.43 ms"
