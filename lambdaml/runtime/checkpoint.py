"""Worker checkpoints: where a rank is in its run, and its algorithm's state, in the data bucket.

Each rank keeps three slots per attempt: the newest two periodic checkpoints, written every
``checkpoint_every`` rounds at rounds that are multiples of it (so under BSP every rank
writes the same rounds, and the slowest rank's newest round is held by every rank), and one
written just before a Lambda continuation. A restart within an attempt takes the newest
slot; a resumed attempt takes the periodic checkpoint of the round it was told. Every
checkpoint is sealed under its key, so a checkpoint copied to another slot, rank or
attempt is refused.

A checkpoint's position and measures are one JSON object in its bundle (``meta``), parsed
into ``Position`` and ``Measured`` where it is read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np
from pydantic import TypeAdapter, ValidationError

from lambdaml import codec, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.cost import Invocation
from lambdaml.errors import CodecError, DataError, KeyNotFound
from lambdaml.seal import Sealer

PERIODIC_SLOTS = ("s0", "s1")
CONTINUATION_SLOT = "cont"
_SEALER = Sealer()

#: A pattern trial's timed round: (round, bytes, seconds) (``lambdaml.comm.trial``).
TrialRound = tuple[int, int, float]


@dataclass(frozen=True)
class Position:
    """Where a checkpoint was taken, and where a run resumed from it starts: the epoch, the step
    within it and the communicator's round."""

    epoch: int = 0
    step: int = 0
    round: int = 0

    def order(self) -> tuple[int, int]:
        return (self.epoch, self.step)


@dataclass(frozen=True)
class TimeSpent:
    """A rank's seconds so far: loading its shard, computing, in collectives (waits included),
    waiting on the others within them, and in all."""

    load_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    total_s: float = 0.0


@dataclass(frozen=True)
class Measured:
    """What a rank's run has measured up to a checkpoint: the invocation that resumes from it adds to it."""

    invocations: int = 1
    losses: tuple[float, ...] = ()
    elapsed: tuple[float, ...] = ()  # when each epoch ended, since the run began
    times: TimeSpent = field(default_factory=TimeSpent)
    traffic: dict[str, float] = field(default_factory=dict)  # the communicator's counts, by name
    billed: tuple[Invocation, ...] = ()  # one per finished Lambda invocation
    trial: tuple[TrialRound, ...] | None = None  # a pattern trial's timed rounds, while it runs


@dataclass(frozen=True)
class Checkpoint:
    """A rank's checkpoint: where it was taken, what the run had measured, its algorithm's state."""

    position: Position
    measured: Measured
    state: dict[str, Array]


# Extra keys are ignored: each reads its own fields from the one ``meta`` object.
_POSITION = TypeAdapter(Position)
_MEASURED = TypeAdapter(Measured)


def periodic_slot(progress: int, every: int) -> str:
    """The slot of the periodic checkpoint at ``progress`` (a multiple of ``every``): they alternate."""
    return PERIODIC_SLOTS[(progress // every) % 2]


def save(store: Channel, job_id: str, attempt: int, rank: int, slot: str, checkpoint: Checkpoint) -> None:
    key = keys.worker_checkpoint(job_id, attempt, rank, slot)
    meta = {**asdict(checkpoint.position), **asdict(checkpoint.measured)}
    encoded = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    state = {f"state.{k}": np.asarray(v) for k, v in checkpoint.state.items()}
    store.put(key, _SEALER.seal(key, codec.encode_bundle({"meta": encoded, **state})))


def _slots(store: Channel, job_id: str, attempt: int, rank: int, slots: tuple[str, ...]) -> dict[str, Checkpoint]:
    wanted = {slot: keys.worker_checkpoint(job_id, attempt, rank, slot) for slot in slots}
    found = store.get_many(list(wanted.values()))
    out: dict[str, Checkpoint] = {}
    for slot, key in wanted.items():
        if key in found:
            out[slot] = _decode(key, found[key])
    return out


def _decode(key: str, raw: bytes) -> Checkpoint:
    bundle = codec.decode_bundle(_SEALER.open(key, raw), what=key)
    try:
        meta = json.loads(bytes(bundle.pop("meta")))
        position, measured = _POSITION.validate_python(meta), _MEASURED.validate_python(meta)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "meta"
        raise CodecError(f"{key} is not a checkpoint: {where}: {problem['msg']}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"{key} is not a checkpoint: {exc}") from None
    return Checkpoint(position, measured, {k.removeprefix("state."): v for k, v in bundle.items()})


def load_newest(store: Channel, job_id: str, attempt: int, rank: int) -> Checkpoint | None:
    """This rank's furthest checkpoint in ``attempt`` (a restart within the attempt), or None."""
    found = _slots(store, job_id, attempt, rank, (*PERIODIC_SLOTS, CONTINUATION_SLOT))
    if not found:
        return None
    return max(found.values(), key=lambda checkpoint: checkpoint.position.order())


def load_at_round(store: Channel, job_id: str, attempt: int, rank: int, round_: int) -> Checkpoint:
    """This rank's periodic checkpoint of ``round_`` in ``attempt`` (where a resumed attempt starts)."""
    for checkpoint in _slots(store, job_id, attempt, rank, PERIODIC_SLOTS).values():
        if checkpoint.position.round == round_:
            return checkpoint
    raise DataError(f"job {job_id!r} attempt {attempt} has no checkpoint of rank {rank} at round {round_} to resume")


def periodic_rounds(store: Channel, job_id: str, attempt: int, workers: int) -> list[set[int]]:
    """The rounds of every rank's periodic checkpoints in ``attempt``, one set per rank."""
    rounds: list[set[int]] = []
    for rank in range(workers):
        try:
            found = _slots(store, job_id, attempt, rank, PERIODIC_SLOTS)
        except KeyNotFound:  # pragma: no cover - get_many leaves missing keys out
            found = {}
        rounds.append({checkpoint.position.round for checkpoint in found.values()})
    return rounds
