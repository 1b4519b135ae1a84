"""Environment variable names, in one place."""

from __future__ import annotations

import os
from pathlib import Path

# Credentials used when talking to a loopback endpoint (moto) and none are configured.
LOCAL_ACCESS_KEY = "testing"
LOCAL_SECRET_KEY = "testing"

ENV_REDIS_PASSWORD = "LAMBDAML_REDIS_PASSWORD"
ENV_LOG_LEVEL = "LAMBDAML_LOG_LEVEL"
ENV_RESULTS_DIR = "LAMBDAML_RESULTS_DIR"
ENV_WORKER_FUNCTION = "LAMBDAML_WORKER_FUNCTION"  # set on the coordinator by the template
ENV_TORCH_THREADS = "LAMBDAML_TORCH_THREADS"  # torch threads per worker process (unset: 1)


ENV_HOME = "LAMBDAML_HOME"  # local stacks' records and logs (default: ~/.lambdaml)


def home() -> Path:
    return Path(os.environ.get(ENV_HOME) or Path.home() / ".lambdaml")


def get(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)
