"""The communicator for serverful (IaaS) workers: torch.distributed collectives over gloo.

The same algorithms and models run unchanged: only the transport differs from the channel
communicators. Launched by ``torchrun`` (locally or on an EC2 cluster), which sets RANK,
WORLD_SIZE and the rendezvous in the environment.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist

from lambdaml.arrays import Array
from lambdaml.comm.base import Communicator
from lambdaml.errors import SyncTimeout, WorkerError

if TYPE_CHECKING:
    from lambdaml.models.base import Model


def init_process_group(timeout_s: float) -> tuple[int, int]:
    """Join the gloo group torchrun describes in the environment; returns (rank, world size)."""
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        raise WorkerError("RANK and WORLD_SIZE are not set: start IaaS workers with torchrun") from None
    if not dist.is_initialized():
        try:
            dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as exc:
            raise WorkerError(f"rank {rank} could not join the gloo group: {exc}") from None
    return rank, world


class TorchDistCommunicator(Communicator):
    """Collectives of the default process group. gloo's ring allreduce moves 2(W-1)/W of
    the vector per rank; its sums are not in rank order, so results match the channel
    communicators to float rounding, not bit for bit.

    Waiting for slower ranks happens inside gloo's calls, so it is counted as
    communication (``wait_s`` stays 0).
    """

    def __init__(self, rank: int, world_size: int) -> None:
        super().__init__(rank, world_size)
        self.collectives = 0
        self.bytes_moved = 0.0

    @property
    def wait_s(self) -> float:
        return 0.0

    def _allreduce(self, x: Array) -> Array:
        self.round += 1
        tensor = torch.from_numpy(np.array(x, copy=True))  # gloo reduces in place; x stays the caller's
        try:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        except RuntimeError as exc:  # a peer died or timed out: gloo says which
            raise SyncTimeout(f"rank {self.rank}: allreduce of round {self.round} failed: {exc}") from None
        self.collectives += 1
        self.bytes_moved += 2 * (self.world_size - 1) / self.world_size * x.nbytes
        return tensor.numpy()

    def barrier(self, name: str) -> None:
        started = time.perf_counter()
        try:
            dist.barrier()
        except RuntimeError as exc:
            raise SyncTimeout(f"rank {self.rank}: barrier {name!r} failed: {exc}") from None
        finally:
            self.comm_s += time.perf_counter() - started

    def attach_gradient_sync(self, model: Model) -> bool:
        from lambdaml.models.torch_models import TorchModel

        if not isinstance(model, TorchModel) or self.world_size == 1:
            return False
        model.distribute()
        return True

    def finish(self, *, early: bool = False) -> None:
        self.barrier("end")

    def stats(self) -> dict[str, float]:
        # The same names as a channel's statistics, so results compare side by side.
        return {"requests": float(self.collectives), "bytes_sent": self.bytes_moved, "bytes_received": self.bytes_moved}
