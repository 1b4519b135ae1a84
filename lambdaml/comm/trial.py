"""Timing the patterns the cost model cannot tell apart in a job's first rounds, and keeping the fastest.

Under ``sync.pattern: auto``, where the candidates' predicted rounds lie within the profile's
uncertainty of each other (``PatternChoice.contenders``), the job does not bet on the model.
Its first rounds go to each of them in turn, a few rounds in a row, and every rank times the
rounds of each turn past its first ``UNTIMED``. Then each rank stores its median round of each
pattern on the largest vector all of them reduced, once, reads every rank's record, and all
keep the pattern whose slowest rank was fastest, unless the model's choice (or a contender
before the fastest in the model's order) was slower by no more than the rounds' own spread: a
difference the timings cannot resolve keeps the model's order, so the same job keeps the same
pattern from run to run where the patterns tie.

The turns depend only on a round's number counted from the attempt's first round. A rank
that resumes inside the trial replays every round with the pattern it ran the first time,
and one that resumes after it finds its own record stored and reads the same records, so it
keeps the same pattern as the others. Every pattern sums in rank order (2-D: within float
rounding), so the trial's rounds train the model as any others do.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lambdaml.errors import CodecError

#: Rounds at the start of each candidate's turn that are not timed: the first sets up its
#: buffers, and both still carry the previous pattern's work (deleting its values: on AllReduce
#: a whole vector per rank). Turns are blocks of a few rounds, not single rounds, so that no
#: pattern is timed beside the others' deletes and heaps.
UNTIMED = 2

#: Each candidate's seconds (a median round, or a spread), None where none of its rounds was timed.
Timings = dict[str, float | None]


@dataclass
class PatternTrial:
    """The turns of ``candidates`` (the model's choice first) from round ``start``, and this rank's timings."""

    candidates: tuple[str, ...]
    start: int
    rounds: int  # rounds of each candidate that are timed (``sync.trial_rounds``)
    #: (round, bytes reduced, seconds) of every timed round so far; a checkpoint keeps them, so a
    #: trial that spans invocations (Lambda's continuations, a restart) still times every round.
    observed: list[tuple[int, int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.candidates) < 2 or self.rounds < 1:
            raise ValueError("a pattern trial needs two candidates and a round to time each on")

    @property
    def turn(self) -> int:
        """Rounds each candidate runs in a row: its untimed ones, then its timed ones."""
        return UNTIMED + self.rounds

    @property
    def end(self) -> int:
        """The first round after the trial."""
        return self.start + len(self.candidates) * self.turn

    def pattern_at(self, round_: int) -> str:
        """The candidate that round ``round_`` (before ``end``) runs."""
        return self.candidates[(round_ - self.start) // self.turn]

    def observe(self, round_: int, nbytes: int, seconds: float) -> None:
        """Count a round's time, reducing ``nbytes``, if it is a timed round of the trial."""
        if self.start <= round_ < self.end and (round_ - self.start) % self.turn >= UNTIMED:
            self.observed.append((round_, nbytes, seconds))

    def record(self) -> bytes:
        """This rank's record: the largest vector every candidate reduced in its timed rounds (BSP
        ranks all reduce the same ones), and each candidate's median round of it and the median
        absolute deviation of those rounds from it (null: none)."""
        times: dict[tuple[str, int], list[float]] = {}
        for round_, nbytes, seconds in self.observed:
            times.setdefault((self.pattern_at(round_), nbytes), []).append(seconds)
        common = set.intersection(*({n for (p, n) in times if p == pattern} for pattern in self.candidates))
        size = max(common) if common else None
        medians: Timings = dict.fromkeys(self.candidates)
        spreads: Timings = dict.fromkeys(self.candidates)
        if size is not None:
            for p in self.candidates:
                medians[p], spreads[p] = median_and_spread(times[p, size])
        return json.dumps({"bytes": size, "round_s": medians, "spread_s": spreads}, allow_nan=False).encode()

    def decide(self, records: Mapping[int, bytes | memoryview]) -> tuple[str, dict[str, float] | None]:
        """The pattern every rank keeps, from all ranks' records, and each candidate's round: the
        slowest rank's median, since a BSP round lasts until its last rank has the sum (a mean
        over the ranks would count the AllReduce aggregator's and 2-D's early finishers).

        The first candidate in the model's order whose round exceeds the fastest one's by no more
        than their spreads added (each the largest over the ranks) is kept: a verdict on a
        difference within the spread would only make the kept pattern change between runs of
        the same job.

        The model's choice and None where a rank timed no round of a candidate, or the ranks timed
        different vectors (a job with too few rounds, or a rank resumed late in it)."""
        per_rank = [_timed(records[rank], rank, self.candidates) for rank in sorted(records)]
        if len({nbytes for nbytes, _, _ in per_rank}) != 1 or any(
            s is None for _, rounds, _ in per_rank for s in rounds.values()
        ):
            return self.candidates[0], None
        slowest = {p: max(rounds[p] or 0.0 for _, rounds, _ in per_rank) for p in self.candidates}
        spread = {p: max(spreads[p] or 0.0 for _, _, spreads in per_rank) for p in self.candidates}
        fastest = min(self.candidates, key=lambda p: (slowest[p], self.candidates.index(p)))
        best = (slowest[fastest], spread[fastest])
        return next(p for p in self.candidates if within_spread((slowest[p], spread[p]), best)), slowest


def rounds_text(seconds: Mapping[str, float], digits: int = 1) -> str:
    """Each pattern's round in milliseconds, for a log line or a printed result."""
    return ", ".join(f"{p} {s * 1000:.{digits}f} ms" for p, s in seconds.items())


def faster_than_kept(kept: str, rounds: Mapping[str, float]) -> str | None:
    """The pattern timed fastest where a trial kept another (within the rounds' spread), else None."""
    fastest = min(rounds, key=lambda p: rounds[p], default=kept)
    return fastest if kept in rounds and rounds[fastest] < rounds[kept] else None


def median_and_spread(seconds: Sequence[float]) -> tuple[float, float]:
    """The median of some rounds' times, and their spread: the median absolute deviation from it."""
    median = statistics.median(seconds)
    return median, statistics.median(abs(s - median) for s in seconds)


def within_spread(slower: tuple[float, float], faster: tuple[float, float]) -> bool:
    """Whether two timings (median, spread) are too close to tell apart: their medians differ by no
    more than their spreads added."""
    return slower[0] - faster[0] <= slower[1] + faster[1]


def _timed(raw: bytes | memoryview, rank: int, candidates: Sequence[str]) -> tuple[int | None, Timings, Timings]:
    """One rank's record, checked: a vector size, and for every candidate a positive time and a
    spread of at least 0, both null where it timed none of its rounds."""
    try:
        body = json.loads(bytes(raw))
        nbytes, rounds, spreads = body["bytes"], body["round_s"], body["spread_s"]
        ok = (nbytes is None or (isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes >= 0)) and all(
            isinstance(times, dict) and set(times) == set(candidates) for times in (rounds, spreads)
        )
        ok = ok and all(
            (rounds[p] is None and spreads[p] is None) or (_seconds(rounds[p]) and _seconds(spreads[p], zero=True))
            for p in candidates
        )
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        names = ", ".join(candidates)
        raise CodecError(f"rank {rank}'s pattern trial record is not a round time for each of {names}")

    def floats(times: Any) -> Timings:  # checked above: a number or null for every candidate
        return {p: None if times[p] is None else float(times[p]) for p in candidates}

    return nbytes, floats(rounds), floats(spreads)


def _seconds(value: object, *, zero: bool = False) -> bool:
    """A finite number of seconds, more than 0 (or 0 itself, with ``zero``)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (value >= 0 if zero else value > 0)
        and value < math.inf
    )
