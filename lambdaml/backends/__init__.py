"""Compute backends: they start workers and carry their reports back; nothing else differs."""

from __future__ import annotations

from lambdaml.backends.base import Backend, JobEvent
from lambdaml.registry import Registry

BACKENDS: Registry[type[Backend]] = Registry("backend")
BACKENDS.register("local", "lambdaml.backends.local:LocalBackend")
BACKENDS.register("iaas-local", "lambdaml.backends.iaas:IaaSLocalBackend")

__all__ = ["BACKENDS", "Backend", "JobEvent"]
