"""What is trained, independent of where: the model, the data, the algorithm, and how its work splits into rounds.

Every algorithm the plug-in catalogue lists is predicted, with every compression and protocol a
job file accepts for it; a combination the job file refuses is refused here in the same line
(the catalogue's own check).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analytic_model.profile import ModelInfo, Profile
from analytic_model.shard_size import FLOAT32, INT32, binary_dataset_bytes
from analytic_model.wire import Compression
from lambdaml import catalogue
from lambdaml.errors import ConfigError

_STATS = 2  # sample count and loss sum travel with the vector (``_with_stats``)
_EF_VECTORS = 2  # error feedback: a worker's memory of what it sent, and of the chunks it merged
_CSR_ENTRY_BYTES = INT32 + FLOAT32  # a non-zero's column index and value in a CSR shard


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
    nnz_per_row: float | None = None  # sparse: mean non-zeros a row (None: from the CSR shards' bytes)
    classes: int = 2  # of the labels: sizes softmax and multiclass_svm
    compression: str | None = None  # the job's ``algorithm.compression.name`` (None: none given)
    levels: int = 16  # qsgd
    ratio: float = 0.01  # topk
    error_feedback: bool | None = None  # None: on where it applies, as in the job file
    warmup_steps: int = 100  # onebit_adam: uncompressed Adam steps before the variance freezes
    protocol: str = "bsp"  # bsp, asp or ssp
    staleness: int = 4  # ssp: pushes a worker may run ahead

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
        catalogue.algorithm(self.algorithm)  # an unknown name fails here, listing the catalogue's
        if self.optimizer not in catalogue.OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; known: {', '.join(catalogue.OPTIMIZERS)}")
        if isinstance(self.classes, bool) or not isinstance(self.classes, int) or self.classes < 2:
            raise ConfigError(f"classes must be a whole number of at least 2, got {self.classes!r}")
        if self.classes > 2 and self.model in catalogue.MODELS and catalogue.model(self.model).binary:
            # As a job on this data would be refused at its start.
            raise ConfigError(
                f"model {self.model!r} is binary, but the data has {self.classes} classes; "
                "use softmax or multiclass_svm"
            )
        for name, count, least in (("warmup-steps", self.warmup_steps, 1), ("staleness", self.staleness, 0)):
            if isinstance(count, bool) or not isinstance(count, int) or count < least:
                raise ConfigError(f"{name} must be a whole number of at least {least}, got {count!r}")
        if self.sparse:
            self.row_nonzeros(info)
        if self.compression is not None:
            Compression(self.compression, self.levels, self.ratio).check()
        catalogue.check_relaxation(
            self.algorithm, self.compression, error_feedback=self.error_feedback, optimizer=self.optimizer
        )
        catalogue.check_protocol(
            self.algorithm,
            self.protocol,
            compression_given=self.compression is not None,
            compressed=self.compressor is not None,
            pattern="auto",
        )
        if (self.algorithm == "kmeans") != (self.model == "kmeans"):
            raise ConfigError("the kmeans algorithm and the kmeans model go together")
        return info

    def row_nonzeros(self, info: ModelInfo) -> float:
        """A sparse row's mean non-zeros: as given, else what the CSR shards' bytes hold beyond
        their row pointers and labels (``dataset_bytes`` is those shards' size)."""
        if not sparse_model(info):
            raise ConfigError(
                f"model {self.model!r} needs dense features, but the data is sparse (csr); "
                "use a linear model (lr, svm, softmax or multiclass_svm)"
            )
        if self.features < 1:
            raise ConfigError(f"sparse data needs its features (their count sizes {self.model!r})")
        nnz = self.nnz_per_row
        if nnz is None:
            empty = binary_dataset_bytes(self.samples, self.features, nnz=0)
            nnz = (self.dataset_bytes - empty) / (_CSR_ENTRY_BYTES * self.samples)
            if nnz <= 0:
                raise ConfigError(
                    f"{self.dataset_bytes:g} bytes hold no non-zeros in {self.samples} CSR rows; "
                    "give the non-zeros a row (--nnz or --density)"
                )
        if not math.isfinite(nnz) or not 0 < nnz <= self.features:
            raise ConfigError(f"non-zeros a row must be in (0, {self.features}] (the features), got {nnz:g}")
        return float(nnz)

    @property
    def compressor(self) -> Compression | None:
        """What is sent compressed: the job's compression, or the algorithm's own default (1-bit Adam: onebit)."""
        if self.compression is not None:
            return Compression(self.compression, self.levels, self.ratio)
        if catalogue.algorithm(self.algorithm).compression == "required":
            return Compression("onebit")  # the job file's CompressionSpec() default
        return None

    @property
    def decentralized(self) -> bool:
        return catalogue.algorithm(self.algorithm).decentralized

    @property
    def error_feedback_on(self) -> bool:
        """Whether compressed collectives keep error-feedback memories (``compressed_allreduce``)."""
        return self.compressor is not None and not self.decentralized and self.error_feedback is not False

    def n_params(self, info: ModelInfo) -> int:
        return int(self.params) if self.params is not None else info.params(self.features, self.k, self.classes)

    def vector_bytes(self, info: ModelInfo) -> float:
        """Bytes of the vector one worker contributes per round (the parameters plus the loss statistics)."""
        extra = self.k + 1 if self.algorithm == "kmeans" else _STATS
        return (self.n_params(info) + extra) * info.bytes_per_param

    def state_bytes(self, info: ModelInfo) -> float:
        """Bytes of one worker's checkpoint (parameters, algorithm state, optimizer state)."""
        vectors = state_vectors(self.algorithm, self.optimizer, error_feedback=self.error_feedback_on)
        return vectors * self.n_params(info) * info.bytes_per_param


def sparse_model(info: ModelInfo) -> bool:
    """Whether a model trains on CSR rows: the linear ones in numpy, except k-means (``require_dense``)."""
    return info.kind == "linear" and info.runtime == "numpy" and not info.params_per_cluster_feature


#: Vectors of the parameters' size a worker holds while it trains, beyond its checkpointed
#: state: the gradient and a collective's send and merged buffers.
WORKING_VECTORS = 3


def state_vectors(algorithm: str, optimizer: str, *, error_feedback: bool) -> int:
    """Vectors of the parameters' size in one worker's checkpoint: parameters, algorithm and optimizer state."""
    optimizer = "adam" if algorithm == "onebit_adam" else optimizer  # Adam whatever the setting
    optimizer_vectors = catalogue.OPTIMIZERS[optimizer].state_vectors
    return catalogue.algorithm(algorithm).state_vectors + optimizer_vectors + (_EF_VECTORS if error_feedback else 0)


def model_memory_bytes(
    n_params: int, bytes_per_param: float, algorithm: str, optimizer: str, *, error_feedback: bool
) -> float:
    """What one worker's model, its state and its working vectors take in memory while it trains."""
    vectors = state_vectors(algorithm, optimizer, error_feedback=error_feedback) + WORKING_VECTORS
    return float(vectors * n_params * bytes_per_param)


@dataclass(frozen=True)
class Schedule:
    """How the work of one worker splits into rounds."""

    rounds: float  # collective rounds in the whole run
    samples_per_round: float  # samples one worker processes between two collectives
    steps_per_round: float  # optimizer steps one worker takes between two collectives


def schedule(workload: Workload, workers: int) -> Schedule:
    rows = math.ceil(workload.samples / workers)
    steps_per_epoch = max(1, math.ceil(rows / workload.batch_size))  # every worker takes the largest shard's steps
    exchange_every = catalogue.algorithm(workload.algorithm).exchange_every
    if exchange_every == "step":
        per_epoch, samples, steps = float(steps_per_epoch), float(min(workload.batch_size, rows)), 1.0
    elif exchange_every == "epoch":  # one update from the whole shard
        per_epoch, samples, steps = 1.0, float(rows), 1.0
    else:  # local passes, then one averaging
        local = workload.local_epochs
        per_epoch, samples, steps = 1.0 / local, float(rows * local), float(steps_per_epoch * local)
    rounds = workload.rounds if workload.rounds is not None else workload.epochs * per_epoch
    return Schedule(rounds=rounds, samples_per_round=samples, steps_per_round=steps)
