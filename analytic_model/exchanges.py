"""One round's communication for every algorithm the catalogue lists, as it really runs over a channel.

- BSP, uncompressed: the pattern's collective of the vector (``collectives.collective``).
- BSP, compressed (EF-SGD, compressed MA-SGD, 1-bit Adam after its warm-up): the same
  collective of compressed codec bundles (``lambdaml/comm/compressed.py``): each rank
  compresses its pieces, each owner its merged chunk, the batch sizes and losses ride
  exactly in chunk 0; plus the CPU of compressing and decompressing.
- 1-bit Adam: ``warmup_steps`` rounds of the uncompressed collective, the rest compressed.
- Ring methods (``lambdaml/comm/ring.py``): a worker puts one message and gets its one or
  two neighbours' (requests per worker do not grow with W), waiting for the slower of them;
  once an epoch a BSP sum of the sample count and loss, once a run the final model average.
- ASP/SSP (``lambdaml/sync/asp.py``): a worker puts its update and probes the next two
  numbers of every other writer in one batched get, with no barrier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from analytic_model.channel_perf import ChannelPerf
from analytic_model.collectives import (
    PATTERNS,
    Requests,
    RoundCost,
    cleanup_requests,
    collective,
    round_seconds,
    still_missing,
    store_busy,
)
from analytic_model.links import link_round, over_links
from analytic_model.profile import CodecPasses, ModelInfo
from analytic_model.transfers import Polling, items_of, phase_s, poll_of, store_s
from analytic_model.wire import CODEC_CALL_VALUES, CODEC_PASSES, SEAL_BYTES, Compression, tensor_bytes, update_bytes
from analytic_model.workload import Schedule, Workload
from lambdaml import catalogue
from lambdaml.errors import ConfigError

#: ASP: pushes between a worker publishing its read cursor, and rank 0 pruning (``asp.PRUNE_EVERY``).
PRUNE_EVERY = 16
#: ASP: keys a probe asks each other writer for in steady state, one past the one new update
#: it had last time (``UpdateLog.read_new``).
PROBE_WINDOW = 2


def ring_degree(workers: int) -> int:
    """The distinct ring neighbours of a rank (``comm.ring.ring_neighbours``): 0, 1 at W = 2, else 2."""
    return min(workers - 1, 2)


def communication(
    workload: Workload,
    info: ModelInfo,
    channel: ChannelPerf,
    pattern: str,
    workers: int,
    sched: Schedule,
    add_Bps: float,
    polling: Polling,
    header: int,
    alone_add_Bps: float | None = None,
    codec_passes: Mapping[str, CodecPasses] | None = None,
) -> RoundCost:
    """The communication of one average round of ``workload`` (compute excluded).

    ``add_Bps``: a worker's summing rate while every worker computes at once (its share of the
    cores); ``alone_add_Bps``: while the others wait on it, as AllReduce's aggregator works (None: the same).
    ``codec_passes``: the compressors' passes a calibration measured (``CODEC_PASSES`` for the rest).
    """
    measured = codec_passes or {}
    if pattern not in PATTERNS:  # ASP never reaches a collective that would refuse it
        raise ConfigError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    if workers <= 1:
        return RoundCost(0.0, Requests())
    compressor = workload.compressor
    catalogue.check_protocol(
        workload.algorithm,
        workload.protocol,
        compression_given=workload.compression is not None,
        compressed=compressor is not None,
        pattern=pattern,
    )
    if over_links(channel.kind):  # a direct channel: the communicator's own sum over links
        if not over_links_priced(workload):
            raise ConfigError("the model prices direct links for BSP rounds of an uncompressed vector only")
        return link_round(channel, workers, workload.vector_bytes(info), add_Bps, header)
    if workload.decentralized:
        return _ring(workload, info, channel, pattern, workers, sched, add_Bps, polling, header, measured)
    if workload.protocol != "bsp":
        return _asynchronous(workload, info, channel, workers, add_Bps, polling)
    plain = collective(channel, pattern, workers, workload.vector_bytes(info), add_Bps, polling, header)
    if compressor is None:
        return plain
    squeezed = _compressed(compressor, workload.n_params(info), info.bytes_per_param, channel, pattern, workers,
                           add_Bps, polling, header, alone_add_Bps or add_Bps, measured)  # fmt: skip
    if workload.algorithm != "onebit_adam":
        return squeezed
    warm = min(1.0, workload.warmup_steps / sched.rounds) if sched.rounds > 0 else 1.0
    return _blend(plain, warm, squeezed, 1.0 - warm)


def over_links_priced(workload: Workload) -> bool:
    """Whether the model prices ``workload``'s rounds over direct links: BSP rounds of an
    uncompressed vector, the sum ``DirectCommunicator`` runs over its links."""
    return workload.protocol == "bsp" and not workload.decentralized and workload.compressor is None


def expected_staleness(workload: Workload, workers: int) -> float | None:
    """ASP/SSP: the other workers' updates one push merges, as ``staleness_seen`` records it.

    Symmetric workers each push once a round, so a push finds about one new update of every
    other writer. None under BSP.
    """
    if workload.protocol == "bsp" or workload.decentralized:
        return None
    return float(workers - 1)


def _blend(a: RoundCost, share_a: float, b: RoundCost, share_b: float) -> RoundCost:
    """The average round of a run that spends ``share_a`` of its rounds as ``a``, the rest as ``b``."""
    phases = {k: share_a * a.phases.get(k, 0.0) + share_b * b.phases.get(k, 0.0) for k in {*a.phases, *b.phases}}
    requests = a.requests.scaled(share_a) + b.requests.scaled(share_b)
    return RoundCost(share_a * a.seconds + share_b * b.seconds, requests, phases)


def _passes(name: str, measured: Mapping[str, CodecPasses]) -> tuple[float, float]:
    """A compressor's (compress, decompress) passes: calibrated where measured, else the shipped figures."""
    found = measured.get(name)
    return CODEC_PASSES[name] if found is None else (found.compress, found.decompress)


def _pass_s(values: float, float_bytes: int, add_Bps: float) -> float:
    """One pass over ``values`` floats, as long as adding one such vector to another."""
    return values * float_bytes / add_Bps


def _codec_s(name: str, n: float, float_bytes: int, add_Bps: float, calls: tuple[float, float],
             passes: float) -> float:  # fmt: skip
    """CPU of ``calls`` (compress, decompress) calls and ``passes`` over the vector's ``n`` values."""
    fixed = calls[0] * CODEC_CALL_VALUES[name][0] + calls[1] * CODEC_CALL_VALUES[name][1]
    return passes * _pass_s(n, float_bytes, add_Bps) + _pass_s(fixed, 8, add_Bps)  # fixed: timed on float64


def _compressed(
    compressor: Compression,
    n: int,
    float_bytes: int,
    channel: ChannelPerf,
    pattern: str,
    w: int,
    add_Bps: float,
    polling: Polling,
    header: int,
    alone_add_Bps: float,
    measured: Mapping[str, CodecPasses],
) -> RoundCost:
    """The pattern's collective of compressed bundles, and the CPU of compressing them.

    The collective cuts ``vector_bytes`` into pieces of ``vector_bytes / W + header``; it is
    handed the size that gives each piece its compressed length on the wire (chunk 0's exact
    sample count and loss spread over the W pieces).
    """
    compress, decompress = _passes(compressor.name, measured)
    if pattern == "allreduce":  # one chunk: every worker's whole vector, and the merged one
        # Critical path: every worker compresses at once, the aggregator alone (the others wait)
        # decompresses W-1 values, sums them and compresses the merged one, and everyone
        # decompresses it at once.
        together = _codec_s(compressor.name, n, float_bytes, add_Bps, (1.0, 1.0), compress + decompress)
        alone_passes = compress + (w - 1) * (decompress + 1)
        alone = _codec_s(compressor.name, n, float_bytes, alone_add_Bps, (1.0, w - 1.0), alone_passes)
        value = compressor.value_bytes(n, float_bytes, extras=2)
        cost = collective(channel, pattern, w, value - header, add_Bps, polling, header)
        codec_s = together + alone
        return replace(cost, seconds=cost.seconds + codec_s, phases={**cost.phases, "codec": codec_s})
    base, extra = divmod(n, w)
    sizes = [base + (1 if j < extra else 0) for j in range(w)]
    pieces = [compressor.value_bytes(size, float_bytes, extras=2 if j == 0 else 0) for j, size in enumerate(sizes)]
    vector = sum(pieces) - w * header
    # Every worker compresses its pieces and, as owner, one merged chunk; it decompresses the
    # W-1 pieces of its chunk and the W-1 merged chunks, and sums the pieces: all at once.
    passes = compress * (1 + 1 / w) + (2 * decompress + 1) * (w - 1) / w
    calls = (w + 1.0, 2.0 * (w - 1))  # a call per piece and per merged chunk
    cost = collective(channel, pattern, w, vector, add_Bps, polling, header)
    codec_s = _codec_s(compressor.name, n, float_bytes, add_Bps, calls, passes)
    return replace(cost, seconds=cost.seconds + codec_s, phases={**cost.phases, "codec": codec_s})


def _ring(
    workload: Workload,
    info: ModelInfo,
    channel: ChannelPerf,
    pattern: str,
    w: int,
    sched: Schedule,
    add_Bps: float,
    polling: Polling,
    header: int,
    measured: Mapping[str, CodecPasses],
) -> RoundCost:
    """One neighbour exchange, with the epoch's loss sum and the run's final average spread over the rounds."""
    n, float_bytes = workload.n_params(info), info.bytes_per_param
    compressor = workload.compressor or Compression("identity")  # a ring method without compression sends models
    message = compressor.value_bytes(n, float_bytes)
    compress, decompress = _passes(compressor.name, measured)
    k = ring_degree(w)
    mixing = k + 1  # the neighbours' vectors added to one's own, or applied to the replicas
    codec_s = _codec_s(compressor.name, n, float_bytes, add_Bps, (1.0, k), compress + k * decompress + mixing)
    exchange = ring_exchange(channel, w, message, polling, codec_s)
    # Once an epoch the sample count and loss are summed; once a run the models are averaged.
    loss_sum = collective(channel, pattern, w, 2 * float_bytes, add_Bps, polling, header)
    final = collective(channel, pattern, w, n * float_bytes, add_Bps, polling, header)
    per_epoch = max(sched.rounds / workload.epochs, 1.0) if workload.rounds is None else max(sched.rounds, 1.0)
    extra = [(loss_sum, 1.0 / per_epoch), (final, 1.0 / max(sched.rounds, 1.0))]
    seconds = exchange.seconds + sum(c.seconds * share for c, share in extra)
    requests_all = exchange.requests + sum((c.requests.scaled(share) for c, share in extra), Requests())
    return RoundCost(seconds, requests_all, {**exchange.phases, "collectives": seconds - exchange.seconds})


def ring_exchange(channel: ChannelPerf, w: int, message: float, polling: Polling, cpu_s: float = 0.0) -> RoundCost:
    """Every worker puts its message and gets its one or two neighbours', waiting for the slower of
    them; ``cpu_s``: its compressing, decompressing and mixing on the critical path."""
    k = ring_degree(w)
    slowdown = channel.slowdown("allreduce")
    put = phase_s(channel, "put", w, 1, message, slowdown)
    get = phase_s(channel, "get", w, k, message, slowdown)
    # A rank waits for the slower of its neighbours; each of them waited for theirs.
    straggle = channel.straggle(min(w, 3), "ring")
    late, misses = polling.wait(straggle, poll_of(channel, k, w - 1))
    late = max(late, straggle)
    chain = put + late + get + cpu_s
    items = items_of(channel, message)
    missed = w * misses * still_missing(k)
    requests = Requests(
        puts=w * items,
        gets=w * k * items + missed,
        bytes_sent=w * message,
        bytes_received=w * k * message,
    )
    get_trips = w * channel.round_trips("get", k * items) + w * misses * channel.round_trips("get", still_missing(k))
    busy = store_busy(channel, requests, w * items, get_trips, w)
    phases = {"put": put, "late_neighbours": late, "get_neighbours": get, "codec": cpu_s, "chain": chain}
    seconds = round_seconds(chain, busy, channel)
    return RoundCost(seconds, requests + cleanup_requests(w), {**phases, "store_busy": busy})


def _asynchronous(
    workload: Workload, info: ModelInfo, channel: ChannelPerf, w: int, add_Bps: float, polling: Polling
) -> RoundCost:
    """One push and merge of ASP/SSP: no barrier; SSP with staleness 0 waits as a barrier would."""
    n, float_bytes = workload.n_params(info), info.bytes_per_param
    update = update_bytes(n, float_bytes)
    probes = PROBE_WINDOW * (w - 1)  # about half of them find an update
    put = phase_s(channel, "put", w, 1, update)
    get = phase_s(channel, "get", w, probes, update * (w - 1) / probes)
    # Merging: the others' deltas summed, the step taken out and added back.
    merge_s = (w - 1 + 2) * _pass_s(n, float_bytes, add_Bps)
    late = 0.0
    if workload.protocol == "ssp" and workload.staleness == 0:  # no worker may run ahead: a barrier each push
        straggle = channel.straggle(w)
        late = max(polling.wait(straggle, poll_of(channel, w - 1, w - 1))[0], straggle)
    chain = put + get + merge_s + late
    cursor = tensor_bytes(w * 8) + SEAL_BYTES  # every PRUNE_EVERY pushes: each worker's read cursor
    items = items_of(channel, update)
    requests = Requests(
        puts=w * items + w / PRUNE_EVERY,
        gets=w * probes * items + w / PRUNE_EVERY,  # and rank 0 reads the W cursors
        deletes=1 / PRUNE_EVERY,
        bytes_sent=w * update + w * cursor / PRUNE_EVERY,
        bytes_received=w * (w - 1) * update + w * cursor / PRUNE_EVERY,
    )
    get_trips = w * channel.round_trips("get", probes * items)
    busy = store_s(channel, "put", w * items, requests.bytes_sent, w) + store_s(
        channel, "get", get_trips, requests.bytes_received, w
    )
    seconds = max(chain, busy)
    phases = {"put": put, "probe": get, "merge": merge_s, "late": late, "chain": chain, "store_busy": busy}
    return RoundCost(seconds, requests, phases)
