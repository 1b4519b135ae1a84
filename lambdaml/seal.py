"""Values bound to their place: every value on a channel carries a tag of the key it was written under.

The codec's checksum says a value is intact, not that it belongs where it was found. A value
copied to another round, rank, chunk, attempt or job (a replay, a stale key, a bug) would
decode cleanly and train on. So a sealed value starts with a tag of its full key, and
opening it under any other key is refused.

Two strengths:

- bound (no secret): the tag is a SHA-256 of the key. It catches every misplaced value,
  but a party that can write the store can compute it;
- MAC (a per-job secret, generated at start, carried in the invocation event and never
  written to a store): the tag is an HMAC-SHA256 over the key and the value, so such a party
  can neither move nor forge a value. SHA-256 is used because it runs on the CPU's SHA
  instructions, several times faster than blake2b.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

from lambdaml.buffers import Buffers, Value, as_buffers
from lambdaml.errors import CodecError

MAGIC = b"LMLS"
VERSION = 1
_BOUND, _MAC = 0, 1
_HEADER = struct.Struct("<4sBB2x")  # magic, version, mode; 8 bytes, so the value stays 8-byte aligned
TAG_BYTES = 16  # 128 bits of SHA-256 / HMAC-SHA256
OVERHEAD = _HEADER.size + TAG_BYTES
SECRET_BYTES = 32


def new_secret() -> bytes:
    """A fresh per-job MAC key."""
    return secrets.token_bytes(SECRET_BYTES)


class Sealer:
    """Seals values under their key and opens them only under the same key (and secret)."""

    def __init__(self, secret: bytes | None = None) -> None:
        if secret is not None and len(secret) < 16:
            raise ValueError("a MAC secret needs at least 16 bytes")
        self._secret = secret

    def _tag(self, key: str, data: Buffers) -> bytes:
        name = key.encode("utf-8")
        if self._secret is None:
            return hashlib.sha256(name).digest()[:TAG_BYTES]
        mac = hmac.new(self._secret, struct.pack("<Q", len(name)) + name, "sha256")
        for buffer in data:
            mac.update(buffer)
        return mac.digest()[:TAG_BYTES]

    def seal(self, key: str, data: bytes) -> bytes:
        return b"".join(self.seal_buffers(key, data))

    def seal_buffers(self, key: str, data: Value) -> Buffers:
        """``seal`` as the seal's prefix and the value's own buffers, uncopied."""
        buffers = as_buffers(data)
        mode = _BOUND if self._secret is None else _MAC
        return (_HEADER.pack(MAGIC, VERSION, mode) + self._tag(key, buffers), *buffers)

    def open(self, key: str, sealed: bytes) -> bytes:
        """The value written under ``key``; a value from anywhere else (or tampered with) is a CodecError."""
        return bytes(self.open_view(key, sealed))

    def open_view(self, key: str, sealed: bytes | memoryview) -> memoryview:
        """``open`` without copying the value out: a read-only view into ``sealed``.

        A collective reads megabytes a round and only decodes them: the copy ``open`` makes
        would be a noticeable share of a worker's CPU.
        """
        return self._opened(key, memoryview(sealed).toreadonly(), ())

    def open_placed(self, key: str, head: bytes | memoryview, rest: memoryview) -> memoryview:
        """``open_view`` of a value read in two places: ``head``, its first bytes, and ``rest``, the
        others (read straight into where they are used). The seal is checked over both; the
        opened head comes back."""
        return self._opened(key, memoryview(head).toreadonly(), (rest,))

    def _opened(self, key: str, view: memoryview, rest: tuple[memoryview, ...]) -> memoryview:
        if len(view) < OVERHEAD:
            raise CodecError(
                f"{key} holds {len(view) + sum(r.nbytes for r in rest)} bytes, too short for a sealed value"
            )
        magic, version, mode = _HEADER.unpack_from(view)
        if magic != MAGIC or version != VERSION:
            raise CodecError(f"{key} holds a value that was not written by this version of LambdaML")
        expected = _BOUND if self._secret is None else _MAC
        if mode != expected:
            kinds = ("bound to its key only", "authenticated with the job's key")
            raise CodecError(f"{key} holds a value {kinds[mode == _MAC]}, but this job's values are {kinds[expected]}")
        data = view[OVERHEAD:]
        if not hmac.compare_digest(bytes(view[_HEADER.size : OVERHEAD]), self._tag(key, (data, *rest))):
            if self._secret is None:
                raise CodecError(
                    f"{key} holds a value written under another key (replayed from another round or rank?)"
                )
            raise CodecError(f"{key} holds a value that fails the job's MAC: written elsewhere or altered")
        return data
