"""What is trained, independent of where: the model, the data, the algorithm, and how its work splits into rounds.

The algorithms a job may name come from the plug-in catalogue; the model predicts those it
has a schedule for (``MODELLED``) and refuses the others in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analytic_model.profile import ModelInfo, Profile
from lambdaml import catalogue
from lambdaml.errors import ConfigError

#: The algorithms the model predicts, with the vectors a worker checkpoints: params (+ base, + z and u).
MODELLED = {"ga_sgd": 1, "ma_sgd": 2, "admm": 3, "kmeans": 1}
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}  # extra state vectors per parameter vector
_STATS = 2  # sample count and loss sum travel with the vector (``_with_stats``)


def check_modelled(algorithm: str) -> None:
    """An algorithm the catalogue knows and the model predicts; otherwise a one-line ConfigError."""
    catalogue.algorithm(algorithm)  # an unknown name fails here, listing the catalogue's
    if algorithm not in MODELLED:
        raise ConfigError(f"algorithm {algorithm!r} is not modelled yet; the cost model predicts {', '.join(MODELLED)}")


@dataclass(frozen=True)
class Workload:
    """What is trained: the model, the data and the algorithm, independent of where it runs.

    ``epochs`` is how long it trains (the epochs to reach the target loss, from a short
    measured run or from the user); ``rounds``, if given, fixes the number of collective
    rounds instead, whatever the worker count.
    """

    model: str
    dataset_bytes: float
    samples: int
    features: int = 0
    params: int | None = None  # overrides the catalog's count (a model of another size)
    flops_per_sample: float | None = None  # overrides the catalog's training flops per sample
    k: int = 8  # kmeans clusters
    algorithm: str = "ga_sgd"
    batch_size: int = 100  # per worker
    epochs: float = 10.0
    rounds: float | None = None
    local_epochs: int = 1  # ma_sgd and admm: passes between averagings
    optimizer: str = "sgd"
    sparse: bool = False
    classes: int = 2  # of the labels: sizes softmax and multiclass_svm

    def check(self, profile: Profile) -> ModelInfo:
        """Validate against the profile's catalog; user mistakes raise ConfigError with one line."""
        info = profile.model(self.model)
        positive = {"dataset_bytes": self.dataset_bytes, "samples": self.samples, "batch_size": self.batch_size}
        positive.update(epochs=self.epochs, local_epochs=self.local_epochs, k=self.k)
        for name, value in positive.items():
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive number, got {value!r}")
        for name, optional in (("params", self.params), ("flops-per-sample", self.flops_per_sample)):
            if optional is not None and (not math.isfinite(optional) or optional <= 0):
                raise ConfigError(f"{name} must be a positive number, got {optional!r}")
        if self.rounds is not None and (not math.isfinite(self.rounds) or self.rounds <= 0):
            raise ConfigError(f"rounds must be a positive number, got {self.rounds!r}")
        if self.features < 0:
            raise ConfigError(f"features must be a positive number, got {self.features!r}")
        if info.needs_features and self.params is None and self.features < 1:
            raise ConfigError(f"model {self.model!r} needs --features (its size depends on them) or --params")
        check_modelled(self.algorithm)
        if (self.algorithm == "kmeans") != (self.model == "kmeans"):
            raise ConfigError("the kmeans algorithm and the kmeans model go together")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
        if isinstance(self.classes, bool) or not isinstance(self.classes, int) or self.classes < 2:
            raise ConfigError(f"classes must be a whole number of at least 2, got {self.classes!r}")
        if self.classes > 2 and self.model in catalogue.MODELS and catalogue.model(self.model).binary:
            # As a job on this data would be refused at its start.
            raise ConfigError(
                f"model {self.model!r} is binary, but the data has {self.classes} classes; "
                "use softmax or multiclass_svm"
            )
        return info

    def n_params(self, info: ModelInfo) -> int:
        return int(self.params) if self.params is not None else info.params(self.features, self.k, self.classes)

    def vector_bytes(self, info: ModelInfo) -> float:
        """Bytes of the vector one worker contributes per round (the parameters plus the loss statistics)."""
        extra = self.k + 1 if self.algorithm == "kmeans" else _STATS
        return (self.n_params(info) + extra) * info.bytes_per_param

    def state_bytes(self, info: ModelInfo) -> float:
        """Bytes of one worker's checkpoint (parameters, algorithm state, optimizer state)."""
        vectors = MODELLED[self.algorithm] + OPTIMIZERS[self.optimizer]
        return vectors * self.n_params(info) * info.bytes_per_param


@dataclass(frozen=True)
class Schedule:
    """How the work of one worker splits into rounds."""

    rounds: float  # collective rounds in the whole run
    samples_per_round: float  # samples one worker processes between two collectives
    steps_per_round: float  # optimizer steps one worker takes between two collectives


def schedule(workload: Workload, workers: int) -> Schedule:
    rows = math.ceil(workload.samples / workers)
    steps_per_epoch = max(1, math.ceil(rows / workload.batch_size))  # every worker takes the largest shard's steps
    if workload.algorithm == "ga_sgd":
        per_epoch, samples, steps = float(steps_per_epoch), float(min(workload.batch_size, rows)), 1.0
    elif workload.algorithm == "kmeans":
        per_epoch, samples, steps = 1.0, float(rows), 1.0
    else:  # ma_sgd, admm: local passes, then one averaging
        local = workload.local_epochs
        per_epoch, samples, steps = 1.0 / local, float(rows * local), float(steps_per_epoch * local)
    rounds = workload.rounds if workload.rounds is not None else workload.epochs * per_epoch
    return Schedule(rounds=rounds, samples_per_round=samples, steps_per_round=steps)
