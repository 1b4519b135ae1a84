"""Starting a job: check it before any worker runs, then claim its id or its next attempt.

The one way every job starts, whatever runs its workers: the job driver calls it for local
processes and torchrun, the coordinator for Lambda.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from datetime import UTC, datetime

from analytic_model.profile import load_profile
from analytic_model.workload import model_memory_bytes
from lambdaml import catalogue, seal
from lambdaml.channels import Channel, open_channel
from lambdaml.config import JobSpec
from lambdaml.data.shards import Manifest, read_manifest, shards_of_worker
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.models import MODELS
from lambdaml.runtime import machine_jobs, records
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.results import clear_job_channel
from lambdaml.storage import open_storage

log = logging.getLogger(__name__)


def new_job_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


#: How long a job may go unheard (no heartbeat, no state change) past its sync timeout before
#: ``--resume`` treats it as interrupted rather than still running.
STALE_GRACE_S = 60.0


def preflight(
    job: JobSpec, *, check_channel: bool = True, dataset_version: str | None = None
) -> tuple[Channel, Manifest]:
    """Fail fast, with one line, on what would otherwise fail inside every worker."""
    store = open_storage(job.storage)
    manifest = read_manifest(store, job.dataset, dataset_version)
    shards_of_worker(manifest, 0, job.workers)
    catalogue.model(job.model.name).check_classes(manifest.name, manifest.n_classes)
    check_model_fits(job, manifest)
    if check_channel:
        channel = open_channel(job.channel)
        channel.ensure()  # creates the bucket/table on a local stack; only checks it on AWS
        channel.ping()
        channel.close()
    return store, manifest


#: Bytes of one parameter: the numpy models keep float64 vectors, the torch models float32.
NUMPY_PARAM_BYTES, TORCH_PARAM_BYTES = 8, 4


def model_params(job: JobSpec, manifest: Manifest) -> tuple[int, int] | None:
    """The job's parameter count and bytes per parameter, without building a torch model (None: unknown).

    The numpy models are built (a model holds no parameters until ``init_params``); a torch
    model's count comes from its architecture (MLP) or the cost model's catalogue (the CNNs).
    """
    if catalogue.model(job.model.name).needs != "torch":
        return MODELS.get(job.model.name).build(job.model, manifest).n_params, NUMPY_PARAM_BYTES
    if job.model.name == "mlp":
        widths = [manifest.n_features, *job.model.hidden, manifest.n_classes]
        return sum(a * b + b for a, b in itertools.pairwise(widths)), TORCH_PARAM_BYTES
    try:
        info = load_profile(None).model(job.model.name)
    except ConfigError:  # a plug-in the cost model does not know
        return None
    return info.params(manifest.n_features, job.model.k, manifest.n_classes), TORCH_PARAM_BYTES


def check_model_fits(job: JobSpec, manifest: Manifest) -> None:
    """Refuse, in one line, a model whose state cannot fit a worker's memory (each would fail to allocate)."""
    counted = model_params(job, manifest)
    if counted is None:
        return
    n_params, bytes_per_param = counted
    spec = job.algorithm
    need = model_memory_bytes(
        n_params, bytes_per_param, spec.name, spec.optimizer, error_feedback=spec.compression_spec is not None
    )
    have = job.runtime.memory_mb * 2**20
    if need > have:
        raise ConfigError(
            f"model {job.model.name!r} on dataset {manifest.name!r} has {n_params:,} parameters: with its gradient, "
            f"{spec.optimizer} state and the collectives' buffers a worker needs {need / 2**30:.1f} GiB, over the "
            f"{job.runtime.memory_mb} MB it has (runtime.memory_mb; Lambda allows up to 10240)"
        )


def begin(
    job: JobSpec, job_id: str | None, *, resume: bool = False, check_channel: bool = True
) -> tuple[Channel, Manifest, Attempt]:
    """Check the job, then claim its id (or, with ``resume``, its next attempt): the one way every job starts.

    A new job trains on the dataset's current version; a resumed one on the version its
    first attempt pinned. Nothing is claimed when a check fails.
    """
    if resume:
        if not job_id:
            raise LambdaMLError("--resume needs the id of the job to continue")
        store = open_storage(job.storage)
        _, manifest = preflight(job, check_channel=check_channel, dataset_version=records.first_version(store, job_id))
        # Killed outright, this machine's run never recorded its end: its gone process says it.
        machine_jobs.interrupt_if_owner_gone(store, job_id, job.storage.bucket)
        attempt = records.resume_job(store, job, job_id, stale_after_s=job.sync.timeout_s + STALE_GRACE_S)
        if check_channel:  # what an attempt killed outright left on the channel
            clear_job_channel(job, job_id, attempt.number - 1)
        return store, manifest, attempt
    job_id = job_id or new_job_id(job.name)
    store, manifest = preflight(job, check_channel=check_channel)
    return store, manifest, records.claim_job(store, job, job_id, manifest.dataset_version)


def job_secret(job: JobSpec) -> bytes | None:
    """A fresh MAC key for the job's channel values where they need one (never stored).

    Under ``integrity: auto`` a channel with ``auth`` goes without a MAC only when its server is
    shown to turn away clients that do not authenticate: a Redis with no password set accepts any
    AUTH, and anyone who reaches it could forge a value. Otherwise the MAC stays, said in one line.
    """
    spec = job.channel
    if spec.integrity == "auto" and spec.credentials_given:
        with open_channel(spec) as channel:
            if channel.refuses_anonymous_clients():
                return None
            log.warning(
                "%s lets in clients that do not authenticate, although channel.auth is set: the job's values "
                "keep their MAC (set a password on the server, or integrity: mac to say so)",
                channel.describe(),
            )
        return seal.new_secret()
    return seal.new_secret() if spec.authenticates_values else None
