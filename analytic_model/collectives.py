"""One round of a collective over a channel: AllReduce and ScatterReduce as ``lambdaml/comm/patterns.py``
issues them, 2-D ScatterReduce as ``lambdaml/comm/grid.py`` does, and torch.distributed's ring
all-reduce on EC2.

AllReduce has non-aggregators put once and get once while the aggregator gets W-1 values and
puts one; ScatterReduce has every worker issue 3W-2 requests of about m/W, or, where the
channel reads ranges natively (S3), 2 puts (its pieces packed in one value, its merged chunk)
and 2(W-1) ranged and plain gets; 2-D ScatterReduce on an r x c grid 3(r + c) - 4, 2c - 1 of
about m/c and 2r - 1 of about m/W.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field

from analytic_model.channel_perf import ChannelPerf
from analytic_model.kinds import described
from analytic_model.transfers import Polling, items_of, phase_s, poll_of, store_s
from lambdaml.errors import ConfigError

PATTERNS = ("allreduce", "scatter_reduce", "scatter_reduce_2d")
#: The patterns calibration measures: the 2-D pattern's waits and bytes are ScatterReduce's, in
#: groups of r and c (``ChannelPerf`` gives it ScatterReduce's figures).
CALIBRATED_PATTERNS = ("allreduce", "scatter_reduce")
_FIXED_POINT_STEPS = 8
# The model stays pure Python (no numpy, so not the codec): this mirrors
# ``lambdaml.codec.packed_index_bytes``, and a unit test holds the two equal.


def packed_index_bytes(slots: int) -> int:
    """A packed value's index: a 16-byte header and 16 bytes a slot."""
    return 16 + 16 * slots


@dataclass(frozen=True)
class Requests:
    """Requests and bytes per round, over all workers (for prices and for checking against a run)."""

    puts: float = 0.0
    gets: float = 0.0
    lists: float = 0.0
    deletes: float = 0.0
    bytes_sent: float = 0.0
    bytes_received: float = 0.0

    def __add__(self, other: Requests) -> Requests:
        return Requests(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def scaled(self, factor: float) -> Requests:
        return Requests(*(a * factor for a in astuple(self)))


@dataclass(frozen=True)
class RoundCost:
    seconds: float  # one round's collective on the critical path (compute excluded)
    requests: Requests  # over all workers, counted per key as the channel's statistics count them
    phases: dict[str, float] = field(default_factory=dict)  # the critical path's parts, and the store's busy time


def collective(
    channel: ChannelPerf, pattern: str, workers: int, vector_bytes: float, add_Bps: float, polling: Polling, header: int
) -> RoundCost:
    """One BSP round of ``pattern`` over ``channel`` (without the compute before it)."""
    if workers <= 1:
        return RoundCost(0.0, Requests())
    if pattern == "allreduce":
        return _allreduce(channel, workers, vector_bytes + header, add_Bps, polling)
    if pattern == "scatter_reduce":
        return _scatter_reduce(channel, workers, vector_bytes / workers + header, add_Bps, polling)
    if pattern == "scatter_reduce_2d":
        return _scatter_reduce_2d(channel, workers, vector_bytes, header, add_Bps, polling)
    raise ConfigError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")


def round_seconds(chain: float, busy: float, channel: ChannelPerf) -> float:
    """A round: its critical path, which pays for the CPU of each rank's clean-up thread, or the
    store's busy time, whichever is longer."""
    return max(chain + channel.cleanup_delay_s, busy)


def store_busy(
    channel: ChannelPerf, requests: Requests, put_trips: float, get_trips: float, workers: int, ranged_s: float = 0.0
) -> float:
    """Store time of a whole round, with every rank's batch delete of what it wrote the round before
    (``ranged_s``: what the round's ranged reads cost it beyond their ranges, ``ranged_read_s``).

    The deletes run on background threads, off the round's critical path, but the store
    serves them all the same.
    """
    return (
        store_s(channel, "put", put_trips, requests.bytes_sent, workers)
        + store_s(channel, "get", get_trips, requests.bytes_received, workers)
        + workers * channel.server_request("delete", workers)
        + ranged_s
    )


def ranged_read_s(channel: ChannelPerf, reads: float, object_bytes: float) -> float:
    """The store's time for ``reads`` ranged reads of objects of ``object_bytes`` where it reads
    the whole object for one (``server_range_Bps``: moto; S3 reads just the range)."""
    rate = channel.server_range_Bps
    return reads * object_bytes / rate if rate else 0.0


def cleanup_requests(workers: int) -> Requests:
    """Every rank's batch delete of the keys it wrote the round before (it knows them: no listing)."""
    return Requests(deletes=workers)


def packs_pieces(kind: str) -> bool:
    """Whether ScatterReduce packs each rank's pieces into one value on this channel: as
    ``Round.packs`` decides, where the channel reads ranges natively."""
    return described(kind).ranged_reads


def pattern_requests(
    pattern: str, workers: int, value_bytes: float, items: int = 1, *, packed: bool = False
) -> Requests:
    """The data requests and bytes of one round over all workers, as ``lambdaml/comm/patterns.py`` issues them.

    AllReduce: every non-aggregator puts its vector and gets the merged one; the aggregator
    gets W-1 vectors and puts one. ScatterReduce: every worker puts W-1 pieces and its merged
    chunk and gets W-1 pieces and W-1 merged chunks, 3W-2 requests of about m/W. ``value_bytes``
    is one value on the wire (the vector, or a piece); ``items`` the requests one value takes
    (parts and manifest of a chunked value). Polling misses and the clean-up come on top.
    2-D ScatterReduce moves values of two sizes: ``grid_requests``.
    """
    w = workers
    if w <= 1:
        return Requests()
    if pattern == "allreduce":
        return Requests(
            puts=w * items,
            gets=2 * (w - 1) * items,
            bytes_sent=w * value_bytes,
            bytes_received=2 * (w - 1) * value_bytes,
        )
    if pattern == "scatter_reduce" and packed:
        return Requests(
            puts=2 * w * items,
            gets=2 * w * (w - 1) * items,
            bytes_sent=w * w * value_bytes + w * packed_index_bytes(w - 1),
            bytes_received=2 * w * (w - 1) * value_bytes,
        )
    if pattern == "scatter_reduce":
        return Requests(
            puts=w * w * items,
            gets=2 * w * (w - 1) * items,
            bytes_sent=w * w * value_bytes,
            bytes_received=2 * w * (w - 1) * value_bytes,
        )
    raise ConfigError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")


def grid_shape(world: int) -> tuple[int, int]:
    """The 2-D pattern's grid: (r, c), r * c == W, r <= c, r the largest divisor up to sqrt(W)
    (``lambdaml.comm.grid.grid_shape``; a prime W gets 1 x W, flat ScatterReduce)."""
    rows = max(r for r in range(1, math.isqrt(world) + 1) if world % r == 0)
    return rows, world // rows


def grid_requests(
    workers: int,
    vector_bytes: float,
    header: float,
    piece_items: int = 1,
    segment_items: int = 1,
    *,
    packed: bool = False,
) -> Requests:
    """The data requests and bytes of one 2-D ScatterReduce round over all workers.

    Every worker puts c-1 row pieces and its assembled segment (about m/c each), r-1 column
    pieces and its merged chunk (about m/W), and gets 2(c-1) values of m/c and 2(r-1) of m/W:
    3(r + c) - 4 requests. ``*_items``: the requests one value of each size takes. ``packed``
    (S3): the row pieces go out as one value and the column pieces as another, 4 puts a worker.
    """
    w = workers
    if w <= 1:
        return Requests()
    r, c = grid_shape(w)
    piece = vector_bytes / w + header
    if r == 1:
        return pattern_requests("scatter_reduce", w, piece, piece_items, packed=packed)
    segment = vector_bytes / c + header
    gets = (2 * (c - 1) * segment_items, 2 * (r - 1) * piece_items)
    if packed:
        puts = w * (2 + segment_items + piece_items)
        indexes = w * (packed_index_bytes(c - 1) + packed_index_bytes(r - 1))
    else:
        puts, indexes = w * (c * segment_items + r * piece_items), 0
    return Requests(
        puts=puts,
        gets=w * sum(gets),
        bytes_sent=w * (c * segment + r * piece) + indexes,
        bytes_received=w * (2 * (c - 1) * segment + 2 * (r - 1) * piece),
    )


def still_missing(keys: int) -> float:
    """Keys a missed poll for ``keys`` values asks for again: one at least, and about half of the rest."""
    return (keys + 1) / 2


def _allreduce(channel: ChannelPerf, w: int, m: float, add_Bps: float, polling: Polling) -> RoundCost:
    slowdown = channel.slowdown("allreduce")
    put_others = phase_s(channel, "put", w - 1, 1, m, slowdown)  # every non-aggregator puts its vector
    gather = phase_s(channel, "get", 1, w - 1, m, slowdown)  # the aggregator reads the W-1 vectors
    reduce_ = (w - 1) * m / add_Bps
    put_merged = phase_s(channel, "put", 1, 1, m, slowdown)
    get_merged = phase_s(channel, "get", w - 1, 1, m, slowdown)
    poll_gather, poll_merged = poll_of(channel, w - 1, w - 1), poll_of(channel, 1, w - 1)
    # Steady state: the aggregator waits from the end of its compute for the others' puts, the
    # others wait from their put for the merged value; each wait ends half a poll gap late.
    # Each wait loses at least what a wait on symmetric workers loses (stragglers, scheduling).
    # The two waits depend on each other: iterate to a fixed point. (Phases already last as
    # long as the store takes to serve them; the polls of the waiting workers add to its load.)
    late_agg = late_others = misses_agg = misses_others = 0.0
    straggle = channel.straggle(w)
    items = items_of(channel, m)
    for _ in range(_FIXED_POINT_STEPS):
        late_agg, misses_agg = polling.wait(get_merged + put_others + late_others, poll_gather)
        late_others, misses_others = polling.wait(gather + reduce_ + put_merged + late_agg, poll_merged)
        late_agg, late_others = max(late_agg, straggle), max(late_others, straggle)
    chain = put_others + late_agg + gather + reduce_ + put_merged + late_others + get_merged
    missed = misses_agg * still_missing(w - 1) + (w - 1) * misses_others
    requests = pattern_requests("allreduce", w, m, items) + Requests(gets=missed)
    get_trips = (
        channel.round_trips("get", (w - 1) * items)
        + (w - 1) * channel.round_trips("get", items)
        + misses_agg * channel.round_trips("get", still_missing(w - 1))
        + (w - 1) * misses_others
    )
    busy = store_busy(channel, requests, w * items, get_trips, w)
    phases = {
        "put": put_others,
        "late_aggregator": late_agg,
        "gather": gather,
        "reduce": reduce_,
        "put_merged": put_merged,
        "late_others": late_others,
        "get_merged": get_merged,
        "chain": chain,
        "store_busy": busy,
    }
    return RoundCost(round_seconds(chain, busy, channel), requests + cleanup_requests(w), phases)


def _scatter_reduce(channel: ChannelPerf, w: int, piece: float, add_Bps: float, polling: Polling) -> RoundCost:
    slowdown = channel.slowdown("scatter_reduce")
    packed = packs_pieces(channel.kind)
    if packed:  # one value of the W-1 pieces and their index
        scatter = phase_s(channel, "put", w, 1, (w - 1) * piece + packed_index_bytes(w - 1), slowdown)
    else:
        scatter = phase_s(channel, "put", w, w - 1, piece, slowdown)
    gather_pieces = phase_s(channel, "get", w, w - 1, piece, slowdown)
    reduce_ = (w - 1) * piece / add_Bps
    put_merged = phase_s(channel, "put", w, 1, piece, slowdown)
    gather_merged = phase_s(channel, "get", w, w - 1, piece, slowdown)
    items = items_of(channel, piece)
    # The workers are symmetric: each waits twice (for its chunk's pieces, then for the merged
    # chunks), and each wait loses at least what a wait on stragglers loses.
    straggle = channel.straggle(w, "scatter_reduce")
    poll = poll_of(channel, w - 1, w - 1)
    late, misses_per_wait = polling.wait(straggle, poll)
    late = max(late, straggle)
    chain = scatter + gather_pieces + reduce_ + put_merged + gather_merged + 2 * late
    misses = 2 * w * misses_per_wait
    requests = pattern_requests("scatter_reduce", w, piece, items, packed=packed) + Requests(
        gets=misses * still_missing(w - 1)
    )
    get_trips = 2 * w * channel.round_trips("get", (w - 1) * items) + misses * channel.round_trips(
        "get", still_missing(w - 1)
    )
    put_trips = w * ((items if packed else channel.round_trips("put", (w - 1) * items)) + items)
    # Packed, every piece is a range of its sender's value of W-1 pieces.
    ranged = ranged_read_s(channel, w * (w - 1), (w - 1) * piece) if packed else 0.0
    busy = store_busy(channel, requests, put_trips, get_trips, w, ranged)
    phases = {
        "scatter": scatter,
        "late_pieces": late,
        "gather_pieces": gather_pieces,
        "reduce": reduce_,
        "put_merged": put_merged,
        "late_merged": late,
        "gather_merged": gather_merged,
        "chain": chain,
        "store_busy": busy,
    }
    return RoundCost(round_seconds(chain, busy, channel), requests + cleanup_requests(w), phases)


def _scatter_reduce_2d(
    channel: ChannelPerf, w: int, m: float, header: float, add_Bps: float, polling: Polling
) -> RoundCost:
    r, c = grid_shape(w)
    piece = m / w + header
    if r == 1:  # a prime W: the pattern is flat ScatterReduce
        return _scatter_reduce(channel, w, piece, add_Bps, polling)
    segment = m / c + header
    slowdown = channel.slowdown("scatter_reduce_2d")
    packed = packs_pieces(channel.kind)
    if packed:  # one value of the c-1 row pieces, one of the r-1 column pieces, each with its index
        row_scatter = phase_s(channel, "put", w, 1, (c - 1) * segment + packed_index_bytes(c - 1), slowdown)
        col_scatter = phase_s(channel, "put", w, 1, (r - 1) * piece + packed_index_bytes(r - 1), slowdown)
    else:
        row_scatter = phase_s(channel, "put", w, c - 1, segment, slowdown)
        col_scatter = phase_s(channel, "put", w, r - 1, piece, slowdown)
    row_gather = phase_s(channel, "get", w, c - 1, segment, slowdown)
    row_reduce = (c - 1) * segment / add_Bps
    col_gather = phase_s(channel, "get", w, r - 1, piece, slowdown)
    col_reduce = (r - 1) * piece / add_Bps
    put_merged = phase_s(channel, "put", w, 1, piece, slowdown)
    gather_merged = phase_s(channel, "get", w, r - 1, piece, slowdown)
    put_segment = phase_s(channel, "put", w, 1, segment, slowdown)
    gather_segments = phase_s(channel, "get", w, c - 1, segment, slowdown)
    piece_items, segment_items = items_of(channel, piece), items_of(channel, segment)
    # Symmetric workers wait four times: twice for their row's c-1 values, twice for their
    # column's r-1; each wait loses at least what a wait on that many stragglers loses. Where
    # the workers share the machine's cores (a local profile), all W of them are scheduled
    # around every wait, whichever few it waits on, so there the straggle is sized by W.
    waits = {}
    for group in (c, r):
        straggle = channel.straggle(w if channel.shared_cores else group, "scatter_reduce_2d")
        late, misses = polling.wait(straggle, poll_of(channel, group - 1, w - 1))
        waits[group] = (max(late, straggle), misses)
    (late_row, misses_row), (late_col, misses_col) = waits[c], waits[r]
    chain = (
        row_scatter + row_gather + row_reduce + col_scatter + col_gather + col_reduce + put_merged + gather_merged
        + put_segment + gather_segments + 2 * (late_row + late_col)
    )  # fmt: skip
    missed = 2 * w * (misses_row * still_missing(c - 1) + misses_col * still_missing(r - 1))
    requests = grid_requests(w, m, header, piece_items, segment_items, packed=packed) + Requests(gets=missed)
    get_trips = (
        2
        * w
        * (
            channel.round_trips("get", (c - 1) * segment_items)
            + channel.round_trips("get", (r - 1) * piece_items)
            + misses_row * channel.round_trips("get", still_missing(c - 1))
            + misses_col * channel.round_trips("get", still_missing(r - 1))
        )
    )
    scatter_trips = (
        2
        if packed
        else channel.round_trips("put", (c - 1) * segment_items) + channel.round_trips("put", (r - 1) * piece_items)
    )
    put_trips = w * (scatter_trips + piece_items + segment_items)
    ranged = (
        ranged_read_s(channel, w * (c - 1), (c - 1) * segment) + ranged_read_s(channel, w * (r - 1), (r - 1) * piece)
        if packed
        else 0.0
    )
    busy = store_busy(channel, requests, put_trips, get_trips, w, ranged)
    phases = {
        "row_scatter": row_scatter,
        "late_row_pieces": late_row,
        "row_gather": row_gather,
        "row_reduce": row_reduce,
        "column_scatter": col_scatter,
        "late_column_pieces": late_col,
        "column_gather": col_gather,
        "column_reduce": col_reduce,
        "put_merged": put_merged,
        "late_merged": late_col,
        "gather_merged": gather_merged,
        "put_segment": put_segment,
        "late_segments": late_row,
        "gather_segments": gather_segments,
        "chain": chain,
        "store_busy": busy,
    }
    return RoundCost(round_seconds(chain, busy, channel), requests + cleanup_requests(w), phases)


def ring_allreduce_s(
    workers: int, vector_bytes: float, network_Bps: float, step_latency_s: float, reduce_Bps: float | None = None
) -> float:
    """torch.distributed's ring all-reduce: 2(W-1) steps, each moving m/W over the network.

    In the W-1 reduce-scatter steps a rank also sums the chunk it received. gloo sums each
    chunk on the CPU while the next one arrives, so such a step takes the longer of the
    transfer and the sum (``reduce_Bps``: the rank's summing rate); None: NCCL sums on the
    GPU, at a rate no network comes near.
    """
    if workers <= 1:
        return 0.0
    chunk = vector_bytes / workers
    transfer_s = chunk / network_Bps
    reduce_s = 0.0 if reduce_Bps is None else chunk / reduce_Bps
    reduce_scatter_s = (workers - 1) * (step_latency_s + max(transfer_s, reduce_s))
    allgather_s = (workers - 1) * (step_latency_s + transfer_s)
    return reduce_scatter_s + allgather_s
