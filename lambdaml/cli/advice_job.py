"""``lambdaml advise --job JOB.yaml``: the advise options a job file and its dataset's manifest give.

A flag the user gave wins. What is still unset comes from the job (its model, algorithm and
the algorithm's settings, the workers and Lambda memory where the file sets them, its
channel, pattern and instance type; its protocol and compression for ``--protocol`` and
``--compression``, where the advisor has them) and, unless the flags already
size the data, from the dataset's manifest in the job's storage: training rows, features,
classes, whether it is sparse and its density (a CSR shard's bytes count its non-zeros), and the
bytes of its shards (what workers really hold; where the flags change the rows, features or
non-zeros, the bytes are computed for those instead).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from typing import Any

from analytic_model.shard_size import nnz_of_shards
from lambdaml import catalogue
from lambdaml.config import JobSpec, parse_job, read_job_file
from lambdaml.config.algorithm import LocalTrainingSpec
from lambdaml.errors import ConfigError, LambdaMLError

log = logging.getLogger(__name__)

#: The flags that say what the data is; given both, the manifest is not read (its bytes would not apply).
DATA_FLAGS = ("samples", "features")
#: The flags that give sparse data's non-zeros (the manifest's: from its CSR shards' bytes).
SPARSITY_FLAGS = ("nnz", "density")


def _fill(args: argparse.Namespace, name: str, value: Any) -> None:
    """Set an option the user left unset (None); one they gave is theirs."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def job_options(job: JobSpec, raw: Mapping[str, object]) -> dict[str, str | list[str]]:
    """The options a job gives, as the command line would give them (text, or the parsed name lists).

    ``raw`` is the file as written: workers, memory and the instance type count only where it
    sets them (the job's defaults say nothing about the user's job); a pattern of ``auto`` leaves
    every pattern to the advisor.
    """
    spec = job.algorithm
    options: dict[str, str | list[str]] = {
        "model": job.model.name,
        "algorithm": spec.name,
        "optimizer": spec.optimizer,
        "batch_size": str(spec.batch_size),
        "local_epochs": str(spec.local_epochs if isinstance(spec, LocalTrainingSpec) else 1),
        "k": str(job.model.k),
        "protocol": job.sync.protocol,
    }
    compression = spec.compression_spec
    if compression is not None:
        options["compression"] = compression.name
    if catalogue.channel(job.channel.kind).connects_processes:  # one process's channel has no Lambda equivalent
        options["channels"] = [job.channel.kind]
    if job.sync.pattern != "auto":
        options["patterns"] = [job.sync.pattern]
    if "workers" in raw:
        options["workers"] = str(job.workers)
    if _sets(raw, "runtime", "memory_mb"):
        options["memory"] = str(job.runtime.memory_mb)
    if _sets(raw, "iaas", "instance_type"):
        options["instances"] = job.iaas.instance_type
    return options


def _sets(raw: Mapping[str, object], part: str, name: str) -> bool:
    """Whether the job file as written sets ``part.name``."""
    section = raw.get(part)
    return isinstance(section, dict) and name in section


def manifest_options(job: JobSpec) -> dict[str, str | bool]:
    """Rows, features, classes, sparsity and shard bytes from the dataset's manifest in the job's storage.

    A manifest that cannot be read (no bucket reachable, no such dataset) is one line that
    says which flags give the same figures.
    """
    from lambdaml.data.shards import read_manifest
    from lambdaml.storage import open_storage

    where = f"s3://{job.storage.bucket}" + (f" at {job.storage.endpoint_url}" if job.storage.endpoint_url else "")
    try:
        manifest = read_manifest(open_storage(job.storage), job.dataset)
    except LambdaMLError as exc:
        raise ConfigError(
            f"cannot read the manifest of dataset {job.dataset!r} from {where} ({exc}); pass --samples and "
            "--features instead (with --classes for a multiclass dataset, --sparse --nnz N for a sparse one)"
        ) from None
    log.info("dataset %s version %s: %d rows", manifest.name, manifest.dataset_version, manifest.train_rows)
    found: dict[str, str | bool] = {
        "samples": str(manifest.train_rows),
        "features": str(manifest.n_features),
        "classes": str(manifest.n_classes),
        "dataset_bytes": str(sum(manifest.shard_bytes)),
        "sparse": manifest.format == "csr",
    }
    if manifest.format == "csr":  # the non-zeros price a sparse step: its shards' bytes hold them
        nnz = sum(
            map(nnz_of_shards, manifest.shard_bytes, manifest.shard_rows, [manifest.n_features] * manifest.shards)
        )
        found["density"] = repr(max(nnz, 1) / (manifest.train_rows * manifest.n_features))
    return found


def apply_job(args: argparse.Namespace) -> None:
    """Fill the options the user left unset from ``args.job`` and its dataset's manifest."""
    raw = read_job_file(args.job)
    job = parse_job(raw, str(args.job))
    length_given = any(getattr(args, name, None) is not None for name in ("epochs", "rounds", "from_result"))
    for name, value in job_options(job, raw).items():
        _fill(args, name, value)
    if not length_given:
        args.epochs = str(job.algorithm.epochs)
    if all(getattr(args, name) is not None for name in DATA_FLAGS):
        return
    # A what-if on other data: other rows, features or non-zeros.
    reshaped = any(getattr(args, name) is not None for name in (*DATA_FLAGS, *SPARSITY_FLAGS))
    found = manifest_options(job)
    if found.pop("sparse"):
        args.sparse = True  # CSR shards: a step priced by their non-zeros
    if reshaped:  # the shards' bytes are of the rows and features the manifest counts, not these
        del found["dataset_bytes"]
    if any(getattr(args, name) is not None for name in SPARSITY_FLAGS):
        found.pop("density", None)  # the user's non-zeros, not the manifest's
    for name, figure in found.items():
        _fill(args, name, figure)
