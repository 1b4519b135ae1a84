"""Models: numpy linear models (binary and multiclass) here; torch models are imported only when chosen."""

from __future__ import annotations

from lambdaml import catalogue
from lambdaml.models.base import Model
from lambdaml.registry import Registry

# Torch models are imported only when a job names them.
MODELS: Registry[type[Model]] = Registry.of("model", catalogue.MODELS)

__all__ = ["MODELS", "Model"]
