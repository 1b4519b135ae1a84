"""The account's concurrent executions, counted as Lambda counts them.

A function with reserved concurrency has that many executions to itself and no more; every
other function shares what the reservations leave of the account's limit. Only a busy
sandbox is an execution: an idle, warm one counts for nothing. One condition guards the
counts and every pool's sandboxes, so a sandbox freed in one function wakes a waiter of
another that shares the unreserved part.
"""

from __future__ import annotations

import threading

from lambdaml.errors import ConfigError


class ConcurrencyLimitError(ConfigError):
    """A reservation the account cannot grant (AWS: InvalidParameterValueException)."""


class Concurrency:
    """Reservations and busy executions per function, against the account's limit."""

    def __init__(self, limit: int, unreserved_minimum: int = 0) -> None:
        if limit < 1:
            raise ConfigError("the account's concurrency limit must be >= 1")
        if not 0 <= unreserved_minimum <= limit:
            raise ConfigError("the unreserved minimum must be in [0, the account's limit]")
        self.limit = limit
        self.unreserved_minimum = unreserved_minimum
        self.cond = threading.Condition()
        self._reserved: dict[str, int] = {}
        self._busy: dict[str, int] = {}

    def reserved(self, function: str) -> int | None:
        with self.cond:
            return self._reserved.get(function)

    def unreserved(self) -> int:
        """What the functions without a reservation share (AWS's UnreservedConcurrentExecutions)."""
        with self.cond:
            return self.limit - sum(self._reserved.values())

    def reserve(self, function: str, executions: int | None) -> None:
        """Set (or, with None, remove) a function's reservation, as PutFunctionConcurrency does."""
        with self.cond:
            others = sum(v for name, v in self._reserved.items() if name != function)
            if executions is not None:
                if executions < 0:
                    raise ConcurrencyLimitError("ReservedConcurrentExecutions must be >= 0")
                if self.limit - others - executions < self.unreserved_minimum:
                    raise ConcurrencyLimitError(
                        "Specified ReservedConcurrentExecutions for function decreases account's "
                        f"UnreservedConcurrentExecution below its minimum value of [{self.unreserved_minimum}]."
                    )
                self._reserved[function] = executions
            else:
                self._reserved.pop(function, None)
            self.cond.notify_all()

    def take(self, function: str) -> bool:
        """One more execution of ``function``, if its reservation or the shared part has room; hold ``cond``."""
        busy = self._busy.get(function, 0)
        reserved = self._reserved.get(function)
        if reserved is not None:
            room = busy < reserved
        else:
            shared = sum(n for name, n in self._busy.items() if name not in self._reserved)
            room = shared < self.limit - sum(self._reserved.values())
        if room:
            self._busy[function] = busy + 1
        return room

    def give(self, function: str) -> None:
        """An execution of ``function`` ended; hold ``cond``."""
        self._busy[function] = max(0, self._busy.get(function, 0) - 1)
        self.cond.notify_all()
