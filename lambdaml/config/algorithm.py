"""The algorithm part of a job file: its hyperparameters and what it sends compressed.

``AlgorithmSpec`` holds what every algorithm takes; an algorithm with hyperparameters of its
own has a subclass of it, named by its catalogue description (``AlgorithmInfo.spec``). A
mapping validated as ``AlgorithmSpec``, and ``AlgorithmSpec(name=..., ...)`` itself, give the
model of the algorithm it names, so a plug-in's algorithm checks its own fields like a
built-in one, and refuses another algorithm's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Self, cast

from pydantic import Field, ModelWrapValidatorHandler, field_validator, model_validator

from lambdaml import catalogue
from lambdaml.config.base import Spec, SpecModels, known_name
from lambdaml.errors import ConfigError


class CompressionSpec(Spec):
    """How workers compress what they send (``algorithm.compression``)."""

    name: str = "onebit"  # a compressor of the catalogue's
    levels: int = Field(16, ge=1, le=32767)  # qsgd: quantization levels
    ratio: float = Field(0.01, gt=0, le=1)  # topk: fraction of the entries sent
    # Error feedback (send what earlier compression dropped): on by default where it applies
    # (ga_sgd, ma_sgd, onebit_adam); the decentralized methods compensate in their own way.
    error_feedback: bool | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return known_name(catalogue.COMPRESSORS, "compressor", name)


def spec_model(name: str) -> type[AlgorithmSpec]:
    """The hyperparameters' model of the algorithm called ``name`` (loaded from its description's path)."""
    return SPEC_MODELS.model(name)


#: The fields the flat spec of earlier versions (one model for every algorithm) held that only some
#: algorithms own. It took them with any algorithm, and every job record and result it stored holds
#: them all: the others' are still accepted, and ignored as they always were.
_FLAT_SPEC_FIELDS = frozenset({"rho", "l1", "local_epochs", "warmup_steps", "gamma"})


def _without_others_fields(model: type[AlgorithmSpec], data: Mapping[str, object]) -> dict[str, object]:
    return {key: value for key, value in data.items() if key in model.model_fields or key not in _FLAT_SPEC_FIELDS}


class AlgorithmSpec(Spec):
    """What every algorithm takes (GA-SGD, KMeans and D-PSGD, DCD-PSGD and ECD-PSGD take nothing more)."""

    name: str = "ga_sgd"
    lr: float = Field(0.1, gt=0, le=1e3)
    batch_size: int = Field(100, ge=1, le=10_000_000)
    epochs: int = Field(5, ge=1, le=100_000)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    shuffle: bool = True
    optimizer: str = "sgd"  # an optimizer of the catalogue's
    momentum: float = Field(0.9, ge=0, lt=1)
    compression: CompressionSpec | None = None  # None: uncompressed (onebit_adam: onebit)

    def __new__(cls, *args: Any, **data: Any) -> Self:
        """``AlgorithmSpec(name="admm", rho=1.0)`` is an ``ADMMSpec``, as the same mapping in a job file is."""
        return cast(Self, super().__new__(SPEC_MODELS.for_data(cls, data)))

    @model_validator(mode="wrap")
    @classmethod
    def _as_named_model(cls, data: Any, handler: ModelWrapValidatorHandler[AlgorithmSpec]) -> AlgorithmSpec:
        return SPEC_MODELS.validate(cls, data, handler, _without_others_fields)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return known_name(catalogue.ALGORITHMS, "algorithm", name)

    @field_validator("optimizer")
    @classmethod
    def _known_optimizer(cls, optimizer: str) -> str:
        return known_name(catalogue.OPTIMIZERS, "optimizer", optimizer)

    @field_validator("lr", mode="before")
    @classmethod
    def _finite(cls, lr: object) -> object:
        if isinstance(lr, float) and not math.isfinite(lr):
            raise ValueError("must be a finite number")
        return lr

    @model_validator(mode="after")
    def _relaxations(self) -> Self:
        try:
            model = spec_model(self.name)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if model is not type(self):
            raise ValueError(f"algorithm {self.name!r} takes a {model.__name__}, not a {type(self).__name__}")
        compression = self.compression
        try:  # the catalogue's rule, which the cost model applies too
            catalogue.check_relaxation(
                self.name,
                None if compression is None else compression.name,
                error_feedback=None if compression is None else compression.error_feedback,
                optimizer=self.optimizer,
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def compression_spec(self) -> CompressionSpec | None:
        """The compression to use: the spec's, or the algorithm's own default (onebit_adam: onebit)."""
        if self.compression is None and catalogue.algorithm(self.name).compression == "required":
            return CompressionSpec()
        return self.compression


SPEC_MODELS: SpecModels[AlgorithmSpec] = SpecModels("algorithm", "name", AlgorithmSpec, catalogue.algorithm)


class LocalTrainingSpec(AlgorithmSpec):
    """MA-SGD's: local passes between averagings."""

    name: str = "ma_sgd"
    local_epochs: int = Field(1, ge=1, le=10_000)


class ADMMSpec(LocalTrainingSpec):
    name: str = "admm"
    rho: float = Field(0.1, gt=0, le=1e6)  # penalty weight
    l1: float = Field(0.0, ge=0, le=1e6)  # l1 on the consensus variable, by soft-threshold


class OneBitAdamSpec(AlgorithmSpec):
    name: str = "onebit_adam"
    warmup_steps: int = Field(100, ge=1, le=100_000_000)  # plain Adam steps before freezing v


class CHOCOSGDSpec(AlgorithmSpec):
    name: str = "choco_sgd"
    gamma: float = Field(0.5, gt=0, le=1)  # consensus step size
