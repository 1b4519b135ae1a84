"""Every storage key is built and parsed here, and nowhere else.

Keys are ``/``-separated paths whose components are validated names, so parsing never
splits on a character a user may put in a name (the original split on ``_``). Round and
rank numbers are zero-padded so that listings sort in round order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lambdaml.errors import ConfigError, brief

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Values too large for a backend's item limit are stored as parts under the logical key.
CHUNK_MARK = "~part/"


def check_name(name: str, what: str = "name") -> str:
    """Validate a job id, dataset name or tag: letters, digits, '.', '_' and '-', at most 64."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"invalid {what} {brief(name)}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


# --- datasets (in the data bucket) -------------------------------------------------


def dataset_prefix(dataset: str) -> str:
    return f"datasets/{check_name(dataset, 'dataset name')}/"


def dataset_manifest(dataset: str) -> str:
    return dataset_prefix(dataset) + "manifest.json"


def dataset_shard(dataset: str, index: int) -> str:
    return dataset_prefix(dataset) + f"shards/{index:05d}"


def dataset_test(dataset: str) -> str:
    return dataset_prefix(dataset) + "test"


# --- job records and results (in the data bucket) ----------------------------------


def job_prefix(job_id: str) -> str:
    return f"jobs/{check_name(job_id, 'job id')}/"


def job_spec(job_id: str) -> str:
    return job_prefix(job_id) + "spec.json"


def job_result(job_id: str) -> str:
    return job_prefix(job_id) + "result.json"


def job_model(job_id: str) -> str:
    return job_prefix(job_id) + "model"


def job_status(job_id: str) -> str:
    """The job's state as the coordinator and the workers record it (running, failed, ...)."""
    return job_prefix(job_id) + "status.json"


def job_cancel(job_id: str) -> str:
    return job_prefix(job_id) + "cancel"


def worker_checkpoint(job_id: str, rank: int) -> str:
    return job_prefix(job_id) + f"checkpoints/p{rank:05d}"


def worker_heartbeat(job_id: str, rank: int) -> str:
    return job_prefix(job_id) + f"heartbeats/p{rank:05d}.json"


def worker_report(job_id: str, rank: int) -> str:
    return job_prefix(job_id) + f"reports/p{rank:05d}.json"


def iaas_prefix(job_id: str) -> str:
    """What an EC2 cluster's nodes fetch at boot: the package wheel and the bootstrap script."""
    return f"iaas/{check_name(job_id, 'job id')}/"


def iaas_file(job_id: str, filename: str) -> str:
    return iaas_prefix(job_id) + check_name(filename, "file name")


# --- communication (on the channel) ------------------------------------------------


def comm_prefix(job_id: str) -> str:
    return f"comm/{check_name(job_id, 'job id')}/"


def round_prefix(job_id: str, round_: int) -> str:
    return comm_prefix(job_id) + f"r{round_:09d}/"


@dataclass(frozen=True)
class CommKey:
    """A parsed communication key: who wrote which piece of which round."""

    job_id: str
    round: int
    tag: str
    chunk: int | None  # owner of the piece under ScatterReduce; None for whole vectors
    rank: int | None  # writer; None for the merged value


def comm_key(job_id: str, round_: int, tag: str, *, rank: int | None, chunk: int | None = None) -> str:
    """Key of a worker's contribution (``rank``) or of the merged value (``rank=None``)."""
    key = round_prefix(job_id, round_) + check_name(tag, "tag") + "/"
    if chunk is not None:
        key += f"c{chunk:05d}/"
    return key + ("m" if rank is None else f"p{rank:05d}")


_COMM_RE = re.compile(
    r"^comm/(?P<job>[^/]+)/r(?P<round>\d{9})/(?P<tag>[^/]+)/(?:c(?P<chunk>\d{5})/)?(?:p(?P<rank>\d{5})|m)$"
)


def parse_comm_key(key: str) -> CommKey:
    match = _COMM_RE.match(key)
    if not match:
        raise ValueError(f"not a communication key: {key!r}")
    chunk, rank = match.group("chunk"), match.group("rank")
    return CommKey(
        job_id=match.group("job"),
        round=int(match.group("round")),
        tag=match.group("tag"),
        chunk=None if chunk is None else int(chunk),
        rank=None if rank is None else int(rank),
    )


def barrier_key(job_id: str, name: str, rank: int) -> str:
    return comm_prefix(job_id) + f"barrier/{check_name(name, 'barrier name')}/p{rank:05d}"


# --- asynchronous updates (ASP/SSP) ------------------------------------------------


def asp_prefix(job_id: str) -> str:
    return comm_prefix(job_id) + "asp/"


def asp_rank_update(job_id: str, rank: int, seq: int) -> str:
    """The ``seq``-th update of one rank (every channel: per-writer numbers leave no holes)."""
    return asp_prefix(job_id) + f"p{rank:05d}/s{seq:012d}"


def asp_cursor(job_id: str, rank: int) -> str:
    """How far a rank has read the updates, so that fully read ones can be deleted."""
    return asp_prefix(job_id) + f"cursor/p{rank:05d}"


def asp_done(job_id: str, rank: int) -> str:
    return asp_prefix(job_id) + f"done/p{rank:05d}"


# --- chunked values (any store) ----------------------------------------------------


def chunk_part(key: str, index: int) -> str:
    return f"{key}{CHUNK_MARK}{index:05d}"


def chunk_parts_prefix(key: str) -> str:
    return key + CHUNK_MARK


def is_chunk_part(key: str) -> bool:
    return CHUNK_MARK in key
