"""The algorithm interface: hooks the worker loop calls, and a checkpointable state.

The hyperparameters are a frozen, validated ``AlgorithmSpec``; ``reify`` turns them into
the mutable state one worker trains with (the BAGUA split of configuration from state).
Under BSP an algorithm reduces through the communicator's collectives; under ASP/SSP it
pushes additive updates through ``self.asynchronous`` instead.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from lambdaml.data.sparse import Features
from lambdaml.optim import make_optimizer

if TYPE_CHECKING:
    from lambdaml.comm.base import Communicator
    from lambdaml.comm.compressed import CompressedAllreduce
    from lambdaml.config import AlgorithmSpec, SyncSpec
    from lambdaml.models.base import Model
    from lambdaml.sync.asp import AsyncUpdates

CompressionUse = Literal["none", "optional", "required"]


class AlgorithmState(ABC):
    """One worker's training state; ``step`` per batch, ``end_epoch`` per epoch."""

    #: Whether the algorithm has an ASP/SSP form (consensus methods such as ADMM do not).
    supports_async: ClassVar[bool] = False
    #: Whether every step sums gradients over workers (GA-SGD): DDP can then do it in backward.
    reduces_gradients: ClassVar[bool] = False
    #: What it sends compressed: nothing ("none"), what the job asks ("optional"), or always
    #: ("required", 1-bit by default).
    compression: ClassVar[CompressionUse] = "none"
    #: Whether workers talk only to their ring neighbours (no collective per step).
    decentralized: ClassVar[bool] = False
    #: The ``optimizer`` settings it accepts (an algorithm with its own update rule takes the default).
    optimizers: ClassVar[tuple[str, ...]] = ("sgd", "momentum", "adam")

    def __init__(
        self,
        spec: AlgorithmSpec,
        model: Model,
        comm: Communicator,
        params: np.ndarray,
        asynchronous: AsyncUpdates | None = None,
    ) -> None:
        self.spec = spec
        self.model = model
        self.comm = comm
        self.params = params
        self.asynchronous = asynchronous
        self.optimizer = make_optimizer(spec)
        self.compute_s = 0.0
        self._loss_sum = 0.0
        self._count = 0.0
        self.reducer = None if self.decentralized else compressed_allreduce(spec, comm)

    def on_start(self, X: Features, y: np.ndarray) -> None:
        """Called once with this worker's whole shard, before the first step."""

    @abstractmethod
    def step(self, X: Features, y: np.ndarray) -> None:
        """Train on one batch (possibly empty when this worker's shard ran out)."""

    def end_epoch(self, epoch: int) -> float:
        """Mean training loss over the epoch's batches (of all workers under BSP)."""
        return self._take_loss()

    def finish(self) -> None:
        """After the last epoch: under ASP, merge every update still outstanding."""
        if self.asynchronous is not None:
            self.params += self.asynchronous.drain(self.params)

    def final_params(self) -> np.ndarray:
        """The model this worker ends with (ADMM's is the consensus variable)."""
        return self.params

    def _take_loss(self) -> float:
        loss = self._loss_sum / self._count if self._count else float("nan")
        self._loss_sum = self._count = 0.0
        return loss

    def _gradient(self, X: Features, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and gradient *sums* of a batch, timed as compute."""
        started = time.perf_counter()
        if len(y) or self.model.gradients_summed_across_workers:
            loss, grad = self.model.loss_grad_sum(self.params, X, y)
        else:
            loss, grad = 0.0, np.zeros_like(self.params)
        self.compute_s += time.perf_counter() - started
        return loss, grad

    def _local_step(self, X: Features, y: np.ndarray, extra_grad: np.ndarray | None = None) -> None:
        """One optimizer step on this worker's batch alone (MA-SGD, ADMM, ASP GA-SGD)."""
        loss, grad = self._gradient(X, y)
        self._loss_sum += loss
        self._count += len(y)
        if not len(y):
            return
        started = time.perf_counter()
        direction = grad / len(y) + self.model.regularizer_grad(self.params)
        if extra_grad is not None:
            direction += extra_grad
        self.optimizer.step(self.params, direction)
        self.compute_s += time.perf_counter() - started

    def _with_stats(self, vector: np.ndarray) -> np.ndarray:
        """``vector`` followed by this epoch's sample count and loss sum, for one collective."""
        return np.concatenate([vector, np.array([self._count, self._loss_sum], dtype=vector.dtype)])

    def _split_stats(self, reduced: np.ndarray) -> tuple[np.ndarray, float]:
        """Undo ``_with_stats`` after a sum over ranks; returns the vector and the mean loss."""
        count, loss_sum = float(reduced[-2]), float(reduced[-1])
        self._loss_sum = self._count = 0.0
        return reduced[:-2], (loss_sum / count if count else float("nan"))

    def _sum_with(self, vector: np.ndarray, extras: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sums over ranks of ``vector`` (compressed when the job says so) and of ``extras`` (exact)."""
        if self.reducer is None:
            reduced = self.comm.allreduce(np.concatenate([vector, extras.astype(vector.dtype)]))
            return reduced[: vector.size], reduced[vector.size :]
        summed, summed_extras = self.reducer.allreduce(self.comm, vector, extras)
        assert summed_extras is not None
        return summed, summed_extras

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything a continued run needs to go on exactly where this one stopped."""
        optimizer = {f"optimizer.{k}": v for k, v in self.optimizer.state_dict().items()}
        reducer = {} if self.reducer is None else {f"reducer.{k}": v for k, v in self.reducer.state_dict().items()}
        epoch_stats = np.array([self._loss_sum, self._count])
        asynchronous = {} if self.asynchronous is None else self.asynchronous.state_dict()
        asp = {f"asp.{k}": v for k, v in asynchronous.items()}
        return {"params": self.params.copy(), "epoch_stats": epoch_stats, **optimizer, **reducer, **asp}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.params = np.array(state["params"])
        self._loss_sum, self._count = (float(v) for v in state["epoch_stats"])
        self.optimizer.load_state_dict(substate(state, "optimizer."))
        if self.reducer is not None:
            self.reducer.load_state_dict(substate(state, "reducer."))
        if self.asynchronous is not None:
            self.asynchronous.load_state_dict(substate(state, "asp."))


def substate(state: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The entries of ``state`` under ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def compressed_allreduce(spec: AlgorithmSpec, comm: Communicator) -> CompressedAllreduce | None:
    """The compressed collective a spec asks for (None: uncompressed), in the communicator's pattern."""
    compression = spec.compression_spec
    if compression is None:
        return None
    from lambdaml.comm.compressed import CompressedAllreduce
    from lambdaml.comm.patterns import AllReduce
    from lambdaml.compression import make_compressor

    return CompressedAllreduce(
        make_compressor(compression),
        rank=comm.rank,
        world=comm.world_size,
        scatter=not isinstance(getattr(comm, "pattern", None), AllReduce),
        error_feedback=compression.error_feedback is not False,
        seed=spec.seed,
    )


def reify(
    spec: AlgorithmSpec, model: Model, comm: Communicator, params: np.ndarray, sync: SyncSpec | None = None
) -> AlgorithmState:
    """Build the runtime state of the algorithm a spec names, under the sync protocol asked for."""
    from lambdaml.algorithms import ALGORITHMS

    asynchronous = None
    if sync is not None and sync.protocol != "bsp":
        from lambdaml.comm.channel import ChannelCommunicator
        from lambdaml.sync.asp import AsyncUpdates

        if not isinstance(comm, ChannelCommunicator):
            raise TypeError("ASP and SSP run over a channel communicator")
        asynchronous = AsyncUpdates(comm, staleness=sync.staleness if sync.protocol == "ssp" else None)
    return ALGORITHMS.get(spec.name)(spec, model, comm, params, asynchronous)
