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
#
# A dataset is immutable versions under one name; ``current.json`` names the version in use.
# ``data prepare`` writes a whole new version first and moves the pointer last, so a reader
# never sees shards of two versions, and an interrupted prepare leaves the old one current.


#: Where every dataset lives in the data bucket.
DATASETS_PREFIX = "datasets/"


def dataset_prefix(dataset: str) -> str:
    return f"{DATASETS_PREFIX}{check_name(dataset, 'dataset name')}/"


def dataset_of(key: str) -> str | None:
    """The dataset a key under ``datasets/`` belongs to, or None for any other key."""
    name, sep, _ = key.removeprefix(DATASETS_PREFIX).partition("/")
    return name if key.startswith(DATASETS_PREFIX) and sep and NAME_PATTERN.fullmatch(name) else None


def dataset_current(dataset: str) -> str:
    """The pointer to the dataset's current version."""
    return dataset_prefix(dataset) + "current.json"


def dataset_versions_prefix(dataset: str) -> str:
    return dataset_prefix(dataset) + "v/"


def dataset_version_prefix(dataset: str, version: str) -> str:
    return dataset_versions_prefix(dataset) + f"{check_name(version, 'dataset version')}/"


def dataset_manifest(dataset: str, version: str) -> str:
    return dataset_version_prefix(dataset, version) + "manifest.json"


def dataset_shard(dataset: str, version: str, index: int) -> str:
    return dataset_version_prefix(dataset, version) + f"shards/{index:05d}"


def dataset_test(dataset: str, version: str) -> str:
    return dataset_version_prefix(dataset, version) + "test"


def dataset_lease(dataset: str, version: str) -> str:
    """Held while a prepare writes ``version``: another prepare's prune leaves the version alone."""
    return dataset_version_prefix(dataset, version) + "writing.json"


def legacy_dataset_manifest(dataset: str) -> str:
    """Where datasets prepared before versions kept their manifest (read only to say so)."""
    return dataset_prefix(dataset) + "manifest.json"


# --- job records and results (in the data bucket) ----------------------------------
#
# A job id is claimed once (its spec is written with a conditional put); each start or
# resume of it is an attempt, claimed the same way. Checkpoints, heartbeats, reports, the
# cancel marker and every channel key belong to one attempt, so nothing of an earlier run
# is ever read into a later one except a checkpoint that ``--resume`` names on purpose.


#: Where every job's records live in the data bucket.
JOBS_PREFIX = "jobs/"


def job_prefix(job_id: str) -> str:
    return f"{JOBS_PREFIX}{check_name(job_id, 'job id')}/"


def job_spec(job_id: str) -> str:
    """The job's claim: its spec, written once."""
    return job_prefix(job_id) + "spec.json"


def job_result(job_id: str) -> str:
    return job_prefix(job_id) + "result.json"


def job_model(job_id: str) -> str:
    return job_prefix(job_id) + "model"


def job_model_card(job_id: str) -> str:
    """What the model is (its kind, shape, classes, format version) and its bundle's hash."""
    return job_prefix(job_id) + "model.json"


def job_of_model(key: str) -> str | None:
    """The job whose model bundle ``key`` is (``jobs/ID/model``), or None for any other key."""
    job_id, _, rest = key.removeprefix(JOBS_PREFIX).partition("/")
    if not key.startswith(JOBS_PREFIX) or rest != "model" or not NAME_PATTERN.fullmatch(job_id):
        return None
    return job_id


def job_status(job_id: str) -> str:
    """The job's state as the driver, the coordinator and the workers record it (running, failed, ...)."""
    return job_prefix(job_id) + "status.json"


def job_of_status(key: str) -> str | None:
    """The job id whose state record ``key`` is, or None for any other key."""
    job_id, _, rest = key.removeprefix(JOBS_PREFIX).partition("/")
    if not key.startswith(JOBS_PREFIX) or rest != "status.json" or not NAME_PATTERN.fullmatch(job_id):
        return None
    return job_id


def _attempt(attempt: int) -> str:
    if not isinstance(attempt, int) or isinstance(attempt, bool) or not 1 <= attempt <= 9999:
        raise ConfigError(f"invalid attempt number {brief(attempt)}: 1 to 9999")
    return f"a{attempt:04d}"


def job_attempt(job_id: str, attempt: int) -> str:
    """The claim of one attempt (written once): what it runs on and where it resumes from."""
    return job_prefix(job_id) + f"attempts/{_attempt(attempt)}.json"


def job_attempt_ended(job_id: str, attempt: int) -> str:
    """How one attempt ended, written once: whoever writes it first (the finish, a cancel) decides."""
    return job_prefix(job_id) + f"attempts/{_attempt(attempt)}.ended"


def attempt_prefix(job_id: str, attempt: int) -> str:
    return job_prefix(job_id) + _attempt(attempt) + "/"


_ATTEMPT_KEY = re.compile(r"jobs/([A-Za-z0-9][A-Za-z0-9._-]{0,63})/a\d{4}/.+")


def job_of_attempt_key(key: str) -> str | None:
    """The job whose attempt wrote ``key`` (a checkpoint, heartbeat, report, cancel marker), or None."""
    match = _ATTEMPT_KEY.fullmatch(key)
    return match.group(1) if match else None


def job_cancel(job_id: str, attempt: int) -> str:
    return attempt_prefix(job_id, attempt) + "cancel"


#: Checkpoint slots per rank: the newest two periodic ones (so every rank has the round the
#: slowest rank reached) and the one written just before a continuation.
CHECKPOINT_SLOTS = ("s0", "s1", "cont")


def worker_checkpoint(job_id: str, attempt: int, rank: int, slot: str) -> str:
    if slot not in CHECKPOINT_SLOTS:
        raise ValueError(f"unknown checkpoint slot {slot!r}")
    return attempt_prefix(job_id, attempt) + f"checkpoints/p{rank:05d}.{slot}"


def worker_heartbeat(job_id: str, attempt: int, rank: int) -> str:
    return attempt_prefix(job_id, attempt) + f"heartbeats/p{rank:05d}.json"


def worker_report(job_id: str, attempt: int, rank: int) -> str:
    return attempt_prefix(job_id, attempt) + f"reports/p{rank:05d}.json"


def iaas_prefix(job_id: str) -> str:
    """What an EC2 cluster's nodes fetch at boot: the package wheel and the bootstrap script."""
    return f"iaas/{check_name(job_id, 'job id')}/"


def iaas_file(job_id: str, filename: str) -> str:
    return iaas_prefix(job_id) + check_name(filename, "file name")


# --- communication (on the channel) ------------------------------------------------


def comm_job_prefix(job_id: str) -> str:
    """Every attempt's keys of a job."""
    return f"comm/{check_name(job_id, 'job id')}/"


def comm_prefix(job_id: str, attempt: int = 1) -> str:
    """One attempt's keys (the runtime always names its attempt; 1 serves tools and tests)."""
    return comm_job_prefix(job_id) + _attempt(attempt) + "/"


def round_prefix(job_id: str, round_: int, attempt: int = 1) -> str:
    return comm_prefix(job_id, attempt) + f"r{round_:09d}/"


@dataclass(frozen=True)
class CommKey:
    """A parsed communication key: who wrote which piece of which round of which attempt."""

    job_id: str
    round: int
    tag: str
    chunk: int | None  # owner of the piece under ScatterReduce; None for whole vectors
    rank: int | None  # writer; None for the merged value
    attempt: int = 1


def comm_key(
    job_id: str, round_: int, tag: str, *, rank: int | None, chunk: int | None = None, attempt: int = 1
) -> str:
    """Key of a worker's contribution (``rank``) or of the merged value (``rank=None``)."""
    key = round_prefix(job_id, round_, attempt) + check_name(tag, "tag") + "/"
    if chunk is not None:
        key += f"c{chunk:05d}/"
    return key + ("m" if rank is None else f"p{rank:05d}")


_COMM_RE = re.compile(
    r"^comm/(?P<job>[^/]+)/a(?P<attempt>\d{4})/r(?P<round>\d{9})/(?P<tag>[^/]+)/"
    r"(?:c(?P<chunk>\d{5})/)?(?:p(?P<rank>\d{5})|m)$"
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
        attempt=int(match.group("attempt")),
    )


def barrier_key(job_id: str, name: str, rank: int, attempt: int = 1) -> str:
    return comm_prefix(job_id, attempt) + f"barrier/{check_name(name, 'barrier name')}/p{rank:05d}"


def link_endpoints_key(job_id: str, rank: int, attempt: int = 1) -> str:
    """Where rank ``rank`` of a direct job publishes the endpoints its peers connect to."""
    return comm_prefix(job_id, attempt) + f"links/p{rank:05d}"


def link_goodbye_key(job_id: str, rank: int, attempt: int = 1) -> str:
    """The key of the last frame rank ``rank`` sends on its links: it has sent all it will."""
    return comm_prefix(job_id, attempt) + f"links/bye/p{rank:05d}"


def trial_key(job_id: str, rank: int, attempt: int = 1) -> str:
    """Rank ``rank``'s timings of the patterns its attempt tried (``sync.pattern: auto``)."""
    return comm_prefix(job_id, attempt) + f"trial/p{rank:05d}"


# --- asynchronous updates (ASP/SSP) ------------------------------------------------


def asp_prefix(job_id: str, attempt: int = 1) -> str:
    return comm_prefix(job_id, attempt) + "asp/"


def asp_rank_update(job_id: str, rank: int, seq: int, attempt: int = 1) -> str:
    """The ``seq``-th update of one rank (every channel: per-writer numbers leave no holes)."""
    return asp_prefix(job_id, attempt) + f"p{rank:05d}/s{seq:012d}"


def asp_cursor(job_id: str, rank: int, attempt: int = 1) -> str:
    """How far a rank has read the updates, so that fully read ones can be deleted."""
    return asp_prefix(job_id, attempt) + f"cursor/p{rank:05d}"


def asp_done(job_id: str, rank: int, attempt: int = 1) -> str:
    return asp_prefix(job_id, attempt) + f"done/p{rank:05d}"


# --- chunked values (any store) ----------------------------------------------------


def chunk_part(key: str, index: int) -> str:
    return f"{key}{CHUNK_MARK}{index:05d}"


def chunk_parts_prefix(key: str) -> str:
    return key + CHUNK_MARK


def is_chunk_part(key: str) -> bool:
    return CHUNK_MARK in key


# --- S3 URIs ---------------------------------------------------------------------


S3_SCHEME = "s3://"


def is_s3_uri(text: str) -> bool:
    return text.startswith(S3_SCHEME)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/path/key`` -> ``("bucket", "path/key")``; a URI without both is a ConfigError."""
    bucket, _, key = uri.removeprefix(S3_SCHEME).partition("/")
    valid_bucket = re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket)
    if not is_s3_uri(uri) or not valid_bucket or not key or key.endswith("/"):
        raise ConfigError(f"{brief(uri)} is not an S3 object: write s3://BUCKET/KEY")
    return bucket, key
