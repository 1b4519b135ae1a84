"""The worker core: one rank's whole training run, the same on every backend.

Backends (local processes, Lambda, the local Lambda service) differ only in how they
start this function and carry its report back. On Lambda a run may stop before its
deadline with a checkpoint and go on in a fresh invocation (``Lifetime``); the continued
run ends with exactly the model an uninterrupted one would.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lambdaml import codec, keys
from lambdaml.algorithms import reify
from lambdaml.arrays import Array
from lambdaml.channels import Channel, open_channel
from lambdaml.comm.base import Communicator, check_finite
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.choice import PatternPlan, pattern_for
from lambdaml.comm.trial import PatternTrial
from lambdaml.config import JobSpec
from lambdaml.cost import Invocation
from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
from lambdaml.data.shards import Manifest, load_test, load_worker_data, read_manifest
from lambdaml.errors import Diverged
from lambdaml.models import MODELS
from lambdaml.models.card import ModelCard, bundle_hash
from lambdaml.runtime import checkpoint as ckpt
from lambdaml.runtime.checkpoint import Position
from lambdaml.runtime.heap import keep_freed_buffers
from lambdaml.runtime.heartbeat import EpochCallback, StepCallback
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import Accuracy, AsyncStats, Continuation, Memory, Times, Traffic, WorkerReport
from lambdaml.storage import open_storage, put_json

log = logging.getLogger(__name__)

_TIME_KEYS = ("load_s", "compute_s", "comm_s", "wait_s", "total_s")


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB.

    Linux's ``ru_maxrss`` keeps, across exec, the RSS the parent had when it forked: a local
    worker spawned by a driver holding a dataset would report the driver's. So /proc's
    VmHWM (this program's own high-water mark) comes first, ``ru_maxrss`` where there is no /proc.
    """
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def params_checksum(params: Array) -> str:
    """A short fingerprint of a model, to check that every rank ends with the same one."""
    return f"{zlib.crc32(np.ascontiguousarray(params).tobytes()):08x}"


@dataclass
class Lifetime:
    """The time a run has (Lambda's deadline) and how often it checkpoints.

    ``remaining_s`` reads the time left (``context.get_remaining_time_in_millis``); the
    run stops for a continuation when less than ``margin_s`` plus two of its slowest
    steps remain. Periodic checkpoints every ``checkpoint_every`` rounds let a crashed run
    resume (``on_lambda``: AWS retries it within the attempt) and an interrupted job go on
    in a new attempt (``--resume``).
    """

    remaining_s: Callable[[], float]
    margin_s: float = 10.0
    checkpoint_every: int = 50
    memory_mb: int = 0  # the invocation's memory size, for billed GB-seconds
    architecture: str = "x86_64"  # the function's, for the GB-second price
    cold: bool = False  # whether this invocation started a new execution environment
    started: float = field(default_factory=time.perf_counter)  # when the invocation began
    #: A Lambda invocation: billed, and restarted within the attempt after a crash (so it first
    #: looks for its own checkpoint, and the channel keeps the rounds it may replay).
    on_lambda: bool = True


def _state_arrays(state_dict: dict[str, Array], rank: int) -> dict[str, Array]:
    arrays = {k: np.asarray(v) for k, v in state_dict.items()}
    for name, array in arrays.items():
        if array.dtype.kind == "f":
            check_finite(array, rank, f"checkpoint ({name})")
    return arrays


def _majority_share(labels: Array) -> float | None:
    """The accuracy of always answering the most common label: what a classifier must beat."""
    if not len(labels) or not np.all(labels == np.round(labels)) or labels.min() < 0:
        return None
    return float(np.bincount(labels.astype(np.int64)).max() / len(labels))


def run_worker(
    job: JobSpec,
    attempt: Attempt,
    rank: int,
    *,
    secret: bytes | None = None,
    on_epoch: EpochCallback | None = None,
    on_step: StepCallback | None = None,
    channel: Channel | None = None,
    comm: Communicator | None = None,
    store: Channel | None = None,
    lifetime: Lifetime | None = None,
) -> WorkerReport | Continuation:
    """Train one rank to the end (status "done") or to a checkpoint (status "continued").

    The workers synchronize through ``comm`` when given (torch.distributed on IaaS), else
    through a channel communicator over ``channel`` or the job's channel, its values
    authenticated with ``secret`` when given. On Lambda (``lifetime.on_lambda``) the run
    first looks for this rank's own checkpoint in its attempt; a resumed attempt starts from
    the checkpoint its record names. ``on_epoch`` hears of every epoch's end, ``on_step`` of every
    step (epochs done, steps done in the running epoch, steps per epoch): the progress a job shows.
    """
    keep_freed_buffers()
    # A diverging run is caught explicitly (Diverged) before a NaN leaves the worker; numpy's
    # overflow warnings would only add lines to the user's terminal.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _run_worker(
            job,
            attempt,
            rank,
            secret=secret,
            on_epoch=on_epoch,
            on_step=on_step,
            channel=channel,
            comm=comm,
            store=store,
            lifetime=lifetime,
        )


def _run_worker(
    job: JobSpec,
    attempt: Attempt,
    rank: int,
    *,
    secret: bytes | None,
    on_epoch: EpochCallback | None,
    on_step: StepCallback | None,
    channel: Channel | None,
    comm: Communicator | None,
    store: Channel | None,
    lifetime: Lifetime | None,
) -> WorkerReport | Continuation:
    started = time.perf_counter()
    job_id = attempt.job_id
    store = store or open_storage(job.storage)
    manifest = read_manifest(store, job.dataset, attempt.dataset_version)
    X, y = load_worker_data(store, manifest, rank, job.workers)
    load_s = time.perf_counter() - started

    restarts = lifetime is not None and lifetime.on_lambda
    resumed = ckpt.load_newest(store, job_id, attempt.number, rank) if restarts else None
    own_attempt = resumed is not None  # a checkpoint of this attempt: its trial's timings go on
    if resumed is None and attempt.resume is not None:
        point = attempt.resume
        resumed = ckpt.load_at_round(store, job_id, point.attempt, rank, point.round)
    position, saved_state = resumed if resumed is not None else (Position(), None)
    if resumed is not None:
        position.invocations += 1
        log.info("rank %d resumes at epoch %d step %d (round %d)", rank, position.epoch, position.step, position.round)
    losses, elapsed = position.losses or [], position.elapsed or []
    before = position.times or dict.fromkeys(_TIME_KEYS, 0.0)

    model = MODELS.get(job.model.name).build(job.model, manifest)
    initial = model.init_params(job.algorithm.seed)
    plan: PatternPlan | None = None  # None: torch.distributed's own, on IaaS
    if comm is None:
        plan = pattern_for(job, int(initial.nbytes), authenticated=secret is not None)
        # Every rank counts a trial's turns from its attempt's first round, wherever it resumes.
        trial = (
            PatternTrial(
                plan.contenders,
                start=attempt.resume.round if attempt.resume is not None else 0,
                rounds=job.sync.trial_rounds,
                observed=[(int(r), int(n), s) for r, n, s in position.trial or []] if own_attempt else [],
            )
            if plan.contenders
            else None
        )
        comm = ChannelCommunicator(
            channel or open_channel(job.channel),
            job_id,
            rank,
            job.workers,
            pattern=plan.pattern,
            trial=trial,
            timeout_s=job.sync.timeout_s,
            first_round=position.round,
            # A restarted rank replays the rounds since its last checkpoint: keep them readable.
            extra_retention=job.runtime.checkpoint_every if restarts else 0,
            attempt=attempt.number,
            secret=secret,
        )
    spec = job.algorithm
    state = reify(spec, model, comm, initial, job.sync)
    sync = state.sync
    if state.reduces_gradients:
        sync.attach_gradient_sync(model)  # DDP, on IaaS, where the protocol allows it
    if saved_state is None:
        state.on_start(X, y)
    else:
        state.load_state_dict(saved_state)
    largest_shard = max(manifest.rows_of_worker(r, job.workers) for r in range(job.workers))
    steps = steps_per_epoch(largest_shard, spec.batch_size)

    def snapshot(epoch: int, step: int) -> Position:
        times = {
            "load_s": before["load_s"] + load_s,
            "compute_s": before["compute_s"] + state.compute_s,
            "comm_s": before["comm_s"] + comm.comm_s,
            "wait_s": before["wait_s"] + comm.wait_s,
            "total_s": before["total_s"] + time.perf_counter() - started,
        }
        traffic = dict(position.traffic or {})
        for name, value in comm.stats().items():
            traffic[name] = traffic.get(name, 0.0) + value
        billed = list(position.billed or [])
        if lifetime is not None and lifetime.on_lambda:
            duration = time.perf_counter() - lifetime.started
            billed.append(
                {
                    "duration_s": duration,
                    "memory_mb": lifetime.memory_mb,
                    "cold": lifetime.cold,
                    "architecture": lifetime.architecture,
                }
            )
        trial = comm.trial if isinstance(comm, ChannelCommunicator) else None
        return Position(
            epoch, step, comm.round, position.invocations, losses, elapsed, times, traffic, billed,
            trial=None if trial is None else [list(seen) for seen in trial.observed],
        )  # fmt: skip

    if restarts:
        sync.prepare_restarts()

    def progress() -> int:
        """Rounds (BSP) or pushes (ASP/SSP) so far: what checkpoints are spaced by."""
        return sync.progress()

    def checkpoint(epoch: int, step: int, slot: str) -> None:
        arrays = _state_arrays(state.state_dict(), rank)
        ckpt.save(store, job_id, attempt.number, rank, slot, snapshot(epoch, step), arrays)
        sync.checkpointed()

    # Periodic checkpoints fall on multiples of checkpoint_every, so under BSP every rank
    # writes the same rounds; ASP checkpoints only serve restarts within a Lambda attempt.
    every = lifetime.checkpoint_every if lifetime is not None else 0
    periodic = lifetime is not None and (restarts or not sync.asynchronous)
    due = (progress() // every + 1) * every if every else 0
    slowest_step = 0.0
    rss_after_first_epoch = peak_rss_mb()
    for epoch in range(position.epoch, spec.epochs):
        order = epoch_order(len(y), epoch=epoch, rank=rank, seed=spec.seed, shuffle=spec.shuffle)
        first_step = position.step if epoch == position.epoch else 0
        for step, rows in enumerate(batch_indices(order, spec.batch_size, steps)):
            if step < first_step:
                continue
            if lifetime is not None:
                if lifetime.remaining_s() < lifetime.margin_s + 2 * slowest_step:
                    checkpoint(epoch, step, ckpt.CONTINUATION_SLOT)
                    comm.finish(early=True)
                    return Continuation(rank=rank, epoch=epoch, step=step)
                if periodic and progress() >= due:
                    checkpoint(epoch, step, ckpt.periodic_slot(progress(), every))
                    due = (progress() // every + 1) * every
            step_started = time.perf_counter()
            state.step(X[rows], y[rows])
            slowest_step = max(slowest_step, time.perf_counter() - step_started)
            if on_step is not None:
                on_step(rank, epoch, step + 1, steps)
        loss = float(state.end_epoch(epoch))
        if not math.isfinite(loss):
            raise Diverged(f"training diverged in epoch {epoch + 1} (loss {loss}); try a smaller learning rate")
        losses.append(loss)
        elapsed.append(before["total_s"] + time.perf_counter() - started)
        if epoch == position.epoch:
            rss_after_first_epoch = peak_rss_mb()
        if on_epoch is not None:
            on_epoch(rank, epoch + 1, loss, elapsed[-1])
    state.finish()
    params = state.final_params()
    # Flat memory: the peak after this invocation's first epoch against the peak at the end.
    memory = Memory(peak_rss_after_first_epoch_mb=rss_after_first_epoch, peak_rss_mb=peak_rss_mb())
    async_stats = AsyncStats.of(sync.stats()) if sync.asynchronous else None
    comm.finish()

    model_uri: str | None = None
    test_loss: float | None = None
    accuracy: Accuracy | None = None
    if rank == 0:
        model_key = keys.job_model(job_id)
        check_finite(params, rank, "model")
        bundle = codec.encode_bundle({"params": params})
        store.put(model_key, bundle)
        put_json(store, keys.job_model_card(job_id), model_card(job, job_id, manifest, bundle, len(params)).to_json())
        model_uri = f"s3://{job.storage.bucket}/{model_key}"
        test = load_test(store, manifest)
        if test is not None:
            test_loss = model.mean_loss(params, *test)
            if model.supervised:
                accuracy = Accuracy(
                    test_accuracy=model.accuracy(params, *test),
                    classes=manifest.n_classes,
                    majority_accuracy=_majority_share(test[1]),
                )
    final = snapshot(spec.epochs, 0)
    channel_comm = comm if isinstance(comm, ChannelCommunicator) and plan is not None else None
    if channel_comm is not None:
        channel_comm.conclude_trial()  # a rank resumed past the trial, with no round since, reads its outcome
    assert final.times is not None and final.traffic is not None and final.billed is not None
    times = final.times
    on_lambda = lifetime is not None and lifetime.on_lambda
    return WorkerReport(
        rank=rank,
        losses=tuple(losses),
        epoch_elapsed_s=tuple(elapsed),
        model_checksum=params_checksum(params),
        rows=len(y),
        steps_per_epoch=steps,
        invocations=position.invocations,
        memory=memory,
        async_stats=async_stats,
        model_uri=model_uri,
        test_loss=test_loss,
        accuracy=accuracy,
        times=Times(
            load_s=times["load_s"],
            compute_s=times["compute_s"],
            communicate_s=max(times["comm_s"] - times["wait_s"], 0.0),
            wait_s=times["wait_s"],
            total_s=times["total_s"],
        ),
        channel=Traffic.measured(final.traffic, comm.round),
        billed=tuple(_invocation(b) for b in final.billed) if on_lambda else None,
        pattern=channel_comm.pattern_name if channel_comm else None,
        predicted_round_s=plan.predictions.get(channel_comm.pattern_name) if plan and channel_comm else None,
        trial_round_s=channel_comm.trial_round_s if channel_comm else None,
    )


def model_card(job: JobSpec, job_id: str, manifest: Manifest, bundle: bytes, n_params: int) -> ModelCard:
    """What rank 0's model bundle is: enough to use it without the dataset (lambdaml.trained)."""
    return ModelCard(
        job_id=job_id,
        model=job.model.model_dump(mode="json"),
        n_features=manifest.n_features,
        n_classes=manifest.n_classes,
        label_values=manifest.label_values,
        sample_shape=manifest.sample_shape,
        data_format=manifest.format,
        dataset=manifest.name,
        dataset_version=manifest.dataset_version,
        n_params=n_params,
        bundle_sha256=bundle_hash(bundle),
    )


def _invocation(billed: dict[str, Any]) -> Invocation:
    """A billed invocation as a checkpoint keeps it."""
    return Invocation(
        float(billed["duration_s"]),
        int(billed["memory_mb"]),
        bool(billed.get("cold", False)),
        str(billed.get("architecture", "x86_64")),
    )
