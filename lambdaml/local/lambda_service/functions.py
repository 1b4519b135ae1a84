"""The functions a local Lambda service knows, each with the pool of its sandboxes.

One lock guards both maps, so that replacing a function swaps its configuration and its
pool together; the Invoke API, execution, the reaper and the memory watcher look up here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable

from lambdaml.errors import ConfigError
from lambdaml.local.lambda_service.concurrency import Concurrency
from lambdaml.local.lambda_service.models import FunctionConfig, LambdaServiceError
from lambdaml.local.lambda_service.sandboxes import Pool


class Functions:
    """Function configurations by name and their pools, under the account's concurrency."""

    def __init__(self, concurrency: Concurrency) -> None:
        self.concurrency = concurrency
        self._lock = threading.RLock()
        self._functions: dict[str, FunctionConfig] = {}
        self._pools: dict[str, Pool] = {}

    def add_all(self, functions: Iterable[FunctionConfig]) -> None:
        """Register functions that may name each other as destinations (checked once all are in)."""
        pending = list(functions)
        with self._lock:
            for fn in pending:
                self._add(fn)
            for fn in pending:
                self._check_destination(fn)

    def _add(self, fn: FunctionConfig) -> None:
        self.concurrency.reserve(fn.name, fn.reserved_concurrency)
        self._functions[fn.name] = fn
        self._pools[fn.name] = Pool(fn, self.concurrency)

    def reserve(self, name: str, executions: int | None) -> FunctionConfig:
        """Set or remove a function's reserved concurrency; its warm sandboxes stay, as on AWS."""
        with self._lock:
            fn = dataclasses.replace(self._functions[name], reserved_concurrency=executions)
            self.concurrency.reserve(name, executions)
            self._functions[name] = fn
            self._pools[name].fn = fn
            return fn

    def _check_destination(self, fn: FunctionConfig) -> None:
        if isinstance(fn.on_failure, str) and fn.on_failure not in self._functions:
            raise ConfigError(f"function {fn.name!r}: on_failure names unknown function {fn.on_failure!r}")

    def __len__(self) -> int:
        return len(self._functions)

    def __getitem__(self, name: str) -> FunctionConfig:
        with self._lock:
            return self._functions[name]

    def get(self, name: str) -> FunctionConfig | None:
        with self._lock:
            return self._functions.get(name)

    def snapshot(self) -> dict[str, FunctionConfig]:
        with self._lock:
            return dict(self._functions)

    def pool(self, name: str) -> Pool:
        pool = self.find_pool(name)
        if pool is None:
            raise LambdaServiceError(f"no function named {name!r}")
        return pool

    def find_pool(self, name: str) -> Pool | None:
        with self._lock:
            return self._pools.get(name)

    def pools(self) -> list[Pool]:
        with self._lock:
            return list(self._pools.values())
