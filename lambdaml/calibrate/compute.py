"""The compute probe: one worker step through the algorithm's own step, at two batch sizes,
giving the time per sample and per step on one core; and the rate of the reduce's sums."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Required, TypedDict

import numpy as np

from analytic_model.profile import CodecPasses, MeasuredCompute, SparseCompute, aws_profile, compute_key
from lambdaml.arrays import Array
from lambdaml.calibrate.probing import least_time, median_time, value
from lambdaml.channels import open_channel
from lambdaml.config import AlgorithmSpec, ChannelSpec, ModelSpec
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.seal import Sealer, new_secret

_IMAGE_MODELS = {"mobilenet", "resnet18"}  # CIFAR-10 shaped probes


@dataclass(frozen=True)
class ComputeProbe:
    """One model to time: its name, width, density and the batch size the job will use."""

    model: str = "lr"
    features: int = 28
    sparse: bool = False
    batch_size: int = 100
    rows: int = 4000
    nnz_per_row: int = 75  # sparse: words drawn a row (repeats add up, so a row holds a few fewer)


class ProbeShape(TypedDict, total=False):
    """The manifest's figures of a probe's data (what is not given takes the manifest's default)."""

    n_features: Required[int]
    n_classes: int
    sample_shape: list[int]
    format: str


def _probe_data(probe: ComputeProbe) -> tuple[Any, Array, ProbeShape]:
    from lambdaml.data import synthetic

    if probe.model in _IMAGE_MODELS:
        rng = np.random.default_rng(0)
        X = rng.random((probe.rows, 3 * 32 * 32), dtype=np.float32)
        y = rng.integers(0, 10, probe.rows).astype(np.float32)
        return X, y, {"n_features": 3072, "n_classes": 10, "sample_shape": [3, 32, 32]}
    if probe.sparse:
        Xs, y, _ = synthetic.rcv1_like(probe.rows, features=probe.features, nnz_per_row=probe.nnz_per_row)
        return Xs, y, {"n_features": probe.features, "format": "csr"}
    X, y, _ = synthetic.higgs_like(probe.rows, features=probe.features)
    if probe.model == "mlp":
        y = (np.arange(probe.rows) % 10).astype(np.float32)
        return X, y, {"n_features": probe.features, "n_classes": 10}
    return X, y, {"n_features": probe.features}


def measure_compute(probe: ComputeProbe) -> tuple[str, MeasuredCompute]:
    """Time one worker step at two batch sizes: the algorithm's own step (GA-SGD's, or
    k-means' for its model) through a one-worker communicator, so the batch gather, the loss
    and gradient, the vector's packing, finite check and copy around its collective, and the
    optimizer update are all in it."""
    from lambdaml.algorithms import reify
    from lambdaml.comm.channel import ChannelCommunicator
    from lambdaml.data.shards import Manifest
    from lambdaml.models import MODELS

    if probe.batch_size < 2 or probe.rows < probe.batch_size:
        raise ConfigError(f"calibrating {probe.model}: need a batch size of at least 2 and rows >= batch size")
    X, y, shape = _probe_data(probe)
    manifest = Manifest(  # the model's shape; nothing is read from a store
        name="calibrate",
        shard_rows=[probe.rows],
        test_rows=0,
        created=0.0,
        dataset_version="calibrate",
        shard_bytes=[0],
        shard_hashes=[""],
        **shape,
    )
    model = MODELS.get(probe.model).build(ModelSpec(name=probe.model), manifest)
    params = model.init_params(0)
    if probe.model == "kmeans":
        params = np.asarray(X[: model.n_params // probe.features], dtype=np.float64).reshape(-1).copy()
    order = np.random.default_rng(0).permutation(probe.rows)
    alone = ChannelCommunicator(open_channel(ChannelSpec(kind="memory")), "calibrate", 0, 1)
    algorithm = AlgorithmSpec(name="kmeans" if probe.model == "kmeans" else "ga_sgd", lr=1e-6)
    state = reify(algorithm, model, alone, params)
    state.on_start(X, y)

    def step_time(batch: int) -> float:
        steps = max(1, probe.rows // batch)
        position = iter(range(10**9))

        def step() -> None:
            i = next(position) % steps
            rows = order[i * batch : (i + 1) * batch]
            state.step(X[rows], y[rows])

        step()  # warm-up (torch's first call allocates)
        repeats = max(5, min(200, int(0.3 / max(median_time(step, 3), 1e-6))))
        return least_time(step, repeats)

    small = max(1, probe.batch_size // 10)
    large = probe.batch_size
    t_small, t_large = step_time(small), step_time(large)
    # The time per sample is the slope between the two batches. Where a step's fixed cost
    # dwarfs its samples (a narrow linear model), grow the large batch until its samples stand
    # well clear of that cost, so the noise of a loaded machine cannot swallow the slope.
    while t_large < 2 * t_small and large < probe.rows and t_large < 0.5:
        large = min(probe.rows, large * 4)
        t_large = step_time(large)
    if t_large <= t_small:
        raise LambdaMLError(
            f"calibrating {probe.model}: a step of {large} samples measured no slower than one of {small}; "
            "the machine was too busy to measure, run calibrate again"
        )
    per_sample = (t_large - t_small) / (large - small)
    per_step = max(t_small - small * per_sample, 0.0)
    info = aws_profile().models.get(probe.model)
    # A sparse row's work is its nonzeros, not its width: no flop count to scale other models by.
    flops = info.flops(probe.features, 8, model.n_params) if info and not probe.sparse else 0.0
    return compute_key(probe.model, model.n_params, probe.sparse), MeasuredCompute(
        per_sample_s=per_sample,
        per_step_s=per_step,
        flops_per_sample=flops,
        kind=info.kind if info else "linear",
        runtime=info.runtime if info else "numpy",
        nnz_per_row=X.nnz / probe.rows if probe.sparse else 0.0,
    )


#: The sparse probes' shape: RCV1's width, and rows of few and of many non-zeros, then a wider model.
SPARSE_FEATURES, SPARSE_WIDER = 47_236, 200_000
SPARSE_FEW, SPARSE_MANY = 20, 300


def measure_sparse() -> SparseCompute:
    """A sparse LR step's rates on CSR rows, through the algorithm's own step (``measure_compute``):
    per non-zero and per row from rows of few and of many non-zeros at RCV1's width, and per
    parameter a step from the same rows at a wider model. Each is the slope between two probes,
    so a rate that the machine's noise pushed below zero is taken as zero."""
    few = measure_compute(ComputeProbe("lr", SPARSE_FEATURES, True, 100, nnz_per_row=SPARSE_FEW))[1]
    many = measure_compute(ComputeProbe("lr", SPARSE_FEATURES, True, 100, nnz_per_row=SPARSE_MANY))[1]
    wide = measure_compute(ComputeProbe("lr", SPARSE_WIDER, True, 100, nnz_per_row=SPARSE_FEW))[1]
    per_nonzero = max((many.per_sample_s - few.per_sample_s) / (many.nnz_per_row - few.nnz_per_row), 0.0)
    per_param = max((wide.per_step_s - few.per_step_s) / (SPARSE_WIDER - SPARSE_FEATURES), 0.0)
    return SparseCompute(
        per_nonzero_s=per_nonzero,
        per_row_s=max(few.per_sample_s - per_nonzero * few.nnz_per_row, 0.0),
        per_param_step_s=per_param,
        per_step_s=max(few.per_step_s - per_param * (SPARSE_FEATURES + 1), 0.0),
    )


def measure_add_Bps() -> float:
    """Bytes of one float64 vector summed into another per second (the reduce in every pattern,
    and the unit the compressors' and optimizers' passes are counted in).

    Timed on vectors larger than the caches (80 MB), the least of 20 sums: a worker's vectors
    share the caches with its data, its other state and the other processes. The rate of a
    cache-resident 8 MB vector swung 2x from one calibration to the next with other load on the
    host (14.7 to 33 GB/s on one VM, on one day), and jobs' compressed rounds ran at the rate out
    of the caches (16-17 GB/s there, steady to a few percent).
    """
    a, b = value(10_000_000), value(10_000_000, seed=1)
    return a.nbytes / least_time(lambda: np.add(a, b, out=a), 20)


@functools.cache
def measure_mac_Bps() -> float:
    """Bytes of a value a second the job's MAC hashes (``Sealer.open_view`` of an authenticated
    8 MB value, the least of 10): sealing and opening each hash the value once. Measured once
    per process: the channels' exchange probes need it as much as the profile does."""
    sealer = Sealer(new_secret())
    data = value(1_000_000).tobytes()
    sealed = sealer.seal("calibrate/mac", data)
    return len(data) / least_time(lambda: sealer.open_view("calibrate/mac", sealed), 10)


CODEC_VALUES = 100_000  # float64 values a compressor is timed on: the size its passes were first measured at


def measure_codec_passes(add_Bps: float) -> dict[str, CodecPasses]:
    """Each compressor's CPU in passes of ``add_Bps`` (what the model counts them in): compressing
    with error feedback into a codec bundle, and decompressing one, beyond a plain tensor's encode
    and decode; the least of 15 calls of each on ``CODEC_VALUES`` float64.

    Measured here because the ratio is the machine's: onebit's compress (with a tensor's encode)
    took 20 passes of an in-cache add of its vectors on one 2-core VM, and 31 of that add but 13
    of the out-of-cache add ``add_Bps`` times on another.
    """
    from lambdaml import catalogue, codec
    from lambdaml.compression import ErrorFeedback, make_compressor
    from lambdaml.config import CompressionSpec

    x = value(CODEC_VALUES, seed=2)
    unit = x.nbytes / add_Bps
    encode = least_time(lambda: codec.encode(x), 15)
    blob = codec.encode(x)
    decode = least_time(lambda: codec.decode(blob), 15)
    passes: dict[str, CodecPasses] = {}
    for name in catalogue.COMPRESSORS:
        compressor, feedback = make_compressor(CompressionSpec(name=name)), ErrorFeedback()
        rng = np.random.default_rng(0)
        bundle = codec.encode_bundle(feedback.compress(compressor, x, rng)[0])
        compress = least_time(lambda: codec.encode_bundle(feedback.compress(compressor, x, rng)[0]), 15)  # noqa: B023
        decompress = least_time(lambda: compressor.decompress(codec.decode_bundle(bundle), x.size), 15)  # noqa: B023
        passes[name] = CodecPasses(max(compress - encode, 0.0) / unit, max(decompress - decode, 0.0) / unit)
    return passes
