"""Distributed training algorithms: configuration (an AlgorithmSpec) reified into runtime state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lambdaml import catalogue
from lambdaml.algorithms.base import AlgorithmState
from lambdaml.arrays import Array
from lambdaml.registry import Registry
from lambdaml.sync import open_protocol

if TYPE_CHECKING:
    from lambdaml.comm.base import Communicator
    from lambdaml.config import AlgorithmSpec, SyncSpec
    from lambdaml.models.base import Model

ALGORITHMS: Registry[type[AlgorithmState]] = Registry.of("algorithm", catalogue.ALGORITHMS)


def reify(
    spec: AlgorithmSpec, model: Model, comm: Communicator, params: Array, sync: SyncSpec | None = None
) -> AlgorithmState:
    """Build the runtime state of the algorithm a spec names, under the sync protocol asked for (BSP if none)."""
    cls = ALGORITHMS.get(spec.name)
    return cls(spec, model, comm, params, open_protocol(spec, comm, sync, decentralized=cls.decentralized))


__all__ = ["ALGORITHMS", "AlgorithmState", "reify"]
