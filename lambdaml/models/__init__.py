"""Models: numpy linear models here; torch models are imported only when chosen."""

from __future__ import annotations

from lambdaml.models.base import Model
from lambdaml.registry import Registry

MODELS: Registry[type[Model]] = Registry("model")
MODELS.register("lr", "lambdaml.models.linear:LogisticRegression")

__all__ = ["MODELS", "Model"]
