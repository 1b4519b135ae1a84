"""The worker core: one rank's whole training run, the same on every backend.

Backends (local processes, Lambda, the local Lambda service) differ only in how they
start this function and carry its report back. On Lambda a run may stop before its
deadline with a checkpoint and go on in a fresh invocation (``Lifetime``); the continued
run ends with exactly the model an uninterrupted one would.

A run goes through named steps: it loads its shard, resumes from a checkpoint if it has one,
sets up its communicator (with the pattern trial) and its algorithm, fixes its checkpoint
schedule, trains, and finishes: rank 0 saves and scores the model, and every rank reports.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from lambdaml.algorithms import AlgorithmState, reify
from lambdaml.arrays import Array
from lambdaml.channels import Channel, open_channel
from lambdaml.channels.kinds.direct import DirectSpec
from lambdaml.comm.base import Communicator, check_finite
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.choice import PatternPlan, pattern_for
from lambdaml.comm.direct.communicator import DirectCommunicator
from lambdaml.comm.trial import PatternTrial
from lambdaml.config import JobSpec
from lambdaml.cost import Invocation
from lambdaml.data.batches import batch_indices, epoch_order, steps_per_epoch
from lambdaml.data.shards import Manifest, load_worker_data, read_manifest
from lambdaml.data.sparse import Features
from lambdaml.errors import ConfigError, Diverged
from lambdaml.models import MODELS
from lambdaml.models.base import Model
from lambdaml.runtime import checkpoint as ckpt
from lambdaml.runtime.checkpoint import Checkpoint, Measured, Position, TimeSpent
from lambdaml.runtime.heap import keep_freed_buffers
from lambdaml.runtime.heartbeat import EpochCallback, StepCallback
from lambdaml.runtime.model_output import SavedModel, save_model
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import AsyncStats, Continuation, Memory, Times, Traffic, WorkerReport
from lambdaml.storage import open_storage
from lambdaml.sync.base import SyncProtocol

log = logging.getLogger(__name__)


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

    def billed(self) -> Invocation:
        """This invocation as Lambda bills it, had it ended now."""
        return Invocation(time.perf_counter() - self.started, self.memory_mb, self.cold, self.architecture)


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
        run = _set_up(job, attempt, rank, secret=secret, channel=channel, comm=comm, store=store, lifetime=lifetime)
        try:
            schedule = _Schedule.of(run)
            run.rss_after_first_epoch = peak_rss_mb()
            stopped = _train(run, schedule, on_epoch, on_step)
            return stopped if stopped is not None else _finish(run)
        except BaseException:
            run.comm.abandon()  # a direct job's peers go to the store for what this rank owed them
            raise


# --- set-up: the shard, resume, the communicator, the algorithm -------------------------


@dataclass(frozen=True)
class _Start:
    """Where this invocation starts: a checkpoint's position and measures (none: the run's
    beginning) and its algorithm state (None: the algorithm starts afresh)."""

    position: Position = field(default_factory=Position)
    before: Measured = field(default_factory=Measured)
    state: dict[str, Array] | None = None
    own_attempt: bool = False  # a checkpoint of this attempt (a restart): its pattern trial's timings go on


@dataclass
class _Run:
    """A rank's run in this invocation, as its steps pass it on."""

    job: JobSpec
    attempt: Attempt
    rank: int
    store: Channel
    lifetime: Lifetime | None
    started: float  # when this invocation's run began (perf_counter)
    load_s: float
    manifest: Manifest
    X: Features
    y: Array
    start: _Start
    model: Model
    comm: Communicator
    plan: PatternPlan | None  # None: the communicator was given (torch.distributed's own, on IaaS)
    state: AlgorithmState
    steps: int  # per epoch
    losses: list[float] = field(default_factory=list)
    elapsed: list[float] = field(default_factory=list)
    slowest_step: float = 0.0
    rss_after_first_epoch: float = 0.0

    @property
    def sync(self) -> SyncProtocol:
        return self.state.sync

    @property
    def on_lambda(self) -> bool:
        """Billed, and restarted within its attempt after a crash."""
        return self.lifetime is not None and self.lifetime.on_lambda

    @property
    def channel_comm(self) -> ChannelCommunicator | None:
        """The communicator this run set up over a channel, with its pattern plan; None where it was given."""
        return self.comm if isinstance(self.comm, ChannelCommunicator) and self.plan is not None else None


def _set_up(
    job: JobSpec,
    attempt: Attempt,
    rank: int,
    *,
    secret: bytes | None,
    channel: Channel | None,
    comm: Communicator | None,
    store: Channel | None,
    lifetime: Lifetime | None,
) -> _Run:
    started = time.perf_counter()
    store = store or open_storage(job.storage)
    manifest = read_manifest(store, job.dataset, attempt.dataset_version)
    X, y = load_worker_data(store, manifest, rank, job.workers)
    load_s = time.perf_counter() - started

    restarts = lifetime is not None and lifetime.on_lambda
    start = _resume(store, attempt, rank, restarts=restarts)
    model = MODELS.get(job.model.name).build(job.model, manifest)
    initial = model.init_params(job.algorithm.seed)
    plan: PatternPlan | None = None
    if comm is None:
        plan = pattern_for(job, int(initial.nbytes), authenticated=secret is not None)
        comm = _channel_communicator(job, attempt, rank, plan, start, channel=channel, secret=secret, restarts=restarts)
    state = _algorithm(job, model, comm, initial, start, X, y)
    largest_shard = max(manifest.rows_of_worker(r, job.workers) for r in range(job.workers))
    if restarts:
        state.sync.prepare_restarts()
    return _Run(
        job, attempt, rank, store, lifetime, started, load_s, manifest, X, y, start, model, comm, plan, state,
        steps=steps_per_epoch(largest_shard, job.algorithm.batch_size),
        losses=list(start.before.losses),
        elapsed=list(start.before.elapsed),
    )  # fmt: skip


def _resume(store: Channel, attempt: Attempt, rank: int, *, restarts: bool) -> _Start:
    """Where this rank starts: its newest checkpoint of this attempt (a restart on Lambda), else the
    checkpoint a resumed attempt names, else the beginning."""
    found = ckpt.load_newest(store, attempt.job_id, attempt.number, rank) if restarts else None
    own_attempt = found is not None
    if found is None and attempt.resume is not None:
        point = attempt.resume
        found = ckpt.load_at_round(store, attempt.job_id, point.attempt, rank, point.round)
    if found is None:
        return _Start()
    position = found.position
    log.info("rank %d resumes at epoch %d step %d (round %d)", rank, position.epoch, position.step, position.round)
    before = replace(found.measured, invocations=found.measured.invocations + 1)
    return _Start(position, before, found.state, own_attempt)


def _channel_communicator(
    job: JobSpec,
    attempt: Attempt,
    rank: int,
    plan: PatternPlan,
    start: _Start,
    *,
    channel: Channel | None,
    secret: bytes | None,
    restarts: bool,
) -> ChannelCommunicator:
    """The rank's communicator over the job's channel, running ``plan``'s pattern (and its trial);
    a direct job's links meet through the channel's store."""
    if isinstance(job.channel, DirectSpec):
        if secret is None:
            raise ConfigError("a direct job's links need the job's secret, and this worker was given none")
        return DirectCommunicator(
            channel or open_channel(job.channel), attempt.job_id, rank, job.workers, spec=job.channel, secret=secret,
            pattern=plan.pattern, timeout_s=job.sync.timeout_s, first_round=start.position.round,
            extra_retention=job.runtime.checkpoint_every if restarts else 0, attempt=attempt.number,
        )  # fmt: skip
    return ChannelCommunicator(
        channel or open_channel(job.channel),
        attempt.job_id,
        rank,
        job.workers,
        pattern=plan.pattern,
        trial=_pattern_trial(job, attempt, plan, start),
        timeout_s=job.sync.timeout_s,
        first_round=start.position.round,
        # A restarted rank replays the rounds since its last checkpoint: keep them readable.
        extra_retention=job.runtime.checkpoint_every if restarts else 0,
        attempt=attempt.number,
        secret=secret,
    )


def _pattern_trial(job: JobSpec, attempt: Attempt, plan: PatternPlan, start: _Start) -> PatternTrial | None:
    """The trial of ``plan``'s contenders in the first rounds; None where the plan's choice stands."""
    if not plan.contenders:
        return None
    return PatternTrial(
        plan.contenders,
        # Every rank counts a trial's turns from its attempt's first round, wherever it resumes.
        start=attempt.resume.round if attempt.resume is not None else 0,
        rounds=job.sync.trial_rounds,
        observed=list(start.before.trial or ()) if start.own_attempt else [],
    )


def _algorithm(
    job: JobSpec, model: Model, comm: Communicator, initial: Array, start: _Start, X: Features, y: Array
) -> AlgorithmState:
    """The algorithm's runtime state: started on the shard, or as the checkpoint left it."""
    state = reify(job.algorithm, model, comm, initial, job.sync)
    if state.reduces_gradients:
        state.sync.attach_gradient_sync(model)  # DDP, on IaaS, where the protocol allows it
    if start.state is None:
        state.on_start(X, y)
    else:
        state.load_state_dict(start.state)
    return state


# --- checkpoints -----------------------------------------------------------------------


@dataclass
class _Schedule:
    """When a run writes periodic checkpoints: at multiples of ``every`` rounds (pushes under
    ASP/SSP), so under BSP every rank writes the same rounds. ASP checkpoints only serve restarts
    within a Lambda attempt; without a lifetime there are none."""

    every: int
    periodic: bool
    due: int  # the progress of the next one

    @classmethod
    def of(cls, run: _Run) -> _Schedule:
        every = run.lifetime.checkpoint_every if run.lifetime is not None else 0
        periodic = run.lifetime is not None and (run.on_lambda or not run.sync.asynchronous)
        return cls(every, periodic, cls._after(run.sync.progress(), every) if every else 0)

    @staticmethod
    def _after(progress: int, every: int) -> int:
        return (progress // every + 1) * every

    def take_if_due(self, run: _Run, epoch: int, step: int) -> None:
        """Checkpoint where the run's progress (rounds, or pushes) has reached the next multiple."""
        if self.periodic and run.sync.progress() >= self.due:
            _checkpoint(run, epoch, step, ckpt.periodic_slot(run.sync.progress(), self.every))
            self.due = self._after(run.sync.progress(), self.every)


def _measured(run: _Run) -> Measured:
    """What the run has measured so far, earlier invocations' figures included."""
    before = run.start.before
    times = TimeSpent(
        load_s=before.times.load_s + run.load_s,
        compute_s=before.times.compute_s + run.state.compute_s,
        comm_s=before.times.comm_s + run.comm.comm_s,
        wait_s=before.times.wait_s + run.comm.wait_s,
        total_s=before.times.total_s + time.perf_counter() - run.started,
    )
    traffic = dict(before.traffic)
    for name, value in run.comm.stats().items():
        traffic[name] = traffic.get(name, 0.0) + value
    billed = before.billed
    if run.lifetime is not None and run.lifetime.on_lambda:
        billed = (*billed, run.lifetime.billed())
    trial = run.comm.trial if isinstance(run.comm, ChannelCommunicator) else None
    return Measured(
        before.invocations, tuple(run.losses), tuple(run.elapsed), times, traffic, billed,
        trial=None if trial is None else tuple(trial.observed),
    )  # fmt: skip


def _checkpoint(run: _Run, epoch: int, step: int, slot: str) -> None:
    arrays = _state_arrays(run.state.state_dict(), run.rank)
    checkpoint = Checkpoint(Position(epoch, step, run.comm.round), _measured(run), arrays)
    ckpt.save(run.store, run.attempt.job_id, run.attempt.number, run.rank, slot, checkpoint)
    run.sync.checkpointed()


def _state_arrays(state_dict: dict[str, Array], rank: int) -> dict[str, Array]:
    arrays = {k: np.asarray(v) for k, v in state_dict.items()}
    for name, array in arrays.items():
        if array.dtype.kind == "f":
            check_finite(array, rank, f"checkpoint ({name})")
    return arrays


# --- the loop ---------------------------------------------------------------------------


def _train(
    run: _Run, schedule: _Schedule, on_epoch: EpochCallback | None, on_step: StepCallback | None
) -> Continuation | None:
    """Every epoch from where the run starts; a Continuation where the invocation runs out of time."""
    start = run.start.position
    for epoch in range(start.epoch, run.job.algorithm.epochs):
        stopped = _train_epoch(run, schedule, epoch, start.step if epoch == start.epoch else 0, on_step)
        if stopped is not None:
            return stopped
        _end_epoch(run, epoch, on_epoch)
    return None


def _train_epoch(
    run: _Run, schedule: _Schedule, epoch: int, first_step: int, on_step: StepCallback | None
) -> Continuation | None:
    spec = run.job.algorithm
    order = epoch_order(len(run.y), epoch=epoch, rank=run.rank, seed=spec.seed, shuffle=spec.shuffle)
    for step, rows in enumerate(batch_indices(order, spec.batch_size, run.steps)):
        if step < first_step:
            continue
        if run.lifetime is not None:
            if run.lifetime.remaining_s() < run.lifetime.margin_s + 2 * run.slowest_step:
                _checkpoint(run, epoch, step, ckpt.CONTINUATION_SLOT)
                run.comm.finish(early=True)
                return Continuation(rank=run.rank, epoch=epoch, step=step)
            schedule.take_if_due(run, epoch, step)
        step_started = time.perf_counter()
        run.state.step(run.X[rows], run.y[rows])
        run.slowest_step = max(run.slowest_step, time.perf_counter() - step_started)
        if on_step is not None:
            on_step(run.rank, epoch, step + 1, run.steps)
    return None


def _end_epoch(run: _Run, epoch: int, on_epoch: EpochCallback | None) -> None:
    loss = float(run.state.end_epoch(epoch))
    if not math.isfinite(loss):
        raise Diverged(f"training diverged in epoch {epoch + 1} (loss {loss}); try a smaller learning rate")
    run.losses.append(loss)
    run.elapsed.append(run.start.before.times.total_s + time.perf_counter() - run.started)
    if epoch == run.start.position.epoch:
        run.rss_after_first_epoch = peak_rss_mb()
    if on_epoch is not None:
        on_epoch(run.rank, epoch + 1, loss, run.elapsed[-1])


# --- finish and report ------------------------------------------------------------------


def _finish(run: _Run) -> WorkerReport:
    """End the algorithm and the communicator; rank 0 saves and scores the model; report."""
    run.state.finish()
    params = run.state.final_params()
    # Flat memory: the peak after this invocation's first epoch against the peak at the end.
    memory = Memory(peak_rss_after_first_epoch_mb=run.rss_after_first_epoch, peak_rss_mb=peak_rss_mb())
    async_stats = AsyncStats.of(run.sync.stats()) if run.sync.asynchronous else None
    run.comm.finish()
    saved = SavedModel()
    if run.rank == 0:
        saved = save_model(run.store, run.job, run.attempt.job_id, run.manifest, run.model, params, run.rank)
    final = _measured(run)
    if run.channel_comm is not None:
        run.channel_comm.conclude_trial()  # a rank resumed past the trial, with no round since, reads its outcome
    return _report(run, params, memory, async_stats, saved, final)


def _report(
    run: _Run, params: Array, memory: Memory, async_stats: AsyncStats | None, saved: SavedModel, final: Measured
) -> WorkerReport:
    channel_comm = run.channel_comm
    pattern = channel_comm.pattern_name if channel_comm is not None else None
    plan = run.plan
    return WorkerReport(
        rank=run.rank,
        losses=tuple(run.losses),
        epoch_elapsed_s=tuple(run.elapsed),
        model_checksum=params_checksum(params),
        rows=len(run.y),
        steps_per_epoch=run.steps,
        invocations=run.start.before.invocations,
        memory=memory,
        async_stats=async_stats,
        model_uri=saved.model_uri,
        test_loss=saved.test_loss,
        accuracy=saved.accuracy,
        times=_times(final.times),
        channel=Traffic.measured(final.traffic, run.comm.round),
        billed=final.billed if run.on_lambda else None,
        pattern=pattern,
        predicted_round_s=plan.predictions.get(pattern) if plan is not None and pattern is not None else None,
        trial_round_s=channel_comm.trial_round_s if channel_comm is not None else None,
    )


def _times(spent: TimeSpent) -> Times:
    """A rank's times as its report gives them: communicating apart from waiting."""
    return Times(
        load_s=spent.load_s,
        compute_s=spent.compute_s,
        communicate_s=max(spent.comm_s - spent.wait_s, 0.0),
        wait_s=spent.wait_s,
        total_s=spent.total_s,
    )
