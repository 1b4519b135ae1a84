"""A value on its way to a store: bytes, or several buffers that go out one after another unjoined.

A collective's piece is a tensor header and a view of the vector, sealed behind a prefix and
cut into parts at the store's item limit. Joined at each step, every byte would be copied
three times before it is sent, a large share of a worker's CPU. As buffers, a
channel that sends a list of buffers (Memcached's ``sendmsg``) sends them from the vector's own
memory; any other joins them once, where it sends.

The way back is a ``Target``: a reader that knows a value's length and where its bytes are used
(a merged chunk's slice of the output vector) has them read there, only the header held apart.
Memcached reads a chunked value's parts straight into it; any other channel copies the value in.
"""

from __future__ import annotations

from dataclasses import dataclass

Buffer = bytes | memoryview  # a memoryview here is always of bytes (format "B")
Buffers = tuple[Buffer, ...]
Value = bytes | Buffers
#: Where a read value goes: its first ``head`` bytes held apart, the rest into ``body`` (writable).
Target = tuple[int, memoryview]


@dataclass(frozen=True)
class Placed:
    """A value read into its ``Target``: its first bytes, held apart (the rest is in the target's body)."""

    head: bytes | memoryview


def as_buffers(value: Value) -> Buffers:
    return value if isinstance(value, tuple) else (value,)


def _length(buffer: Buffer) -> int:
    return len(buffer) if isinstance(buffer, bytes) else memoryview(buffer).nbytes


def size(value: Value) -> int:
    """The value's length in bytes."""
    return sum(_length(b) for b in as_buffers(value))


def joined(value: Value) -> bytes:
    """The value as one bytes object (no copy if it is one already)."""
    if isinstance(value, bytes):
        return value
    return b"".join(as_buffers(value))


def cut(value: Value, start: int, stop: int) -> Buffers:
    """Bytes ``start:stop`` of the value, as views of its buffers (nothing copied)."""
    out: list[Buffer] = []
    offset = 0
    for buffer in as_buffers(value):
        length = _length(buffer)
        lo, hi = max(start - offset, 0), min(stop - offset, length)
        if lo < hi:
            out.append(buffer if (lo, hi) == (0, length) else memoryview(buffer)[lo:hi])
        offset += length
        if offset >= stop:
            break
    return tuple(out)
