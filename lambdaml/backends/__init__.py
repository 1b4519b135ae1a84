"""Compute backends: they start workers and carry their reports back; nothing else differs."""

from __future__ import annotations

from lambdaml import catalogue
from lambdaml.backends.base import (
    Backend,
    EventCallback,
    JobEvent,
    MachineBackend,
    ProgressCallback,
    Run,
    StepEvent,
)
from lambdaml.registry import Registry

BACKENDS: Registry[type[MachineBackend]] = Registry.of("backend", catalogue.BACKENDS)

__all__ = [
    "BACKENDS",
    "Backend",
    "EventCallback",
    "JobEvent",
    "MachineBackend",
    "ProgressCallback",
    "Run",
    "StepEvent",
]
