"""LambdaML: distributed ML training on serverless functions, compared honestly with IaaS.

The Python API (``lambdaml.train``, ``lambdaml.load_model``, ``TrainedModel``, ``JobSpec``) is
loaded on first use (PEP 562), so a Lambda worker importing ``lambdaml.runtime`` never loads the
driver, the backends or the exports' packages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_API = {
    "train": "lambdaml.api",
    "load_model": "lambdaml.api",
    "prepare_dataset": "lambdaml.api",
    "TrainedModel": "lambdaml.trained.model",
    "JobResult": "lambdaml.runtime.reports",
    "Result": "lambdaml.runtime.reports",
    "JobSpec": "lambdaml.config",
    "StorageSpec": "lambdaml.config",
    "LambdaMLError": "lambdaml.errors",
}

if TYPE_CHECKING:
    from lambdaml.api import load_model, prepare_dataset, train
    from lambdaml.config import JobSpec, StorageSpec
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime.reports import JobResult
    from lambdaml.runtime.reports import JobResult as Result
    from lambdaml.trained.model import TrainedModel


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'lambdaml' has no attribute {name!r}")
    return getattr(importlib.import_module(module), "JobResult" if name == "Result" else name)


__all__ = [
    "JobResult",
    "JobSpec",
    "LambdaMLError",
    "Result",
    "StorageSpec",
    "TrainedModel",
    "__version__",
    "load_model",
    "prepare_dataset",
    "train",
]
