"""Timing the patterns the cost model cannot tell apart in a job's first rounds, and keeping the fastest.

Under ``sync.pattern: auto``, where the candidates' predicted rounds lie within the profile's
uncertainty of each other (``PatternChoice.contenders``), the job does not bet on the model.
Its first rounds go to each of them in turn, a few rounds in a row, and every rank times the
rounds of each turn past its first ``UNTIMED``. Then each rank stores its median round of each
pattern on the largest vector all of them reduced, once, reads every rank's record, and all
keep the pattern whose slowest rank was fastest (on a tie, the model's order).

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

from lambdaml.errors import CodecError

#: Rounds at the start of each candidate's turn that are not timed: the first sets up its
#: buffers, and both still carry the previous pattern's work (deleting its values: on AllReduce
#: a whole vector per rank). Turns alternating in blocks of a few rounds timed each pattern
#: beside the others' deletes and heaps: at W = 8, d = 1e7 on Redis they had AllReduce ahead of
#: ScatterReduce, which alone ran 0.78x AllReduce's round.
UNTIMED = 2


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
        ranks all reduce the same ones), and each candidate's median round of it (null: none)."""
        times: dict[tuple[str, int], list[float]] = {}
        for round_, nbytes, seconds in self.observed:
            times.setdefault((self.pattern_at(round_), nbytes), []).append(seconds)
        common = set.intersection(*({n for (p, n) in times if p == pattern} for pattern in self.candidates))
        size = max(common) if common else None
        medians = {p: statistics.median(times[p, size]) if size is not None else None for p in self.candidates}
        return json.dumps({"bytes": size, "round_s": medians}, allow_nan=False).encode()

    def decide(self, records: Mapping[int, bytes | memoryview]) -> tuple[str, dict[str, float] | None]:
        """The pattern every rank keeps, from all ranks' records, and each candidate's round: the
        slowest rank's median, since a BSP round lasts until its last rank has the sum (a mean
        over the ranks counts the AllReduce aggregator's and 2-D's early finishers, and had 2-D
        at 0.91-0.94x its round from a common start at W = 8 on Redis). The model's choice and None
        where a rank timed no round of a candidate, or the ranks timed different vectors (a job
        with too few rounds, or a rank resumed late in it)."""
        per_rank = [_timed(records[rank], rank, self.candidates) for rank in sorted(records)]
        if len({nbytes for nbytes, _ in per_rank}) != 1 or any(s is None for _, r in per_rank for s in r.values()):
            return self.candidates[0], None
        slowest = {p: max(rounds[p] or 0.0 for _, rounds in per_rank) for p in self.candidates}
        return min(self.candidates, key=lambda p: (slowest[p], self.candidates.index(p))), slowest


def _timed(raw: bytes | memoryview, rank: int, candidates: Sequence[str]) -> tuple[int | None, dict[str, float | None]]:
    """One rank's record, checked: a vector size, and for every candidate a positive time or null."""
    try:
        body = json.loads(bytes(raw))
        nbytes, rounds = body["bytes"], body["round_s"]
        ok = (nbytes is None or (isinstance(nbytes, int) and not isinstance(nbytes, bool) and nbytes >= 0)) and (
            isinstance(rounds, dict) and set(rounds) == set(candidates)
        )
        ok = ok and all(s is None or _seconds(s) for s in rounds.values())
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        names = ", ".join(candidates)
        raise CodecError(f"rank {rank}'s pattern trial record is not a round time for each of {names}")
    return nbytes, {p: None if rounds[p] is None else float(rounds[p]) for p in candidates}


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf
