"""The challenge-response that admits a link: both ends prove they hold the job's channel secret.

It is symmetric, so it works on a socket whichever end connected (a simultaneous open has two):
each end sends a hello, ``LMLH1``, its rank and a fresh 16-byte nonce; then each sends
HMAC-SHA256(secret, "lambdaml-link-v1" | job | attempt | sender rank | receiver rank | the lower
rank's nonce | the higher rank's nonce) and checks the other's. The MAC binds the link to the job,
its attempt and both ranks, and the fresh nonces make an answer useless on any other link. No
message carries secret material.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import time
from dataclasses import dataclass

from lambdaml.errors import ChannelError

HELLO_MAGIC = b"LMLH1"
CONTEXT = b"lambdaml-link-v1"
NONCE_BYTES = 16
MAC_BYTES = 32
_HELLO = struct.Struct(f">{len(HELLO_MAGIC)}sI{NONCE_BYTES}s")


class LinkRefused(ChannelError):
    """A link's handshake failed: the other end is not a peer of this job, attempt and world."""


@dataclass(frozen=True)
class LinkAuth:
    """What a link is bound to: the job's channel secret, the job, its attempt and this worker's rank."""

    secret: bytes
    job_id: str
    attempt: int
    rank: int

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("a link needs the job's channel secret; it is empty")
        if not 0 <= self.rank < 2**32 or not 0 <= self.attempt < 2**63:
            raise ValueError(f"rank {self.rank} or attempt {self.attempt} is out of range")

    def __repr__(self) -> str:  # never print the secret
        return f"LinkAuth(job_id={self.job_id!r}, attempt={self.attempt}, rank={self.rank})"

    def mac(self, sender: int, receiver: int, nonces: dict[int, bytes]) -> bytes:
        job = self.job_id.encode()
        low, high = sorted((sender, receiver))
        message = b"".join(
            (
                CONTEXT,
                struct.pack(">I", len(job)),
                job,
                struct.pack(">QII", self.attempt, sender, receiver),
                nonces[low],
                nonces[high],
            )
        )
        return hmac.new(self.secret, message, hashlib.sha256).digest()


def _recv_exactly(sock: socket.socket, size: int, deadline: float, what: str) -> bytes:
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LinkRefused(f"link handshake timed out waiting for the peer's {what}")
        sock.settimeout(left)
        try:
            chunk = sock.recv(size - len(data))
        except TimeoutError:
            raise LinkRefused(f"link handshake timed out waiting for the peer's {what}") from None
        except OSError as exc:
            raise LinkRefused(f"link handshake failed reading the peer's {what}: {exc.strerror or exc}") from None
        if not chunk:
            raise LinkRefused(f"link closed by the peer during the handshake (before its {what})")
        data += chunk
    return bytes(data)


def _send(sock: socket.socket, data: bytes, deadline: float, what: str) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise LinkRefused(f"link handshake timed out sending {what}")
    sock.settimeout(left)
    try:
        sock.sendall(data)
    except TimeoutError:
        raise LinkRefused(f"link handshake timed out sending {what}") from None
    except OSError as exc:
        raise LinkRefused(f"link handshake failed sending {what}: {exc.strerror or exc}") from None


def authenticate(sock: socket.socket, auth: LinkAuth, world: int, timeout_s: float) -> int:
    """The other end's rank once it proved it is a peer of this job; LinkRefused otherwise.

    Every read and write is bounded by ``timeout_s`` in all. The socket is left with a timeout:
    the caller sets the one it wants.
    """
    deadline = time.monotonic() + timeout_s
    nonce = os.urandom(NONCE_BYTES)
    _send(sock, _HELLO.pack(HELLO_MAGIC, auth.rank, nonce), deadline, "hello")
    magic, peer, peer_nonce = _HELLO.unpack(_recv_exactly(sock, _HELLO.size, deadline, "hello"))
    if magic != HELLO_MAGIC:
        raise LinkRefused("link refused: the peer's hello is not a lambdaml link hello")
    if not 0 <= peer < world:
        raise LinkRefused(f"link refused: the peer claims rank {peer}, outside a world of {world}")
    if peer == auth.rank:
        raise LinkRefused(f"link refused: the peer claims rank {peer}, which is this worker's own")
    if peer_nonce == nonce:  # our own hello reflected back at us
        raise LinkRefused("link refused: the peer echoed this worker's nonce")
    nonces = {auth.rank: nonce, peer: peer_nonce}
    _send(sock, auth.mac(auth.rank, peer, nonces), deadline, "answer")
    answer = _recv_exactly(sock, MAC_BYTES, deadline, "answer")
    if not hmac.compare_digest(answer, auth.mac(peer, auth.rank, nonces)):
        raise LinkRefused(f"link refused: rank {peer}'s answer does not verify (another secret, job or attempt)")
    return int(peer)
