"""A rank's links to its peers: sealed frames out on one writer thread per link, in on one reader
thread per link into a mailbox, and a link dropped for good at its first fault.

A frame is a key and a value sealed under it, as a value on a store is (``lambdaml.seal``): the
reader checks the seal, and the communicator's ``admit`` whether the key is one this peer may
send now (its own rank, this job and attempt, no round already done). A frame that fails either
drops the link, as a broken connection does: what the pair still has to exchange goes through
the store (``on_drop``), so a forger or a replay costs speed, never the model.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from lambdaml.buffers import Buffers
from lambdaml.errors import CodecError, SyncTimeout
from lambdaml.seal import Sealer

log = logging.getLogger(__name__)

_FRAME = struct.Struct("<4sHQ")  # magic, key length, sealed value length
_MAGIC = b"LMLF"
_MAX_KEY = 1024
_STOP = None  # a writer's queue ends with it


@dataclass
class LinkStats:
    """What one rank's links carried."""

    frames_sent: int = 0
    frames_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    frames_refused: int = 0


def _send_all(sock: socket.socket, buffers: list[memoryview]) -> int:
    """Write every buffer, in order, in as few system calls as the kernel takes (gather writes)."""
    total = sum(b.nbytes for b in buffers)
    while buffers:
        sent = sock.sendmsg(buffers)
        while buffers and sent >= buffers[0].nbytes:
            sent -= buffers[0].nbytes
            buffers.pop(0)
        if sent:
            buffers[0] = buffers[0][sent:]
    return total


def _recv_exact(sock: socket.socket, into: memoryview) -> None:
    """Fill ``into`` from the socket (zero-copy); EOF before it is full is a ConnectionError."""
    got = 0
    while got < into.nbytes:
        n = sock.recv_into(into[got:])
        if n == 0:
            raise ConnectionError("the peer closed the link")
        got += n


class Links:
    """The links of ``rank`` to the peers in ``sockets`` (connected and authenticated).

    ``admit(peer, key)``: None where ``peer`` may send a frame under ``key`` now, else why not.
    ``on_drop(peer, why)``: called once, on the thread that found the fault, when a link goes.
    ``goodbye(peer)``: the key of the frame ``peer`` ends with once it has sent all it will; the
    end of a link after it is no fault.
    """

    def __init__(
        self,
        sockets: Mapping[int, socket.socket],
        sealer: Sealer,
        *,
        admit: Callable[[int, str], str | None],
        on_drop: Callable[[int, str], None],
        goodbye: Callable[[int], str],
    ) -> None:
        self._sockets = dict(sockets)
        self._sealer = sealer
        self._admit = admit
        self._on_drop = on_drop
        self._goodbye = goodbye
        self._done: set[int] = set()  # peers that said goodbye
        self._cond = threading.Condition()
        self._mail: dict[str, memoryview] = {}
        self._up = set(self._sockets)
        self.stats = LinkStats()
        self._queues: dict[int, queue.SimpleQueue[tuple[str, Buffers] | None]] = {}
        self._threads: list[threading.Thread] = []
        for peer, sock in self._sockets.items():
            sock.settimeout(None)
            out: queue.SimpleQueue[tuple[str, Buffers] | None] = queue.SimpleQueue()
            self._queues[peer] = out
            for target, name in ((self._read, "in"), (self._write, "out")):
                thread = threading.Thread(target=target, args=(peer,), name=f"link-{name}-{peer}", daemon=True)
                self._threads.append(thread)
                thread.start()

    @property
    def peers(self) -> frozenset[int]:
        """The peers reached by a link at the start, whether or not it is still up."""
        return frozenset(self._sockets)

    def up(self, peer: int) -> bool:
        with self._cond:
            return peer in self._up

    def send(self, peer: int, key: str, value: Buffers) -> bool:
        """Queue ``value`` for ``peer`` under ``key``; False where its link is down (use the store)."""
        with self._cond:
            if peer not in self._up:
                return False
        self._queues[peer].put((key, value))
        return True

    def receive(self, peer: int, key: str, timeout_s: float) -> memoryview | None:
        """The opened value ``peer`` sent under ``key``; None where its link went down before it
        came (the store has it); SyncTimeout where the peer, still linked, sends nothing in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                value = self._mail.pop(key, None)
                if value is not None:
                    return value
                if peer not in self._up:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SyncTimeout(f"waited {timeout_s:g}s for {key} from rank {peer} over its link")
                self._cond.wait(left)

    def forget(self, prefix: str) -> None:
        """Drop delivered values nobody took, under ``prefix`` (a round that is over)."""
        with self._cond:
            for key in [k for k in self._mail if k.startswith(prefix)]:
                del self._mail[key]

    def drop(self, peer: int, why: str) -> None:
        """Take the link to ``peer`` down for good (once), and tell the communicator."""
        with self._cond:
            if peer not in self._up:
                return
            self._up.discard(peer)
            self._cond.notify_all()
            finished = peer in self._done
        self._queues[peer].put(_STOP)
        with contextlib.suppress(OSError):
            self._sockets[peer].shutdown(socket.SHUT_RDWR)
        if not finished:
            self._on_drop(peer, why)

    def close(self, goodbye: str | None = None, timeout_s: float = 30.0) -> None:
        """Send what is queued, then close every link.

        ``goodbye``: this rank has sent all it ever will (the job's end), and says so under this
        key, so its peers take the end of the link as no fault. Without it (a continuation, a
        failure) they drop the link and go to the store for what is left.
        """
        with self._cond:
            open_ = [peer for peer in self._sockets if peer in self._up]
            self._up.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + timeout_s
        for peer in open_:
            if goodbye is not None:
                self._queues[peer].put((goodbye, (b"",)))
            self._queues[peer].put(_STOP)
        for thread in self._threads:
            if thread.name.startswith("link-out-"):  # queued frames leave before the links close
                thread.join(max(0.0, deadline - time.monotonic()))
        for sock in self._sockets.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)  # the end of the stream, after all that was sent
        if goodbye is not None:
            # Until every peer ends its side too, keep reading: a socket closed with bytes unread
            # resets the connection, and a reset can lose what this rank sent last.
            for thread in self._threads:
                if thread.name.startswith("link-in-"):
                    thread.join(max(0.0, deadline - time.monotonic()))
        for sock in self._sockets.values():
            sock.close()

    # ---- the threads -------------------------------------------------------------------

    def _write(self, peer: int) -> None:
        sock, out = self._sockets[peer], self._queues[peer]
        while (item := out.get()) is not None:
            key, value = item
            name = key.encode("utf-8")
            sealed = self._sealer.seal_buffers(key, value)
            length = sum(memoryview(b).nbytes for b in sealed)
            try:
                sent = _send_all(
                    sock, [memoryview(_FRAME.pack(_MAGIC, len(name), length)), memoryview(name),
                           *(memoryview(b).cast("B") for b in sealed)]
                )  # fmt: skip
            except OSError as exc:
                self.drop(peer, f"sending failed: {exc}")
                return
            with self._cond:
                self.stats.frames_sent += 1
                self.stats.bytes_sent += sent

    def _read(self, peer: int) -> None:
        sock = self._sockets[peer]
        head = bytearray(_FRAME.size)
        try:
            while True:
                _recv_exact(sock, memoryview(head))
                magic, key_length, length = _FRAME.unpack(head)
                if magic != _MAGIC or key_length > _MAX_KEY:
                    raise CodecError("a frame that is not LambdaML's")
                name = bytearray(key_length)
                _recv_exact(sock, memoryview(name))
                body = np.empty(length, np.uint8).data  # filled by the socket: no zeroing first
                _recv_exact(sock, body)
                key = name.decode("utf-8", "replace")
                value = self._sealer.open_view(key, body)  # CodecError: forged, altered or moved
                if key == self._goodbye(peer):
                    with self._cond:
                        self._done.add(peer)
                    continue
                refused = self._admit(peer, key)
                if refused is not None:
                    raise CodecError(f"rank {peer} sent {key}: {refused}")
                with self._cond:
                    self.stats.frames_received += 1
                    self.stats.bytes_received += _FRAME.size + key_length + length
                    self._mail[key] = value
                    self._cond.notify_all()
        except CodecError as exc:
            with self._cond:
                self.stats.frames_refused += 1
            log.warning("refused a frame from rank %d (%s): its link is dropped, the store carries the rest", peer, exc)
            self.drop(peer, f"a refused frame: {exc}")
        except (OSError, ConnectionError) as exc:
            self.drop(peer, str(exc) or type(exc).__name__)
