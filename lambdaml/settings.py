"""Environment variable names, in one place, and what the stack's functions read from them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Credentials used when talking to a loopback endpoint (moto) and none are configured.
LOCAL_ACCESS_KEY = "testing"
LOCAL_SECRET_KEY = "testing"

ENV_REDIS_PASSWORD = "LAMBDAML_REDIS_PASSWORD"
ENV_TORCH_THREADS = "LAMBDAML_TORCH_THREADS"  # torch threads per worker process (unset: 1)
#: This machine's lambdaml folder (default: ~/.lambdaml): local stacks' records and logs, profiles,
#: clusters, and the jobs run here with their workers' lines (``jobs/``, ``runtime.machine_jobs``).
ENV_HOME = "LAMBDAML_HOME"

# Set on the stack's functions by template.yaml (a test holds the two to each other).
ENV_DATA_BUCKET = "LAMBDAML_DATA_BUCKET"
ENV_COMM_BUCKET = "LAMBDAML_COMM_BUCKET"
ENV_CHANNEL_TABLE = "LAMBDAML_CHANNEL_TABLE"
ENV_JOBS_TABLE = "LAMBDAML_JOBS_TABLE"  # the job registry's table (``runtime.registry``)
ENV_CACHE_KIND = "LAMBDAML_CACHE_KIND"
ENV_CACHE_HOST = "LAMBDAML_CACHE_HOST"
ENV_CACHE_PORT = "LAMBDAML_CACHE_PORT"
ENV_CACHE_TLS = "LAMBDAML_CACHE_TLS"
ENV_REFLECTOR = "LAMBDAML_REFLECTOR"  # host:port of the direct channel's rendezvous service, if deployed
ENV_WORKER_FUNCTION = "LAMBDAML_WORKER_FUNCTION"  # the coordinator's: the zip worker
ENV_TORCH_WORKER_FUNCTION = "LAMBDAML_TORCH_WORKER_FUNCTION"  # the coordinator's: the image worker, if deployed
ENV_PROFILE = "LAMBDAML_PROFILE"  # a calibrated profile that ``sync.pattern: auto`` predicts with (default: AWS's)
ENV_ARCHITECTURE = "LAMBDAML_ARCHITECTURE"  # x86_64 or arm64: which GB-second price the workers bill at


def home() -> Path:
    """``LAMBDAML_HOME``, or ``~/.lambdaml``."""
    return Path(os.environ.get(ENV_HOME) or Path.home() / ".lambdaml")


def get(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def _set(name: str) -> str | None:
    return os.environ.get(name) or None  # the template writes "" for what a stack does not have


@dataclass(frozen=True)
class StackEnvironment:
    """What a stack's function knows of its stack; None where unset (tests, tools, a stack without it)."""

    data_bucket: str | None
    comm_bucket: str | None
    channel_table: str | None
    cache_kind: str | None  # the channel kind its cache serves, or None: no cache
    cache_host: str | None
    cache_port: int | None
    cache_tls: bool
    worker_function: str | None
    torch_worker_function: str | None
    architecture: str = "x86_64"
    jobs_table: str | None = None
    reflector: str | None = None  # the direct channel's rendezvous service ("host:port"), or None

    @property
    def in_a_stack(self) -> bool:
        return self.data_bucket is not None

    def output(self, name: str) -> str | None:
        """One of the stack's outputs that its functions get in their environment too (as the
        template sets them): a channel kind's description names what a stack provides by output."""
        return {
            "DataBucketName": self.data_bucket,
            "CommBucketName": self.comm_bucket,
            "ChannelTableName": self.channel_table,
            "JobsTableName": self.jobs_table,
            "ReflectorEndpoint": self.reflector,
        }.get(name)


def stack_environment() -> StackEnvironment:
    port = _set(ENV_CACHE_PORT)
    return StackEnvironment(
        data_bucket=_set(ENV_DATA_BUCKET),
        comm_bucket=_set(ENV_COMM_BUCKET),
        channel_table=_set(ENV_CHANNEL_TABLE),
        cache_kind=_set(ENV_CACHE_KIND),
        cache_host=_set(ENV_CACHE_HOST),
        cache_port=int(port) if port and port.isdigit() else None,
        cache_tls=(_set(ENV_CACHE_TLS) or "").lower() == "true",
        worker_function=_set(ENV_WORKER_FUNCTION),
        torch_worker_function=_set(ENV_TORCH_WORKER_FUNCTION),
        architecture=_set(ENV_ARCHITECTURE) or "x86_64",
        jobs_table=_set(ENV_JOBS_TABLE),
        reflector=_set(ENV_REFLECTOR),
    )
