"""Decentralized training on a ring: D-PSGD, DCD-PSGD, ECD-PSGD and CHOCO-SGD.

Each step a worker writes one message under a key of its own and reads only its ring
neighbours' messages (the ring protocol, ``lambdaml/sync/ring.py``); there is no
collective per step. The mixing matrix is uniform over a worker and its distinct
neighbours (1/3 each from W = 3, 1/2 for W = 2), symmetric and doubly stochastic. Every
method but D-PSGD sends a compressed message (``compression``; identity when none is
given), and with the identity compressor each reduces to D-PSGD.

Beyond the steps, the protocol's two small collectives keep results comparable with the
other algorithms: once per epoch the sample count and loss sum are summed over all workers
(for the loss curve), and after the last epoch the models are averaged once, so every
worker ends with the average model that the methods' convergence results are about.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState, substate
from lambdaml.arrays import Array
from lambdaml.comm.ring import ring_weight
from lambdaml.compression import Compressor, Payload, make_compressor, roundtrip
from lambdaml.compression.compressors import Identity
from lambdaml.data.sparse import Features
from lambdaml.sync.base import mean_loss
from lambdaml.sync.ring import RingProtocol

if TYPE_CHECKING:
    from lambdaml.config.algorithm import CHOCOSGDSpec


class RingAlgorithm(AlgorithmState):
    """What the ring methods share: the ring protocol, the compressor, local gradients, the step count."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if not isinstance(self.sync, RingProtocol):  # reify gives a decentralized algorithm the ring
            raise TypeError(f"{type(self).__name__} runs under the ring protocol, not {type(self.sync).__name__}")
        self.ring = self.sync
        self.weight = ring_weight(self.comm.world_size)
        compression = self.spec.compression_spec
        self.compressor: Compressor = Identity() if compression is None else make_compressor(compression)
        self.t = 0  # steps taken

    def _local_gradient(self, X: Features, y: Array) -> Array:
        """This worker's mean gradient at its own model (the regularizer's alone on an empty batch)."""
        loss, grad = self._gradient(X, y)
        self._loss_sum += loss
        self._count += len(y)
        return (grad / len(y) if len(y) else grad) + self.model.regularizer_grad(self.params)

    def _compress(self, x: Array) -> tuple[Payload, Array]:
        """The message for ``x`` and what the neighbours will decompress from it."""
        rng = np.random.default_rng([self.spec.seed, self.comm.rank, self.t]) if self.compressor.stochastic else None
        return roundtrip(self.compressor, x, rng)

    def _received(self, messages: Mapping[int, Payload]) -> dict[int, Array]:
        return {j: self.compressor.decompress(m, self.params.size) for j, m in messages.items()}

    def _mix(self, own: Array, neighbours: Mapping[int, Array]) -> Array:
        """mean(x_{i-1}, x_i, x_{i+1}): ``own`` and the neighbours' vectors, summed in rank order."""
        total = np.array(own)
        for j in sorted(neighbours):
            total += neighbours[j]
        return total / (1 + len(neighbours))

    def step(self, X: Features, y: Array) -> None:
        grad = self._local_gradient(X, y)
        self.t += 1
        self._ring_step(grad)

    @abstractmethod
    def _ring_step(self, grad: Array) -> None:
        """One exchange with the neighbours and the model update, given this worker's gradient."""

    def end_epoch(self, epoch: int) -> float:
        count, loss_sum = self.sync.sum(np.array([self._count, self._loss_sum]))
        self._loss_sum = self._count = 0.0
        return mean_loss(loss_sum, count)

    def _copies(self) -> dict[str, Array]:
        """Per-neighbour (or own) vectors that are state: replicas, estimates, public copies."""
        return {}

    def state_dict(self) -> dict[str, Array]:
        copies = {f"copy.{name}": v.copy() for name, v in self._copies().items()}
        return {**super().state_dict(), "t": np.array(self.t), **copies}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        super().load_state_dict(state)
        self.t = int(state["t"])
        copies = self._copies()
        for name, value in substate(state, "copy.").items():
            copies[name][...] = value


class DPSGD(RingAlgorithm):
    """D-PSGD: x_i <- mean(x_{i-1}, x_i, x_{i+1}) - lr g_i, sending whole models."""

    info = catalogue.ALGORITHMS["dpsgd"]

    def _ring_step(self, grad: Array) -> None:
        message, _ = self._compress(self.params)  # the identity: no compression is configured
        neighbours = self._received(self.ring.exchange(message))
        self.params = self._mix(self.params, neighbours) - self.spec.lr * grad


class DCDPSGD(RingAlgorithm):
    """DCD-PSGD: move to the D-PSGD target by a compressed difference that every holder applies.

    Each worker keeps exact replicas of its neighbours' models. It computes the target
    mean(x_{i-1}, x_i, x_{i+1}) - lr g_i from them, sends q = C(target - x_i), and adds q
    to its own model while the neighbours add the same q to their replica of it, so every
    replica equals the model it copies, bit for bit, at every step.
    """

    info = catalogue.ALGORITHMS["dcd_psgd"]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.replicas = {j: self.params.copy() for j in self.ring.neighbours}  # all start from the same init

    def _ring_step(self, grad: Array) -> None:
        target = self._mix(self.params, self.replicas) - self.spec.lr * grad
        message, q = self._compress(target - self.params)
        received = self._received(self.ring.exchange(message))
        self.params = self.params + q
        for j, q_j in received.items():
            self.replicas[j] += q_j

    def _copies(self) -> dict[str, Array]:
        return {f"replica.{j}": v for j, v in self.replicas.items()}


class ECDPSGD(RingAlgorithm):
    """ECD-PSGD: neighbours are known by extrapolated estimates, updated from compressed z.

    x_{t+1} = mean(x_t, est_{i-1}, est_{i+1}) - lr g_i; the worker sends
    C(z) with z = (1 - t/2) x_t + (t/2) x_{t+1}, and every receiver updates its estimate
    est <- (1 - 2/t) est + (2/t) C(z) (t counts steps from 1). With exact z the estimate
    equals x_{t+1}, so the identity compressor gives D-PSGD.
    """

    info = catalogue.ALGORITHMS["ecd_psgd"]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.estimates = {j: self.params.copy() for j in self.ring.neighbours}

    def _ring_step(self, grad: Array) -> None:
        t = self.t
        following = self._mix(self.params, self.estimates) - self.spec.lr * grad
        message, _ = self._compress((1 - t / 2) * self.params + (t / 2) * following)
        received = self._received(self.ring.exchange(message))
        for j, z_j in received.items():
            self.estimates[j] = (1 - 2 / t) * self.estimates[j] + (2 / t) * z_j
        self.params = following

    def _copies(self) -> dict[str, Array]:
        return {f"estimate.{j}": v for j, v in self.estimates.items()}


class CHOCOSGD(RingAlgorithm):
    """CHOCO-SGD (Koloskova et al. 2019): gossip on public copies x_hat, updated by compressed q.

    x <- x - lr g; x <- x + gamma sum_j W_ij (x_hat_j - x_hat_i); q = C(x - x_hat_i);
    x_hat_i += q, and every neighbour adds q to its x_hat_i. The copies start at zero.
    With the identity compressor and gamma = 1 this is D-PSGD.
    """

    info = catalogue.ALGORITHMS["choco_sgd"]
    spec: CHOCOSGDSpec

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.public = np.zeros_like(self.params)  # my x_hat, as my neighbours hold it
        self.copies = {j: np.zeros_like(self.params) for j in self.ring.neighbours}

    def _ring_step(self, grad: Array) -> None:
        x = self.params - self.spec.lr * grad
        if self.copies:
            gossip = np.zeros_like(x)
            for j in sorted(self.copies):
                gossip += self.copies[j] - self.public
            x += self.spec.gamma * self.weight * gossip
        message, q = self._compress(x - self.public)
        received = self._received(self.ring.exchange(message))
        self.public += q
        for j, q_j in received.items():
            self.copies[j] += q_j
        self.params = x

    def _copies(self) -> dict[str, Array]:
        return {"public": self.public, **{f"copy.{j}": v for j, v in self.copies.items()}}
