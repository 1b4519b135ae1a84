"""Compute: how fast a worker runs a model's steps, on a Lambda function's vCPU share, local cores or an instance."""

from __future__ import annotations

from dataclasses import dataclass

from analytic_model.profile import InstanceSpec, ModelInfo, Profile, SparseCompute, compute_key
from analytic_model.tables import ARCHITECTURES
from analytic_model.workload import Schedule, Workload
from lambdaml.errors import ConfigError


def lambda_vcpus(memory_mb: float, profile: Profile) -> float:
    """A function's vCPU share: proportional to memory, one vCPU at 1,769 MB, up to 6 at 10,240 MB."""
    limits = profile.lambda_
    one, top, top_mb = limits.vcpu_one_at_mb, limits.max_vcpus, limits.max_memory_mb
    if memory_mb <= one:
        return memory_mb / one
    return min(top, 1.0 + (memory_mb - one) * (top - 1.0) / (top_mb - one))


def parallel_speed(vcpus: float, profile: Profile) -> float:
    """One-vCPU equivalents of ``vcpus``: each beyond the first adds ``multithread_efficiency`` of one."""
    if vcpus <= 1:
        return vcpus
    return 1.0 + profile.compute.multithread_efficiency * (vcpus - 1.0)


def faas_speed(profile: Profile, memory_mb: float, workers: int) -> float:
    """One-vCPU equivalents a worker computes with: its Lambda share, or its share of the local cores."""
    shared = profile.shared_cores
    if shared is not None:
        return min(1.0, shared / workers)  # local worker processes are single-threaded
    return parallel_speed(lambda_vcpus(memory_mb, profile), profile)


def architecture_speed(profile: Profile, architecture: str) -> float:
    """A Lambda vCPU's speed on ``architecture`` against an x86_64 one (arm64: an assumption of the profile's)."""
    if architecture not in ARCHITECTURES:
        raise ConfigError(f"unknown Lambda architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")
    return profile.compute.arm64_speed if architecture == "arm64" else 1.0


def gflops(profile: Profile, kind: str) -> float:
    """One vCPU's training rate for a model kind (linear, dense, conv)."""
    return profile.keyed(profile.compute.vcpu_gflops, "compute.vcpu_gflops", kind)


def host_speed(instance: InstanceSpec, profile: Profile, workers: int) -> float:
    """One-vCPU equivalents of an instance's CPU; on a local profile, a rank's share of this
    machine's cores (the ``iaas-local`` ranks run one intra-op thread each, as local workers do)."""
    shared = profile.shared_cores
    if shared is not None:
        return min(1.0, shared / workers)
    return parallel_speed(instance.vcpus * instance.vcpu_speed, profile)


def on_gpu(instance: InstanceSpec, kind: str) -> bool:
    """Whether a model of this kind trains on the instance's GPU (neural networks do; numpy models do not)."""
    return bool(instance.gpu) and instance.gpu_tflops > 0 and kind in ("dense", "conv")


def iaas_speed(instance: InstanceSpec, kind: str, profile: Profile, workers: int) -> tuple[float, float]:
    """(per-sample speed, per-step speed) of an instance, in one-vCPU equivalents.

    On a CPU both are the host's: the same rule as a Lambda function's vCPUs. On a GPU the
    samples run at the GPU's rate, while a step's overhead (Python, torch's dispatch, kernel
    launches) stays on the host's CPU.
    """
    host = host_speed(instance, profile, workers)
    if on_gpu(instance, kind):
        return instance.gpu_tflops * 1e12 / (gflops(profile, kind) * 1e9), host
    return host, host


@dataclass(frozen=True)
class ComputeRates:
    per_sample_s: float  # on one vCPU-equivalent
    per_step_s: float
    source: str


def compute_rates(workload: Workload, info: ModelInfo, profile: Profile) -> ComputeRates:
    """Per-sample and per-step time on one vCPU: measured for this model, else from its flops
    (sparse rows: from their non-zeros)."""
    params = workload.n_params(info)
    if workload.sparse and profile.compute.sparse is not None:
        return sparse_rates(workload, info, profile, profile.compute.sparse)
    flops = workload.flops_per_sample or info.flops(workload.features, workload.k, params, workload.classes)
    exact = profile.measured.get(compute_key(workload.model, params, workload.sparse))
    if exact is not None:
        return ComputeRates(exact.per_sample_s, exact.per_step_s, "measured")
    # Another size of the same model, or another model of the same kind: scale by flops.
    same_kind = [m for m in profile.measured.values() if m.kind == info.kind and m.flops_per_sample > 0]
    if same_kind:
        ref = same_kind[0]
        return ComputeRates(ref.per_sample_s * flops / ref.flops_per_sample, ref.per_step_s, "measured rate")
    rate = gflops(profile, info.kind)
    per_step = profile.keyed(profile.compute.per_step_s, "compute.per_step_s", info.runtime)
    return ComputeRates(flops / (rate * 1e9), per_step, "defaults")


def sparse_rates(workload: Workload, info: ModelInfo, profile: Profile, rates: SparseCompute) -> ComputeRates:
    """A sparse linear model's rates: a row costs its non-zeros (each touching every weight of its
    feature: one, or one a class), a step the pass over its parameters, as ``CSRMatrix`` and the
    models compute them. A probe of this very model scales to the workload's non-zeros a row."""
    params = workload.n_params(info)
    weights = info.params(1, workload.k, workload.classes) - info.params(0, workload.k, workload.classes)

    def row_s(nnz: float) -> float:
        return weights * (rates.per_row_s + rates.per_nonzero_s * nnz)

    nnz = workload.row_nonzeros(info)
    exact = profile.measured.get(compute_key(workload.model, params, sparse=True))
    if exact is not None and exact.nnz_per_row > 0 and row_s(exact.nnz_per_row) > 0:
        return ComputeRates(exact.per_sample_s * row_s(nnz) / row_s(exact.nnz_per_row), exact.per_step_s, "measured")
    # The profile's sparse rates: calibrated on this target, or the shipped ones (their origin says which).
    return ComputeRates(row_s(nnz), rates.per_step_s + rates.per_param_step_s * params, "sparse rate")


#: An algorithm's update of its state per step beyond GA-SGD's (which the compute probe times), in
#: passes over the parameter vector as long as adding one such vector to another (``compute.add_Bps``).
#: Measured: 1-bit Adam's compressed step (its momentum on the kept coordinates, the update
#: preconditioned by the frozen variance) took 2-4 such passes more than GA-SGD's, with every
#: coordinate kept (20,001 dense parameters) and with a third kept (100,001 parameters, sparse data),
#: through the algorithms' own steps on one core of a 2-core AMD EPYC VM (2026-12-04).
UPDATE_PASSES = {"onebit_adam": 4.0}


def update_s(workload: Workload, info: ModelInfo, sched: Schedule, add_Bps: float) -> float:
    """One worker's update of its algorithm's state between two collectives, beyond GA-SGD's."""
    passes = UPDATE_PASSES.get(workload.algorithm, 0.0)
    return sched.steps_per_round * passes * workload.n_params(info) * info.bytes_per_param / add_Bps


def round_compute_s(sched: Schedule, rates: ComputeRates, speed: float, step_speed: float | None = None) -> float:
    """One worker's compute between two collectives: its samples at ``speed`` vCPU-equivalents,
    its steps' overhead at ``step_speed`` (the same, unless the samples run on a GPU)."""
    steps = speed if step_speed is None else step_speed
    return sched.samples_per_round * rates.per_sample_s / speed + sched.steps_per_round * rates.per_step_s / steps
