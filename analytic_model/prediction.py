"""Predicted time and cost of one training job on Lambda (FaaS) or on EC2 (IaaS).

FaaS: W functions start, each loads s/W bytes from S3, then R rounds of compute (C/W at
the function's vCPU share) and one collective over a storage channel, plus a fresh
invocation whenever a worker would pass the 15-minute limit. IaaS: W instances start,
load, then R rounds of compute and a ring all-reduce (2(W-1) steps of m/W) over the VM
network. Everything here is arithmetic on a ``Profile``; nothing is measured or imported from AWS.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from analytic_model.cache_billing import CacheBilling
from analytic_model.collectives import Requests, ring_allreduce_s
from analytic_model.compute import (
    architecture_speed,
    compute_rates,
    faas_speed,
    iaas_speed,
    on_gpu,
    round_compute_s,
    update_s,
)
from analytic_model.exchanges import communication, expected_staleness, over_links_priced
from analytic_model.kinds import MODELLED_NOTE, MODELLED_ONLY, PUBLISHED_NOTE, described
from analytic_model.links import (
    algorithm,
    describe_rendezvous,
    link_rate,
    over_links,
    rendezvous_dollars,
    rendezvous_of,
)
from analytic_model.network import in_vpc, lambda_network_Bps, scaled_channel
from analytic_model.profile import ModelInfo, Profile
from analytic_model.tables import RegionPrices, channel_dollars, gb_second_price, price_table, prices
from analytic_model.transfers import Polling
from analytic_model.uncertainty import Range, Uncertainty
from analytic_model.workload import Workload, model_memory_bytes, schedule
from lambdaml.errors import ConfigError

KB = 1024
MB = 1024 * 1024


class Infeasible(ConfigError):
    """A configuration that cannot run at all (the advisor skips it and says why)."""


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
    architecture: str | None = None  # FaaS: the functions' instruction set (x86_64, arm64)
    # Whether the label names x86_64 too (the advisor sets it where both architectures are tried).
    label_architecture: bool = False
    notes: tuple[str, ...] = ()  # e.g. that the channel is modelled only
    uncertainty: Uncertainty | None = None  # the profile's: how far a measurement may fall from this
    staleness: float | None = None  # ASP/SSP: other workers' updates one push merges (None: BSP)
    cache_billing: str | None = None  # a cache channel's: how its cost is billed (``CacheBilling.describe``)
    rendezvous_billing: str | None = None  # a direct channel's: what its rendezvous service is priced as

    @property
    def label(self) -> str:
        notes = "".join(f"; {note}" for note in self.notes)
        if self.platform == "faas":
            memory = f", {self.memory_mb} MB" if self.memory_mb else ""
            how = f"{self.option}, {self.pattern}" if self.workers > 1 else "no channel"
            arch = f", {self.architecture}" if self.architecture == "arm64" or self.label_architecture else ""
            return f"FaaS {self.workers} x Lambda ({how}{memory}{arch}{notes})"
        return f"IaaS {self.workers} x {self.option}" + (f" ({notes[2:]})" if notes else "")

    @property
    def time_range_s(self) -> Range:
        """Where a measured time would fall, by the profile's uncertainty."""
        return self.uncertainty.time_range(self.time_s) if self.uncertainty else (self.time_s, self.time_s)

    @property
    def cost_range(self) -> Range:
        return self.uncertainty.cost_range(self.cost) if self.uncertainty else (self.cost, self.cost)

    def to_dict(self) -> PredictionJson:
        """Every field (as ``dataclasses.asdict`` gives them), then the label and the ranges."""
        return {
            "platform": self.platform,
            "workers": self.workers,
            "time_s": self.time_s,
            "cost": self.cost,
            "option": self.option,
            "pattern": self.pattern,
            "memory_mb": self.memory_mb,
            "rounds": self.rounds,
            "round_s": self.round_s,
            "time": dict(self.time),
            "costs": dict(self.costs),
            "requests": dict(self.requests),
            "invocations": self.invocations,
            "compute_from": self.compute_from,
            "architecture": self.architecture,
            "label_architecture": self.label_architecture,
            "notes": self.notes,
            "uncertainty": None if self.uncertainty is None else asdict(self.uncertainty),
            "staleness": self.staleness,
            "cache_billing": self.cache_billing,
            "rendezvous_billing": self.rendezvous_billing,
            "label": self.label,
            "time_range_s": list(self.time_range_s),
            "cost_range": list(self.cost_range),
        }


class PredictionJson(TypedDict):
    """A prediction as ``advise --json`` prints it."""

    platform: str
    workers: int
    time_s: float
    cost: float
    option: str
    pattern: str | None
    memory_mb: int | None
    rounds: float
    round_s: float
    time: dict[str, float]
    costs: dict[str, float]
    requests: dict[str, float]
    invocations: int
    compute_from: str
    architecture: str | None
    label_architecture: bool
    notes: tuple[str, ...]
    uncertainty: dict[str, float] | None  # time_fraction, cost_fraction
    staleness: float | None
    cache_billing: str | None
    rendezvous_billing: str | None
    label: str
    time_range_s: list[float]
    cost_range: list[float]


def memory_needed_mb(profile: Profile, shard_bytes: float, runtime: str = "numpy", model_bytes: float = 0.0) -> float:
    """Smallest Lambda memory that holds a worker's binary shard and its model's ``model_bytes``
    (``model_mb``) next to its runtime (numpy or torch)."""
    limits = profile.lambda_
    resident = profile.keyed(limits.runtime_memory_mb, "lambda.runtime_memory_mb", runtime)
    return resident + limits.data_memory_factor * shard_bytes / MB + model_bytes / MB


def model_mb(workload: Workload, info: ModelInfo) -> float:
    """What one worker's parameters, algorithm and optimizer state and working vectors take (MB),
    counted as the job's preflight counts them (``model_memory_bytes``); the same whatever W."""
    n_params, algorithm, optimizer = workload.n_params(info), workload.algorithm, workload.optimizer
    state = model_memory_bytes(
        n_params, info.bytes_per_param, algorithm, optimizer, error_feedback=workload.error_feedback_on
    )
    return state / MB


def heartbeats(profile: Profile, epochs: float, epoch_s: float) -> float:
    """How many times a worker beats in ``epochs`` epochs of ``epoch_s`` each: after its first
    and its last epoch, and in between after an epoch once ``faas.heartbeat_every_s`` has passed."""
    every = profile.faas.heartbeat_every_s
    if every <= 0 or epoch_s >= every or epochs <= 1:
        return epochs
    return min(epochs, 2.0 + (epochs - 2.0) / math.ceil(every / max(epoch_s, 1e-9)))


def heartbeats_s(profile: Profile, workers: int, beats: float) -> float:
    """Every worker's heartbeats (a record PUT and a cancel-key GET on the data store, at once),
    on the job's critical path: under BSP the next round waits for the slowest rank's."""
    faas = profile.faas
    return beats * (faas.heartbeat_s + max(workers - 1, 0) * faas.heartbeat_per_worker_s)


def values_authenticated(profile: Profile, channel: str) -> bool:
    """Whether a job on ``channel`` MACs its values by default (``ChannelSpec.authenticates_values``):
    where its store admits clients that do not authenticate. A job there has the credentials a
    stack gives it: a deployed stack's secured cache has an AUTH token, a local target's server none."""
    info = described(channel)
    return not info.authenticates_clients and not (info.stack_cache_secured and profile.target != "local")


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
    architecture: str = "x86_64",
    authenticated: bool | None = None,
    cache: CacheBilling | None = None,
) -> Prediction:
    """Time and cost of ``workers`` Lambda functions synchronizing through ``channel``.

    ``architecture`` sets the GB-second price and, by the profile's ``compute.arm64_speed``, the
    compute speed. A channel in ``MODELLED_ONLY`` (S3 Express) is predicted with a note saying so.
    ``authenticated``: whether the job's values carry a MAC (None: as ``values_authenticated``).
    ``cache``: how a cache channel is billed (None: the job's share of ``cache_node``'s hours; the
    command line's default is a node-based cluster for the job's time rounded up to the hour).
    A channel moves values at the function's network (``network.lambda_network_Bps``): a cache
    channel puts the workers in a VPC. A direct channel sums over links between the workers
    (``links.link_round``), its row's pattern the communicator's algorithm (``ring`` or ``doubling``;
    ``pattern`` is what it falls back to), and prices its rendezvous service (``links.rendezvous_dollars``).
    """
    info = workload.check(profile)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    limits, faas = profile.lambda_, profile.faas
    low, high = limits.min_memory_mb, limits.max_memory_mb
    if not low <= memory_mb <= high:
        raise ConfigError(f"Lambda memory must be {low:g}-{high:g} MB, got {memory_mb}")
    if authenticated is None:
        authenticated = values_authenticated(profile, channel)
    links = over_links(channel) and workers > 1
    if links and not over_links_priced(workload):
        raise Infeasible("the model prices direct links for BSP rounds of an uncompressed vector only")
    # One worker synchronizes with nobody: no cache to reach (in a VPC) or to pay for.
    uses_cache = described(channel).billed_by == "node_hours" and workers > 1
    # Loads, checkpoints and the channel's values all move at the function's network, which may grow
    # with its memory outside a VPC (``network.lambda_network_Bps``).
    network = lambda_network_Bps(profile, memory_mb, vpc=in_vpc(channel) and workers > 1)
    perf = profile.channel(channel, authenticated=authenticated)
    # A link's published rate is its own; a function's faster network outside a VPC lifts it.
    perf = link_rate(perf, network) if links else scaled_channel(perf, network / faas.network_Bps)
    table = prices(region)
    billing = described(channel).prices
    if billing is not None and billing not in table:
        priced = ", ".join(sorted(r for r, section in price_table()["regions"].items() if billing in section))
        raise ConfigError(f"no {region} prices for channel {channel!r}; priced in: {priced}")
    cache = cache or CacheBilling(pricing="share")
    if uses_cache and not cache.priced(channel, table):
        priced = ", ".join(sorted(r for r in price_table()["regions"] if cache.priced(channel, prices(r))))
        raise ConfigError(f"no {region} prices for a {channel} cache priced {cache.pricing}; priced in: {priced}")
    sched = schedule(workload, workers)
    rates = compute_rates(workload, info, profile)
    speed = faas_speed(profile, memory_mb, workers) * architecture_speed(profile, architecture)
    shard = workload.dataset_bytes / workers
    header = profile.codec_header_bytes
    add_Bps = profile.compute.add_Bps * speed

    compute = round_compute_s(sched, rates, speed) + update_s(workload, info, sched, add_Bps)
    compute += perf.step_wake_s if workers > 1 else 0.0
    alone_add_Bps = (
        profile.compute.add_Bps * faas_speed(profile, memory_mb, 1) * architecture_speed(profile, architecture)
    )
    comm = communication(
        workload, info, perf, pattern, workers, sched, add_Bps, Polling.of(profile, perf.kind), header, alone_add_Bps,
        profile.compute.codec_passes,
    )  # fmt: skip
    round_s = compute + comm.seconds
    train_s = sched.rounds * round_s

    latency = faas.load_latency_s
    load_s = latency + shard / network
    cold_start = profile.keyed(faas.cold_start_s, "faas.cold_start_s", info.runtime)
    startup_s = cold_start + workers * faas.invoke_s

    # Checkpoints on Lambda every ``checkpoint_every`` rounds; a local profile has none (null).
    state = workload.state_bytes(info)
    every = limits.checkpoint_every
    checkpoints = sched.rounds / float(every) if every else 0.0
    checkpoint_s = checkpoints * (latency + state / network)
    beats = heartbeats(profile, workload.epochs, train_s / workload.epochs)
    heartbeat_s = heartbeats_s(profile, workers, beats)
    worker_s = load_s + train_s + checkpoint_s + heartbeat_s

    # Continuations: a worker stops before the deadline, and a fresh invocation reloads its shard and state.
    usable = limits.timeout_s - limits.continuation_margin_s
    resume_s = faas.warm_start_s + load_s + 2 * (latency + state / network)
    if resume_s >= usable:
        raise Infeasible(f"a continuation of {workers} workers would spend its whole invocation reloading")
    invocations = max(1, math.ceil((worker_s - resume_s) / (usable - resume_s)))  # each resumes once more
    continuation_s = (invocations - 1) * resume_s
    total_s = startup_s + worker_s + continuation_s

    cold = cold_start if limits.init_billed else 0.0
    billed_s = worker_s + continuation_s + cold
    gb_s = workers * billed_s * memory_mb / KB
    lam = table["lambda"]
    lambda_dollars = gb_s * gb_second_price(lam, architecture) + (workers * invocations + 1) * lam["request"]
    traffic = comm.requests.scaled(sched.rounds)
    # Shards, then checkpoints on resume; and each heartbeat's put and get.
    storage_gets = workers * (invocations + invocations - 1 + beats)
    storage_puts = workers * (checkpoints + invocations - 1 + beats)
    s3 = table["s3"]
    storage_dollars = storage_gets * s3["get_like_request"] + storage_puts * s3["put_like_request"]
    node = cache_node or profile.cache_node
    # A cache holds a round's values, and the previous round's until their writers delete them.
    stored = 2 * comm.requests.bytes_sent
    channel_dollars = _channel_dollars(channel, traffic, total_s, table, node, cache, stored) if workers > 1 else 0.0
    rendezvous = rendezvous_of(profile) if links else None
    if rendezvous is not None:
        channel_dollars += rendezvous_dollars(rendezvous, table, workers=workers, wall_s=total_s, cache=cache)
    notes: tuple[str, ...] = (MODELLED_NOTE,) if channel in MODELLED_ONLY else ()
    if links and published_figures(profile, channel):
        notes += (PUBLISHED_NOTE,)
    return Prediction(
        platform="faas",
        workers=workers,
        time_s=total_s,
        cost=lambda_dollars + storage_dollars + channel_dollars,
        option=channel,
        pattern=algorithm(workload.vector_bytes(info), perf.small_bytes) if links else pattern,
        memory_mb=memory_mb,
        rounds=sched.rounds,
        round_s=round_s,
        time={
            "startup_s": startup_s,
            "load_s": load_s,
            "compute_s": sched.rounds * compute,
            "communicate_s": sched.rounds * comm.seconds,
            "checkpoint_s": checkpoint_s,
            "heartbeat_s": heartbeat_s,
            "continuation_s": continuation_s,
        },
        costs={"lambda": lambda_dollars, "channel": channel_dollars, "storage": storage_dollars},
        requests={k: v for k, v in asdict(comm.requests).items()},
        invocations=workers * invocations,
        compute_from=rates.source,
        architecture=architecture,
        notes=notes,
        uncertainty=profile.uncertainty,
        staleness=expected_staleness(workload, workers),
        cache_billing=cache.describe(channel, node, total_s) if uses_cache else None,
        rendezvous_billing=None if rendezvous is None else describe_rendezvous(rendezvous, cache, total_s),
    )


def published_figures(profile: Profile, channel: str) -> bool:
    """Whether a channel's latency and bandwidth are published figures (the shipped direct channel's,
    FMI's), not measured here: their source says so unless a calibration replaced them."""
    return any(
        profile.origin.get(f"channels.{channel}.{name}", "").startswith("published")
        for name in ("latency_put_s", "bandwidth_put_Bps")
    )


def _channel_dollars(
    kind: str, traffic: Requests, wall_s: float, table: RegionPrices, node: str, cache: CacheBilling, stored: float
) -> float:
    """The channel's price for the whole job, as its description bills it (a cache: as ``cache`` bills it)."""
    return channel_dollars(
        described(kind),
        table,
        wall_s=wall_s,
        node=node,
        cache=cache,
        stored_bytes=stored,
        puts=traffic.puts,
        gets=traffic.gets,
        lists=traffic.lists,
        deletes=traffic.deletes,
        bytes_sent=traffic.bytes_sent,
        bytes_received=traffic.bytes_received,
    )


def predict_iaas(
    workload: Workload, workers: int, instance_type: str, profile: Profile, *, region: str = "us-east-1"
) -> Prediction:
    """Time and cost of ``workers`` EC2 instances training with a ring all-reduce.

    A compressed job moves its whole vector there: over gloo the compressed arithmetic runs on
    a plain all-reduce (``CompressedAllreduce``), so its bytes are the uncompressed job's.
    """
    info = workload.check(profile)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    if workload.protocol != "bsp" or workload.decentralized:  # as the iaas backends refuse them
        what = f"protocol {workload.protocol!r}" if workload.protocol != "bsp" else f"{workload.algorithm!r} (a ring)"
        raise Infeasible(f"the iaas backends run BSP collectives over gloo only, not {what}")
    instance = profile.instance(instance_type)
    table = prices(region)
    try:
        hourly = float(table["ec2"][instance_type])
    except KeyError:
        raise ConfigError(f"no {region} price for instance type {instance_type!r}") from None
    sched = schedule(workload, workers)
    rates = compute_rates(workload, info, profile)
    speed, host_speed = iaas_speed(instance, info.kind, profile, workers)
    vector = workload.vector_bytes(info)
    compute = round_compute_s(sched, rates, speed, host_speed)
    if not on_gpu(instance, info.kind):  # a GPU updates its state as it computes: in its step time
        compute += update_s(workload, info, sched, profile.compute.add_Bps * speed)
    ec2 = profile.ec2
    network_Bps = ec2.network_Bps or instance.network_gbps * 1e9 / 8  # a local profile: the loopback's
    # gloo sums on the CPU, one thread a rank; NCCL (a network on a GPU) sums on the GPU.
    reduce_Bps = None if on_gpu(instance, info.kind) else profile.compute.add_Bps * min(1.0, host_speed)
    # Ranks sharing a machine's cores (a local profile) wait for a core at every ring step once they
    # outnumber the cores; the loopback's bytes keep the two-rank rate (bench/iaas_reduce.py: within 1.5x).
    shared = profile.shared_cores
    step_latency_s = ec2.ring_latency_s * (max(1.0, workers / shared) if shared else 1.0)
    ring = ring_allreduce_s(workers, vector, network_Bps, step_latency_s, reduce_Bps)
    ring += ec2.wait_s if workers > 1 else 0.0  # gloo waits for a delayed peer inside its call
    round_s = compute + ring
    read_Bps = min(instance.burst_gbps * 1e9 / 8, ec2.s3_read_Bps)
    load_s = profile.faas.load_latency_s + workload.dataset_bytes / workers / read_Bps
    startup_s = ec2.startup_s
    beats = heartbeats(profile, workload.epochs, sched.rounds * round_s / workload.epochs)
    heartbeat_s = heartbeats_s(profile, workers, beats)  # the torchrun ranks beat as Lambda's workers do
    total_s = startup_s + load_s + sched.rounds * round_s + heartbeat_s
    billed_s = max(ec2.min_billed_s, total_s - ec2.unbilled_startup_s)
    ec2_dollars = workers * billed_s * hourly / 3600
    s3 = table["s3"]
    storage_dollars = workers * (s3["get_like_request"] * (1 + beats) + s3["put_like_request"] * beats)
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
            "communicate_s": sched.rounds * ring,
            "heartbeat_s": heartbeat_s,
        },
        costs={"ec2": ec2_dollars, "storage": storage_dollars},
        compute_from=rates.source,
        uncertainty=profile.uncertainty,
    )


def iaas_fits(workload: Workload, workers: int, instance_type: str, profile: Profile) -> bool:
    """Whether an instance holds its shard and its model's state next to the training runtime."""
    shard_mb = workload.dataset_bytes / workers / MB
    need = profile.ec2.runtime_memory_mb + profile.lambda_.data_memory_factor * shard_mb
    return profile.instance(instance_type).memory_gib * KB >= need + model_mb(workload, profile.model(workload.model))
