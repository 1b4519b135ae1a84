"""Turning the probes' figures into the profile: one channel's ``ChannelCalibration``, and the
target's whole ``Calibration``, which ``save_profile`` writes and ``load_profile`` reads."""

from __future__ import annotations

import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime

from analytic_model.calibration import (
    Calibration,
    CallFigures,
    ChannelCalibration,
    ComputeCalibration,
    FaasCalibration,
    LambdaCalibration,
    StoreFigures,
)
from analytic_model.channel_perf import ChannelPerf
from analytic_model.profile import Host, MeasuredCompute, aws_profile
from lambdaml.calibrate.channels import (
    measure_big_values,
    measure_channel,
    measure_cleanup,
    measure_ranged_reads,
    measure_store,
    sizes,
)
from lambdaml.calibrate.compute import (
    ComputeProbe,
    measure_add_Bps,
    measure_codec_passes,
    measure_compute,
    measure_mac_Bps,
    measure_sparse,
)
from lambdaml.calibrate.direct import direct_figures
from lambdaml.calibrate.exchange import measure_exchange
from lambdaml.calibrate.gloo import gloo_figures, torch_available
from lambdaml.calibrate.heartbeat import measure_heartbeat
from lambdaml.calibrate.probing import Effort, cores
from lambdaml.calibrate.startup import measure_load, measure_startup
from lambdaml.channels import open_channel
from lambdaml.channels.kinds.direct import DirectSpec
from lambdaml.config import ChannelSpec, RuntimeSpec, StorageSpec
from lambdaml.runtime.heap import keep_freed_buffers

CHECKPOINT_EVERY = int(RuntimeSpec.model_fields["checkpoint_every"].default)

OPS = ("put", "get")


def _median(views: Sequence[CallFigures]) -> CallFigures:
    """Each figure's median over one worker's views."""
    return CallFigures(
        **{
            f.name: statistics.median(getattr(v, f.name) for v in views)
            for f in fields(CallFigures)
            if getattr(views[0], f.name) is not None
        }
    )


def _crowded(pair: StoreFigures, crowd: StoreFigures, processes: int) -> tuple[float, StoreFigures]:
    """(the store's growth per client beyond two, its byte limits from the heavier load, where the bytes dominate).

    A local store shares the machine's cores with its clients: its time per request grows with them.
    """
    base = {op: getattr(pair, f"server_{op}_s") or 1.0 for op in OPS}
    growth = [(getattr(crowd, f"server_{op}_s") or 0.0) / base[op] - 1.0 for op in OPS]
    limits = {f"server_{op}_Bps": getattr(crowd, f"server_{op}_Bps") or getattr(pair, f"server_{op}_Bps") for op in OPS}
    return max(statistics.fmean(growth), 0.0) / (processes - 2), replace(pair, **limits)


def _unshared(store: StoreFigures, calls: CallFigures) -> StoreFigures:
    """Where the clients share the store's cores, the loaded probes' time per request includes
    the clients' own CPU; the store spends on a request at most what one worker's call takes
    beyond that worker's CPU."""
    at_most = {
        f"server_{op}_s": min(
            getattr(store, f"server_{op}_s"),
            getattr(calls, f"latency_{op}_s") * (1.0 - getattr(calls, f"cpu_share_{op}")),
        )
        for op in OPS
    }
    return replace(store, **at_most)


def channel_figures(spec: ChannelSpec, effort: Effort, say: Callable[[str], None] | None = None) -> ChannelCalibration:
    """Everything the model needs to know about one channel."""
    say = say or (lambda _: None)
    if isinstance(spec, DirectSpec):  # links between the workers: no store's calls to time
        say("channel direct: links between processes")
        return direct_figures(spec, effort, measure_mac_Bps(), measure_add_Bps())
    keep_freed_buffers()  # this process measures one worker's calls: its heap behaves as a worker's
    say(f"channel {spec.kind}: latency and bandwidth")
    growth: float | None = None
    with open_channel(spec) as channel:
        channel.ensure()
        channel.ping()
        # One worker's view, taken three times a few seconds apart (between the loaded
        # measurements): where a process runs relative to the store can halve a loopback
        # call for seconds at a time, so each figure is the median of the three.
        single = [measure_channel(channel, effort)]
        cleanup_cpu_s, cleanup_wall_s = measure_cleanup(channel, effort)
        large_floats = sizes(channel, effort.large_bytes)[-1]
        say(f"channel {spec.kind}: 2 and {effort.processes} processes at once")
        store = measure_store(spec, effort, large_floats, 2)
        single.append(measure_channel(channel, effort))
        if effort.processes > 2:
            crowd = measure_store(spec, effort, large_floats, effort.processes)
            growth, store = _crowded(store, crowd, effort.processes)
        single.append(measure_channel(channel, effort))
        calls = _median(single)
        store = _unshared(store, calls)
        # The store's time for a batch delete: what it takes beyond a put's client and network
        # part (moto parses and applies a DeleteObjects far slower than a PUT).
        server_put = store.server_put_s or 0.0
        server_delete_s = max(cleanup_wall_s - (calls.latency_put_s - server_put), server_put)
        max_item_bytes = channel.max_item_bytes
        shipped = aws_profile().channel(spec.kind)  # the channel's batching is code, not measured
        perf = ChannelPerf(
            spec.kind, **asdict(calls), **asdict(store), server_delete_s=server_delete_s, max_item_bytes=max_item_bytes,
            get_batch=shipped.get_batch, put_batch=shipped.put_batch, cleanup_cpu_s=cleanup_cpu_s,
            shared_cores=cores(), **({} if growth is None else {"server_growth": growth}),
        )  # fmt: skip
        say(f"channel {spec.kind}: a big value")
        big = measure_big_values(channel, effort, perf)
        server_range_Bps = measure_ranged_reads(channel, effort)
    calls, perf = replace(calls, **big), replace(perf, **big, server_range_Bps=server_range_Bps)
    if spec.authenticates_values:  # the probes' values carry a MAC, as a job's do: the model hashes them
        perf = replace(perf, mac_Bps=measure_mac_Bps())
    say(f"channel {spec.kind}: workers exchanging values")
    exchange = measure_exchange(spec, perf, effort, large_floats)
    return ChannelCalibration(
        calls, store, exchange, server_delete_s, cleanup_cpu_s, max_item_bytes, growth, server_range_Bps
    )


def _compute(probes: Sequence[ComputeProbe], say: Callable[[str], None]) -> ComputeCalibration:
    measured: dict[str, MeasuredCompute] = {}
    gflops: dict[str, float] = {}
    per_step: dict[str, float] = {}
    for probe in probes:
        say(f"compute: {probe.model} ({probe.features} features, batch {probe.batch_size})")
        key, figures = measure_compute(probe)
        measured[key] = figures
        if not probe.sparse and figures.flops_per_sample and figures.per_sample_s > 0:
            # A dense model's rate stands for others of its kind (a sparse row's work is its nonzeros).
            gflops[figures.kind] = figures.flops_per_sample / figures.per_sample_s / 1e9
            per_step[figures.runtime] = figures.per_step_s
    say("compute: a sparse step, per non-zero and per parameter")
    sparse = measure_sparse()
    add_Bps = measure_add_Bps()
    say("compute: the compressors' passes")
    return ComputeCalibration(
        measured, add_Bps, gflops, per_step, measure_codec_passes(add_Bps), measure_mac_Bps(), sparse
    )


def calibrate(
    channels: Mapping[str, ChannelSpec],
    probes: Sequence[ComputeProbe],
    *,
    storage: StorageSpec | None,
    effort: Effort,
    target: str,
    shared_cores: float | None,
    startup: tuple[float, float] | None = None,
    warm_start_s: float | None = None,
    timed_from_here: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure everything for one target and return the (partial) profile.

    ``startup``: a stack's (first invocation, per further worker) instead of spawning local
    worker processes, with ``warm_start_s`` its warm invocation; ``timed_from_here``: the
    channels were timed from this machine, not from where the workers run (a stack on AWS).
    """
    say = on_step or (lambda _: None)
    keep_freed_buffers()  # the compute probes time a worker's steps: its heap behaves as a worker's
    measured_channels = {kind: channel_figures(spec, effort, say) for kind, spec in channels.items()}
    compute = _compute(probes, say)
    ec2 = None
    if startup is None:
        say("worker start-up")
        startup = measure_startup(effort.processes)
        if torch_available():  # the iaas-local backend's ranks: start-up and ring on loopback
            say("gloo process group (iaas-local)")
            ec2 = gloo_figures(effort)
    cold, per_worker = startup
    network_Bps = load_latency_s = heartbeat_s = heartbeat_per_worker_s = None
    if storage is not None:
        say("loading from the data store")
        with open_channel(ChannelSpec(kind="s3", bucket=storage.bucket, endpoint_url=storage.endpoint_url)) as store:
            store.ensure()
            network_Bps, load_latency_s = measure_load(store, effort)
        say("heartbeats on the data store")
        heartbeat_s, heartbeat_per_worker_s = measure_heartbeat(storage, effort)
    faas = FaasCalibration(
        shared_cores,
        {"numpy": cold},
        per_worker,
        warm_start_s,
        network_Bps,
        load_latency_s,
        heartbeat_s,
        heartbeat_per_worker_s,
    )
    name = platform.node() or "this machine"
    when = datetime.now(UTC).isoformat(timespec="seconds")
    source = f"measured by 'lambdaml calibrate' on {name} ({cores()} cores) at {when}, target {target}"
    if timed_from_here:
        source += " (channels timed from this machine, not from inside Lambda)"
    return Calibration(
        target=target,
        source=source,
        created=when,
        host=Host(name=name, cores=cores(), machine=platform.machine(), python=platform.python_version()),
        channels=measured_channels,
        compute=compute,
        faas=faas,
        # The local backend's worker processes checkpoint as Lambda's do (so an interrupted job
        # resumes), and pay for no INIT phase.
        lambda_=LambdaCalibration(checkpoint_every=CHECKPOINT_EVERY, init_billed=False) if target == "local" else None,
        ec2=ec2,
    )
