"""What a channel moved: requests, bytes and time spent waiting on others, for cost and benchmarks."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class ChannelStats:
    """Requests and bytes this process moved through a channel (for cost and benchmarks)."""

    puts: int = 0
    gets: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    wait_s: float = 0.0  # time in wait_for before the poll that found the last key: waiting on others
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    @property
    def requests(self) -> int:
        return self.puts + self.gets + self.lists + self.deletes

    def as_dict(self) -> dict[str, int]:
        return {
            "puts": self.puts,
            "gets": self.gets,
            "lists": self.lists,
            "deletes": self.deletes,
            "requests": self.requests,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }

    def snapshot(self) -> dict[str, float]:
        return {**self.as_dict(), "wait_s": self.wait_s}
