"""Collectives over a channel (FaaS) or torch.distributed (IaaS), behind one interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lambdaml import catalogue
from lambdaml.comm.base import Communicator
from lambdaml.registry import Registry

if TYPE_CHECKING:
    from lambdaml.comm.patterns import Pattern

# A pattern is the strategy a channel communicator uses for allreduce.
PATTERNS: Registry[type[Pattern]] = Registry.of("communication pattern", catalogue.PATTERNS)

__all__ = ["PATTERNS", "Communicator"]
