"""Predicted time and cost of one training job on Lambda (FaaS) or on EC2 (IaaS).

FaaS: W functions start, each loads s/W bytes from S3, then R rounds of compute (C/W at
the function's vCPU share) and one collective over a storage channel, plus a fresh
invocation whenever a worker would pass the 15-minute limit. IaaS: W instances start,
load, then R rounds of compute and a ring all-reduce (2(W-1) steps of m/W) over the VM
network. The collectives' request counts are those of ``lambdaml/comm/patterns.py``:
AllReduce has non-aggregators put once and get once while the aggregator gets W-1 values
and puts one; ScatterReduce has every worker issue 3W-2 requests of about m/W.

Everything here is arithmetic on a ``Profile``; nothing is measured or imported from AWS.
"""

from __future__ import annotations

import math
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from analytic_model.profile import ChannelPerf, InstanceSpec, ModelInfo, Profile, compute_key
from analytic_model.tables import prices, request_dollars
from lambdaml.errors import ConfigError

PATTERNS = ("allreduce", "scatter_reduce")
ALGORITHMS = ("ga_sgd", "ma_sgd", "admm", "kmeans")
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}  # extra state vectors per parameter vector
_STATE_VECTORS = {"ga_sgd": 1, "ma_sgd": 2, "admm": 3, "kmeans": 1}  # params (+ base, + z and u)
_STATS = 2  # sample count and loss sum travel with the vector (``_with_stats``)
KB = 1024
MB = 1024 * 1024


class Infeasible(ConfigError):
    """A configuration that cannot run at all (the advisor skips it and says why)."""


_FIXED_POINT_STEPS = 8


@dataclass(frozen=True)
class Workload:
    """What is trained: the model, the data and the algorithm, independent of where it runs.

    ``epochs`` is how long it trains (the epochs to reach the target loss, from a short
    measured run or from the user); ``rounds``, if given, fixes the number of collective
    rounds instead, whatever the worker count.
    """

    model: str
    dataset_bytes: float
    samples: int
    features: int = 0
    params: int | None = None  # overrides the catalog's count (a model of another size)
    flops_per_sample: float | None = None  # overrides the catalog's training flops per sample
    k: int = 8  # kmeans clusters
    algorithm: str = "ga_sgd"
    batch_size: int = 100  # per worker
    epochs: float = 10.0
    rounds: float | None = None
    local_epochs: int = 1  # ma_sgd and admm: passes between averagings
    optimizer: str = "sgd"
    sparse: bool = False

    def check(self, profile: Profile) -> ModelInfo:
        """Validate against the profile's catalog; user mistakes raise ConfigError with one line."""
        info = profile.model(self.model)
        positive = {"dataset_bytes": self.dataset_bytes, "samples": self.samples, "batch_size": self.batch_size}
        positive.update(epochs=self.epochs, local_epochs=self.local_epochs, k=self.k)
        for name, value in positive.items():
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive number, got {value!r}")
        for name, optional in (("params", self.params), ("flops-per-sample", self.flops_per_sample)):
            if optional is not None and (not math.isfinite(optional) or optional <= 0):
                raise ConfigError(f"{name} must be a positive number, got {optional!r}")
        if self.rounds is not None and (not math.isfinite(self.rounds) or self.rounds <= 0):
            raise ConfigError(f"rounds must be a positive number, got {self.rounds!r}")
        if self.features < 0:
            raise ConfigError(f"features must be a positive number, got {self.features!r}")
        if info.needs_features and self.params is None and self.features < 1:
            raise ConfigError(f"model {self.model!r} needs --features (its size depends on them) or --params")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown algorithm {self.algorithm!r}; known: {', '.join(ALGORITHMS)}")
        if (self.algorithm == "kmeans") != (self.model == "kmeans"):
            raise ConfigError("the kmeans algorithm and the kmeans model go together")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
        return info

    def n_params(self, info: ModelInfo) -> int:
        return int(self.params) if self.params is not None else info.params(self.features, self.k)

    def vector_bytes(self, info: ModelInfo) -> float:
        """Bytes of the vector one worker contributes per round (the parameters plus the loss statistics)."""
        extra = self.k + 1 if self.algorithm == "kmeans" else _STATS
        return (self.n_params(info) + extra) * info.bytes_per_param

    def state_bytes(self, info: ModelInfo) -> float:
        """Bytes of one worker's checkpoint (parameters, algorithm state, optimizer state)."""
        vectors = _STATE_VECTORS[self.algorithm] + OPTIMIZERS[self.optimizer]
        return vectors * self.n_params(info) * info.bytes_per_param


@dataclass(frozen=True)
class Schedule:
    """How the work of one worker splits into rounds."""

    rounds: float  # collective rounds in the whole run
    samples_per_round: float  # samples one worker processes between two collectives
    steps_per_round: float  # optimizer steps one worker takes between two collectives


def schedule(workload: Workload, workers: int) -> Schedule:
    rows = math.ceil(workload.samples / workers)
    steps_per_epoch = max(1, math.ceil(rows / workload.batch_size))  # every worker takes the largest shard's steps
    if workload.algorithm == "ga_sgd":
        per_epoch, samples, steps = float(steps_per_epoch), float(min(workload.batch_size, rows)), 1.0
    elif workload.algorithm == "kmeans":
        per_epoch, samples, steps = 1.0, float(rows), 1.0
    else:  # ma_sgd, admm: local passes, then one averaging
        local = workload.local_epochs
        per_epoch, samples, steps = 1.0 / local, float(rows * local), float(steps_per_epoch * local)
    rounds = workload.rounds if workload.rounds is not None else workload.epochs * per_epoch
    return Schedule(rounds=rounds, samples_per_round=samples, steps_per_round=steps)


# ---- compute -------------------------------------------------------------------------


def lambda_vcpus(memory_mb: float, profile: Profile) -> float:
    """A function's vCPU share: proportional to memory, one vCPU at 1,769 MB, up to 6 at 10,240 MB."""
    one = profile.number("lambda.vcpu_one_at_mb")
    top, top_mb = profile.number("lambda.max_vcpus"), profile.number("lambda.max_memory_mb")
    if memory_mb <= one:
        return memory_mb / one
    return min(top, 1.0 + (memory_mb - one) * (top - 1.0) / (top_mb - one))


def parallel_speed(vcpus: float, profile: Profile) -> float:
    """One-vCPU equivalents of ``vcpus``: each beyond the first adds ``multithread_efficiency`` of one."""
    if vcpus <= 1:
        return vcpus
    return 1.0 + profile.number("compute.multithread_efficiency") * (vcpus - 1.0)


def faas_speed(profile: Profile, memory_mb: float, workers: int) -> float:
    """One-vCPU equivalents a worker computes with: its Lambda share, or its share of the local cores."""
    shared = profile.shared_cores
    if shared is not None:
        return min(1.0, shared / workers)  # local worker processes are single-threaded
    return parallel_speed(lambda_vcpus(memory_mb, profile), profile)


@dataclass(frozen=True)
class ComputeRates:
    per_sample_s: float  # on one vCPU-equivalent
    per_step_s: float
    source: str


def compute_rates(workload: Workload, info: ModelInfo, profile: Profile) -> ComputeRates:
    """Per-sample and per-step time on one vCPU: measured for this model, else from its flops."""
    params = workload.n_params(info)
    flops = workload.flops_per_sample or info.flops(workload.features, workload.k, params)
    exact = profile.measured.get(compute_key(workload.model, params, workload.sparse))
    if exact is not None:
        return ComputeRates(exact.per_sample_s, exact.per_step_s, "measured")
    # Another size of the same model, or another model of the same kind: scale by flops.
    same_kind = [m for m in profile.measured.values() if m.kind == info.kind and m.flops_per_sample > 0]
    if same_kind:
        ref = same_kind[0]
        return ComputeRates(ref.per_sample_s * flops / ref.flops_per_sample, ref.per_step_s, "measured rate")
    gflops = profile.number(f"compute.vcpu_gflops.{info.kind}")
    return ComputeRates(flops / (gflops * 1e9), profile.number(f"compute.per_step_s.{info.runtime}"), "defaults")


def round_compute_s(sched: Schedule, rates: ComputeRates, speed: float) -> float:
    """One worker's compute between two collectives at ``speed`` vCPU-equivalents."""
    return (sched.samples_per_round * rates.per_sample_s + sched.steps_per_round * rates.per_step_s) / speed


# ---- communication over a channel ------------------------------------------------------


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


def _parts(channel: ChannelPerf, size: float) -> int:
    """Items a value of ``size`` bytes is stored in (values over the item limit are chunked)."""
    limit = channel.max_item_bytes
    return 1 if not limit or size <= limit else math.ceil(size / limit)


def _items(channel: ChannelPerf, size: float) -> int:
    """Requests one value costs: its parts, plus the manifest of a chunked value."""
    parts = _parts(channel, size)
    return parts if parts == 1 else parts + 1


def call_s(channel: ChannelPerf, op: str, count: int, size: float, crowd: int = 1, slowdown: float = 1.0) -> float:
    """One worker's call that puts or gets ``count`` values of ``size`` bytes (concurrently or batched).

    ``crowd``: workers making calls at the same time. On a shared machine they slow each
    other: their bytes crowd (``crowding``), and the CPU part of every call waits for a core.
    ``slowdown``: what the pattern's rounds do to the bytes beyond that (``ChannelPerf.slowdown``).
    """
    if count <= 0:
        return 0.0
    items = count * _items(channel, size)
    byte_s = count * size / channel.bandwidth(op) * (1.0 + channel.crowding * (crowd - 1)) * slowdown
    seconds = channel.latency(op) + (items - 1) * channel.extra(op) + byte_s
    if _parts(channel, size) > 1:
        seconds += channel.latency(op)  # manifests go in a second batch; a reader needs the manifest first
    return seconds * channel.cpu_stretch(op, crowd)


def store_s(channel: ChannelPerf, op: str, requests: float, nbytes: float, clients: int = 2) -> float:
    """Time the shared store (or the shared local machine) spends on ``requests`` moving ``nbytes``."""
    seconds = requests * channel.server_request(op, clients)
    bandwidth = channel.server_bandwidth(op)
    if bandwidth:
        seconds += nbytes / bandwidth
    return seconds


def phase_s(channel: ChannelPerf, op: str, clients: int, count: int, size: float, slowdown: float = 1.0) -> float:
    """``clients`` workers each move ``count`` values at once: the slower of the worker and the store."""
    if clients <= 0 or count <= 0:
        return 0.0
    trips = clients * channel.round_trips(op, count * _items(channel, size))
    store = store_s(channel, op, trips, clients * count * size, clients)
    return max(call_s(channel, op, count, size, clients, slowdown), store)


@dataclass(frozen=True)
class Poll:
    """One poll: how long it takes, and how long after it is sent it sees the store's state."""

    seconds: float
    sees_after_s: float


def poll_of(channel: ChannelPerf, keys: int, others: int) -> Poll:
    """One poll for ``keys`` missing values while ``others`` workers keep the store busy.

    Unloaded, a poll takes its latency and sees the store half-way. Where the store serves
    requests one after another (moto, a saturated cache) it waits its turn behind about one
    request of each other worker, and sees the store when its turn comes.
    """
    trips = channel.round_trips("get", keys)
    unloaded = call_s(channel, "get", keys, 0)
    per_request = channel.server_request("get", others + 1)
    queue = per_request * others
    seconds = max(unloaded, queue + per_request * trips)
    return Poll(seconds, max(unloaded / 2, queue))


@dataclass(frozen=True)
class Polling:
    """``wait_for``'s schedule: polls ``initial``, then ``factor`` times longer, up to ``max``."""

    initial_s: float
    factor: float
    max_s: float

    @classmethod
    def of(cls, profile: Profile) -> Polling:
        return cls(profile.number("poll.initial_s"), profile.number("poll.factor"), profile.number("poll.max_s"))

    def wait(self, waiting_s: float, poll: Poll) -> tuple[float, float]:
        """(expected delay after the data landed, polls that found nothing) for a wait of ``waiting_s``.

        A worker polls at once, then sleeps ``initial``, ``initial * factor`` ... between polls.
        A poll that sees the store before the data landed misses; the next sees it, on average
        half a gap after it landed. The delay returned excludes the part of the successful
        poll that the get which follows it already counts.
        """
        if waiting_s <= 0:
            return 0.0, 0.0
        seen, delay, misses = poll.sees_after_s, self.initial_s, 0
        while seen < waiting_s:
            misses += 1
            gap = poll.seconds + delay
            if delay >= self.max_s:  # the interval stopped growing: count the rest at once
                misses += max(0, math.ceil((waiting_s - seen) / gap) - 1)
                break
            seen += gap
            delay = min(delay * self.factor, self.max_s)
        if misses == 0:
            return 0.0, 0.0
        return max(gap / 2 - poll.sees_after_s, 0.0), float(misses)


@dataclass(frozen=True)
class RoundCost:
    seconds: float  # one round's collective on the critical path (compute excluded)
    requests: Requests  # over all workers, counted per key as the channel's statistics count them
    phases: dict[str, float] = field(default_factory=dict)  # the critical path's parts, and the store's busy time


def collective(
    channel: ChannelPerf, pattern: str, workers: int, vector_bytes: float, add_Bps: float, polling: Polling, header: int
) -> RoundCost:
    """One BSP round of AllReduce or ScatterReduce over ``channel`` (without the compute before it)."""
    if workers <= 1:
        return RoundCost(0.0, Requests())
    if pattern == "allreduce":
        return _allreduce(channel, workers, vector_bytes + header, add_Bps, polling)
    if pattern == "scatter_reduce":
        return _scatter_reduce(channel, workers, vector_bytes / workers + header, add_Bps, polling)
    raise ConfigError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")


def _round(chain: float, busy: float, channel: ChannelPerf) -> float:
    """A round: its critical path, which pays for the CPU of each rank's clean-up thread, or the
    store's busy time, whichever is longer."""
    return max(chain + channel.cleanup_delay_s, busy)


def _store_busy(channel: ChannelPerf, requests: Requests, put_trips: float, get_trips: float, workers: int) -> float:
    """Store time of a whole round, with every rank's batch delete of what it wrote the round before.

    The deletes run on background threads, off the round's critical path, but the store
    serves them all the same.
    """
    return (
        store_s(channel, "put", put_trips, requests.bytes_sent, workers)
        + store_s(channel, "get", get_trips, requests.bytes_received, workers)
        + workers * channel.server_request("delete", workers)
    )


def _cleanup(workers: int) -> Requests:
    """Every rank's batch delete of the keys it wrote the round before (it knows them: no listing)."""
    return Requests(deletes=workers)


def pattern_requests(pattern: str, workers: int, value_bytes: float, items: int = 1) -> Requests:
    """The data requests and bytes of one round over all workers, as ``lambdaml/comm/patterns.py`` issues them.

    AllReduce: every non-aggregator puts its vector and gets the merged one; the aggregator
    gets W-1 vectors and puts one. ScatterReduce: every worker puts W-1 pieces and its merged
    chunk and gets W-1 pieces and W-1 merged chunks, 3W-2 requests of about m/W. ``value_bytes``
    is one value on the wire (the vector, or a piece); ``items`` the requests one value takes
    (parts and manifest of a chunked value). Polling misses and the clean-up come on top.
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
    if pattern == "scatter_reduce":
        return Requests(
            puts=w * w * items,
            gets=2 * w * (w - 1) * items,
            bytes_sent=w * w * value_bytes,
            bytes_received=2 * w * (w - 1) * value_bytes,
        )
    raise ConfigError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")


def _still_missing(keys: int) -> float:
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
    items = _items(channel, m)
    for _ in range(_FIXED_POINT_STEPS):
        late_agg, misses_agg = polling.wait(get_merged + put_others + late_others, poll_gather)
        late_others, misses_others = polling.wait(gather + reduce_ + put_merged + late_agg, poll_merged)
        late_agg, late_others = max(late_agg, straggle), max(late_others, straggle)
    chain = put_others + late_agg + gather + reduce_ + put_merged + late_others + get_merged
    missed = misses_agg * _still_missing(w - 1) + (w - 1) * misses_others
    requests = pattern_requests("allreduce", w, m, items) + Requests(gets=missed)
    get_trips = (
        channel.round_trips("get", (w - 1) * items)
        + (w - 1) * channel.round_trips("get", items)
        + misses_agg * channel.round_trips("get", _still_missing(w - 1))
        + (w - 1) * misses_others
    )
    busy = _store_busy(channel, requests, w * items, get_trips, w)
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
    return RoundCost(_round(chain, busy, channel), requests + _cleanup(w), phases)


def _scatter_reduce(channel: ChannelPerf, w: int, piece: float, add_Bps: float, polling: Polling) -> RoundCost:
    slowdown = channel.slowdown("scatter_reduce")
    scatter = phase_s(channel, "put", w, w - 1, piece, slowdown)
    gather_pieces = phase_s(channel, "get", w, w - 1, piece, slowdown)
    reduce_ = (w - 1) * piece / add_Bps
    put_merged = phase_s(channel, "put", w, 1, piece, slowdown)
    gather_merged = phase_s(channel, "get", w, w - 1, piece, slowdown)
    items = _items(channel, piece)
    # The workers are symmetric: each waits twice (for its chunk's pieces, then for the merged
    # chunks), and each wait loses at least what a wait on stragglers loses.
    straggle = channel.straggle(w, "scatter_reduce")
    poll = poll_of(channel, w - 1, w - 1)
    late, misses_per_wait = polling.wait(straggle, poll)
    late = max(late, straggle)
    chain = scatter + gather_pieces + reduce_ + put_merged + gather_merged + 2 * late
    misses = 2 * w * misses_per_wait
    requests = pattern_requests("scatter_reduce", w, piece, items) + Requests(gets=misses * _still_missing(w - 1))
    get_trips = 2 * w * channel.round_trips("get", (w - 1) * items) + misses * channel.round_trips(
        "get", _still_missing(w - 1)
    )
    put_trips = w * (channel.round_trips("put", (w - 1) * items) + items)
    busy = _store_busy(channel, requests, put_trips, get_trips, w)
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
    return RoundCost(_round(chain, busy, channel), requests + _cleanup(w), phases)


def ring_allreduce_s(workers: int, vector_bytes: float, network_Bps: float, step_latency_s: float) -> float:
    """torch.distributed's ring all-reduce: 2(W-1) steps, each moving m/W over the VM network."""
    if workers <= 1:
        return 0.0
    return 2 * (workers - 1) * (step_latency_s + vector_bytes / workers / network_Bps)


# ---- predictions ---------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """One configuration's predicted time and cost, with the parts they add up from."""

    platform: str  # "faas" or "iaas"
    workers: int
    time_s: float
    cost: float
    option: str  # the channel (FaaS) or the instance type (IaaS)
    pattern: str | None = None
    memory_mb: int | None = None
    rounds: float = 0.0
    round_s: float = 0.0  # compute plus collective, per round
    time: dict[str, float] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)  # per round, all workers
    invocations: int = 0
    compute_from: str = ""

    @property
    def label(self) -> str:
        if self.platform == "faas":
            memory = f", {self.memory_mb} MB" if self.memory_mb else ""
            how = f"{self.option}, {self.pattern}" if self.workers > 1 else "no channel"
            return f"FaaS {self.workers} x Lambda ({how}{memory})"
        return f"IaaS {self.workers} x {self.option}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def _fits(profile: Profile, section: str, memory_mb: float, shard_bytes: float) -> bool:
    need = profile.number(f"{section}.runtime_memory_mb") + profile.number("lambda.data_memory_factor") * (
        shard_bytes / MB
    )
    return memory_mb >= need


def memory_needed_mb(profile: Profile, shard_bytes: float) -> float:
    """Smallest Lambda memory that holds a worker's shard next to the runtime."""
    return profile.number("lambda.runtime_memory_mb") + profile.number("lambda.data_memory_factor") * shard_bytes / MB


def predict_faas(
    workload: Workload,
    workers: int,
    channel: str,
    pattern: str,
    memory_mb: int,
    profile: Profile,
    *,
    region: str = "us-east-1",
    cache_node: str | None = None,
) -> Prediction:
    """Time and cost of ``workers`` Lambda functions synchronizing through ``channel``."""
    info = workload.check(profile)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    low, high = profile.number("lambda.min_memory_mb"), profile.number("lambda.max_memory_mb")
    if not low <= memory_mb <= high:
        raise ConfigError(f"Lambda memory must be {low:g}-{high:g} MB, got {memory_mb}")
    perf = profile.channel(channel)
    table = prices(region)
    sched = schedule(workload, workers)
    rates = compute_rates(workload, info, profile)
    speed = faas_speed(profile, memory_mb, workers)
    shard = workload.dataset_bytes / workers
    vector = workload.vector_bytes(info)
    header = int(profile.number("codec_header_bytes"))
    add_Bps = profile.number("compute.add_Bps") * speed

    compute = round_compute_s(sched, rates, speed) + (perf.step_wake_s if workers > 1 else 0.0)
    comm = collective(perf, pattern, workers, vector, add_Bps, Polling.of(profile), header)
    round_s = compute + comm.seconds
    train_s = sched.rounds * round_s

    network = profile.number("faas.network_Bps")
    latency = profile.number("faas.load_latency_s")
    load_s = latency + shard / network
    startup_s = profile.number(f"faas.cold_start_s.{info.runtime}") + workers * profile.number("faas.invoke_s")

    # Checkpoints on Lambda every ``checkpoint_every`` rounds; a local profile has none (null).
    state = workload.state_bytes(info)
    every = profile.figure("lambda.checkpoint_every")
    checkpoints = sched.rounds / float(every) if every else 0.0
    checkpoint_s = checkpoints * (latency + state / network)
    worker_s = load_s + train_s + checkpoint_s

    # Continuations: a worker stops before the deadline, and a fresh invocation reloads its shard and state.
    usable = profile.number("lambda.timeout_s") - profile.number("lambda.continuation_margin_s")
    resume_s = profile.number("faas.warm_start_s") + load_s + 2 * (latency + state / network)
    if resume_s >= usable:
        raise Infeasible(f"a continuation of {workers} workers would spend its whole invocation reloading")
    invocations = max(1, math.ceil((worker_s - resume_s) / (usable - resume_s)))  # each resumes once more
    continuation_s = (invocations - 1) * resume_s
    total_s = startup_s + worker_s + continuation_s

    cold = profile.number(f"faas.cold_start_s.{info.runtime}") if profile.figure("lambda.init_billed") else 0.0
    billed_s = worker_s + continuation_s + cold
    gb_s = workers * billed_s * memory_mb / KB
    lam = table["lambda"]
    lambda_dollars = gb_s * lam["gb_second_x86"] + (workers * invocations + 1) * lam["request"]
    traffic = comm.requests.scaled(sched.rounds)
    storage_gets = workers * invocations + workers * (invocations - 1)  # shards, then checkpoints on resume
    storage_puts = workers * (checkpoints + invocations - 1)
    s3 = table["s3"]
    storage_dollars = storage_gets * s3["get_like_request"] + storage_puts * s3["put_like_request"]
    channel_dollars = _channel_dollars(channel, traffic, total_s, table, profile, cache_node)
    return Prediction(
        platform="faas",
        workers=workers,
        time_s=total_s,
        cost=lambda_dollars + storage_dollars + channel_dollars,
        option=channel,
        pattern=pattern,
        memory_mb=memory_mb,
        rounds=sched.rounds,
        round_s=round_s,
        time={
            "startup_s": startup_s,
            "load_s": load_s,
            "compute_s": sched.rounds * compute,
            "communicate_s": sched.rounds * comm.seconds,
            "checkpoint_s": checkpoint_s,
            "continuation_s": continuation_s,
        },
        costs={"lambda": lambda_dollars, "channel": channel_dollars, "storage": storage_dollars},
        requests={k: v for k, v in asdict(comm.requests).items()},
        invocations=workers * invocations,
        compute_from=rates.source,
    )


def _channel_dollars(
    kind: str, traffic: Requests, wall_s: float, table: dict[str, Any], profile: Profile, cache_node: str | None
) -> float:
    """The channel's price for the whole job: requests (S3, DynamoDB) or node time (a cache)."""
    if kind in ("redis", "memcached"):
        node = cache_node or str(profile.figure("cache_node"))
        try:
            hourly = float(table["elasticache"][node])
        except KeyError:
            known = ", ".join(sorted(table["elasticache"]))
            raise ConfigError(f"no price for cache node {node!r}; known: {known}") from None
        return wall_s / 3600 * hourly
    return request_dollars(
        kind,
        table,
        puts=traffic.puts,
        gets=traffic.gets,
        lists=traffic.lists,
        deletes=traffic.deletes,
        bytes_sent=traffic.bytes_sent,
        bytes_received=traffic.bytes_received,
    )


def iaas_speed(instance: InstanceSpec, kind: str, profile: Profile) -> float:
    """One-vCPU equivalents of an instance for a model kind; a GPU counts for neural networks only."""
    if instance.gpu and instance.gpu_tflops > 0 and kind in ("dense", "conv"):
        return instance.gpu_tflops * 1e12 / (profile.number(f"compute.vcpu_gflops.{kind}") * 1e9)
    return parallel_speed(instance.vcpus * instance.vcpu_speed, profile)


def predict_iaas(
    workload: Workload, workers: int, instance_type: str, profile: Profile, *, region: str = "us-east-1"
) -> Prediction:
    """Time and cost of ``workers`` EC2 instances training with a ring all-reduce."""
    info = workload.check(profile)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    instance = profile.instance(instance_type)
    table = prices(region)
    try:
        hourly = float(table["ec2"][instance_type])
    except KeyError:
        raise ConfigError(f"no {region} price for instance type {instance_type!r}") from None
    sched = schedule(workload, workers)
    rates = compute_rates(workload, info, profile)
    speed = iaas_speed(instance, info.kind, profile)
    vector = workload.vector_bytes(info)
    compute = (sched.samples_per_round * rates.per_sample_s) / speed + sched.steps_per_round * rates.per_step_s
    network_Bps = instance.network_gbps * 1e9 / 8
    ring = ring_allreduce_s(workers, vector, network_Bps, profile.number("ec2.ring_latency_s"))
    reduce_ = (workers - 1) * vector / workers / profile.number("compute.add_Bps") if workers > 1 else 0.0
    round_s = compute + ring + reduce_
    read_Bps = min(instance.burst_gbps * 1e9 / 8, profile.number("ec2.s3_read_Bps"))
    load_s = profile.number("faas.load_latency_s") + workload.dataset_bytes / workers / read_Bps
    startup_s = profile.number("ec2.startup_s")
    total_s = startup_s + load_s + sched.rounds * round_s
    billed_s = max(profile.number("ec2.min_billed_s"), total_s - profile.number("ec2.unbilled_startup_s"))
    ec2_dollars = workers * billed_s * hourly / 3600
    storage_dollars = workers * table["s3"]["get_like_request"]
    return Prediction(
        platform="iaas",
        workers=workers,
        time_s=total_s,
        cost=ec2_dollars + storage_dollars,
        option=instance_type,
        rounds=sched.rounds,
        round_s=round_s,
        time={
            "startup_s": startup_s,
            "load_s": load_s,
            "compute_s": sched.rounds * compute,
            "communicate_s": sched.rounds * (ring + reduce_),
        },
        costs={"ec2": ec2_dollars, "storage": storage_dollars},
        compute_from=rates.source,
    )


def iaas_fits(workload: Workload, workers: int, instance_type: str, profile: Profile) -> bool:
    """Whether an instance holds its shard next to the training runtime."""
    instance = profile.instance(instance_type)
    return _fits(profile, "ec2", instance.memory_gib * KB, workload.dataset_bytes / workers)
