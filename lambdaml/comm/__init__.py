"""Collectives over a channel (FaaS) or torch.distributed (IaaS), behind one interface."""

from __future__ import annotations

from lambdaml.comm.base import Communicator
from lambdaml.registry import Registry

# A pattern is the strategy a channel communicator uses for allreduce.
PATTERNS: Registry[type] = Registry("communication pattern")
PATTERNS.register("allreduce", "lambdaml.comm.patterns:AllReduce")
PATTERNS.register("scatter_reduce", "lambdaml.comm.patterns:ScatterReduce")

__all__ = ["PATTERNS", "Communicator"]
