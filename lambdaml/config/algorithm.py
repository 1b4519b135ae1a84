"""The algorithm part of a job file: its hyperparameters and what it sends compressed."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from lambdaml import catalogue
from lambdaml.config.base import Spec, known_name
from lambdaml.errors import ConfigError


class CompressionSpec(Spec):
    """How workers compress what they send (``algorithm.compression``)."""

    name: str = "onebit"  # identity, onebit, qsgd, uint8, topk
    levels: int = Field(16, ge=1, le=32767)  # qsgd: quantization levels
    ratio: float = Field(0.01, gt=0, le=1)  # topk: fraction of the entries sent
    # Error feedback (send what earlier compression dropped): on by default where it applies
    # (ga_sgd, ma_sgd, onebit_adam); the decentralized methods compensate in their own way.
    error_feedback: bool | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return known_name(catalogue.COMPRESSORS, "compressor", name)


class AlgorithmSpec(Spec):
    name: str = "ga_sgd"
    lr: float = Field(0.1, gt=0, le=1e3)
    batch_size: int = Field(100, ge=1, le=10_000_000)
    epochs: int = Field(5, ge=1, le=100_000)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    shuffle: bool = True
    optimizer: Literal["sgd", "momentum", "adam"] = "sgd"
    momentum: float = Field(0.9, ge=0, lt=1)
    rho: float = Field(0.1, gt=0, le=1e6)  # admm: penalty weight
    l1: float = Field(0.0, ge=0, le=1e6)  # admm: l1 on the consensus variable, by soft-threshold
    local_epochs: int = Field(1, ge=1, le=10_000)  # ma_sgd and admm: local passes between averagings
    compression: CompressionSpec | None = None  # None: uncompressed (onebit_adam: onebit)
    warmup_steps: int = Field(100, ge=1, le=100_000_000)  # onebit_adam: plain Adam steps before freezing v
    gamma: float = Field(0.5, gt=0, le=1)  # choco_sgd: consensus step size

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return known_name(catalogue.ALGORITHMS, "algorithm", name)

    @field_validator("lr", mode="before")
    @classmethod
    def _finite(cls, lr: object) -> object:
        if isinstance(lr, float) and not math.isfinite(lr):
            raise ValueError("must be a finite number")
        return lr

    @model_validator(mode="after")
    def _relaxations(self) -> AlgorithmSpec:
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
