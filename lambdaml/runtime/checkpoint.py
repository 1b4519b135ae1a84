"""Worker checkpoints: where a rank is in its run, and its algorithm's state, in the data bucket.

Each rank keeps three slots per attempt: the newest two periodic checkpoints, written every
``checkpoint_every`` rounds at rounds that are multiples of it (so under BSP every rank
writes the same rounds, and the slowest rank's newest round is held by every rank), and one
written just before a Lambda continuation. A restart within an attempt takes the newest
slot; a resumed attempt takes the periodic checkpoint of the round it was told. Every
checkpoint is sealed under its key, so a checkpoint copied to another slot, rank or
attempt is refused.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from lambdaml import codec, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.errors import CodecError, DataError, KeyNotFound
from lambdaml.seal import Sealer

PERIODIC_SLOTS = ("s0", "s1")
CONTINUATION_SLOT = "cont"
_SEALER = Sealer()


@dataclass
class Position:
    """Where a rank's run stands, and what it has measured so far."""

    epoch: int = 0
    step: int = 0
    round: int = 0
    invocations: int = 1
    losses: list[float] | None = None
    elapsed: list[float] | None = None
    times: dict[str, float] | None = None
    traffic: dict[str, float] | None = None
    billed: list[dict[str, Any]] | None = None  # one entry per finished invocation
    # A pattern trial's timed rounds so far, [round, bytes, seconds] (``lambdaml.comm.trial``).
    trial: list[list[float]] | None = None

    def order(self) -> tuple[int, int]:
        return (self.epoch, self.step)


Checkpoint = tuple[Position, dict[str, Array]]


def periodic_slot(progress: int, every: int) -> str:
    """The slot of the periodic checkpoint at ``progress`` (a multiple of ``every``): they alternate."""
    return PERIODIC_SLOTS[(progress // every) % 2]


def save(
    store: Channel, job_id: str, attempt: int, rank: int, slot: str, position: Position, state: dict[str, Array]
) -> None:
    key = keys.worker_checkpoint(job_id, attempt, rank, slot)
    meta = np.frombuffer(json.dumps(asdict(position)).encode(), np.uint8)
    bundle = codec.encode_bundle({"meta": meta, **{f"state.{k}": np.asarray(v) for k, v in state.items()}})
    store.put(key, _SEALER.seal(key, bundle))


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
        position = Position(**json.loads(bytes(bundle.pop("meta"))))
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"{key} is not a checkpoint: {exc}") from None
    return position, {k.removeprefix("state."): v for k, v in bundle.items()}


def load_newest(store: Channel, job_id: str, attempt: int, rank: int) -> Checkpoint | None:
    """This rank's furthest checkpoint in ``attempt`` (a restart within the attempt), or None."""
    found = _slots(store, job_id, attempt, rank, (*PERIODIC_SLOTS, CONTINUATION_SLOT))
    if not found:
        return None
    return max(found.values(), key=lambda checkpoint: checkpoint[0].order())


def load_at_round(store: Channel, job_id: str, attempt: int, rank: int, round_: int) -> Checkpoint:
    """This rank's periodic checkpoint of ``round_`` in ``attempt`` (where a resumed attempt starts)."""
    for position, state in _slots(store, job_id, attempt, rank, PERIODIC_SLOTS).values():
        if position.round == round_:
            return position, state
    raise DataError(f"job {job_id!r} attempt {attempt} has no checkpoint of rank {rank} at round {round_} to resume")


def periodic_rounds(store: Channel, job_id: str, attempt: int, workers: int) -> list[set[int]]:
    """The rounds of every rank's periodic checkpoints in ``attempt``, one set per rank."""
    rounds: list[set[int]] = []
    for rank in range(workers):
        try:
            found = _slots(store, job_id, attempt, rank, PERIODIC_SLOTS)
        except KeyNotFound:  # pragma: no cover - get_many leaves missing keys out
            found = {}
        rounds.append({position.round for position, _ in found.values()})
    return rounds
