"""Memcached's text protocol on a pymemcache client's connection, from and into the caller's buffers.

pymemcache joins every value it sends into its command and every value it reads from 64 KB
reads: two copies of each byte each way, and a chunked value's parts were joined once more.
Here a ``set`` goes out with one ``sendmsg`` from the value's own buffers, and a ``get``
reads each value straight into the buffers its caller places it in (a chunked value's parts
into one buffer, each at its offset). These use pymemcache's private ``_connect``,
``_raise_errors`` and ``check_key`` of the pinned 4.0.0: tests exercise every path.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheUnexpectedCloseError, MemcacheUnknownError

from lambdaml.buffers import Value, as_buffers, size

_IOV_MAX = 1024  # buffers one sendmsg takes on Linux
_RECV = 64 * 1024  # a line's read; a value's own bytes are read into its buffers whole

#: Where a value of this key and length goes: buffers whose lengths add up to it, filled in order.
Placer = Callable[[str, int], Sequence[memoryview]]


def send_sets(client: Client, items: Sequence[tuple[str, Value]]) -> list[str]:
    """``set`` every item on the client's connection, sent with scatter-gather I/O from the values'
    own buffers; the keys not stored."""
    buffers: list[bytes | memoryview] = []
    for key, data in items:
        buffers.append(b"set %s 0 0 %d\r\n" % (client.check_key(key, client.key_prefix), size(data)))
        buffers += (*as_buffers(data), b"\r\n")
    sock = _connected(client)
    try:
        send_all(sock, buffers)
        refused, pending = [], bytearray()
        for key, _ in items:
            line = _line(sock, pending)
            client._raise_errors(line, b"set")
            if line == b"NOT_STORED":
                refused.append(key)
            elif line != b"STORED":
                raise MemcacheUnknownError(line[:32])
        return refused
    except BaseException:
        client.close()  # a reply may be left unread: the connection is of no further use
        raise


def get_into(client: Client, keys: Sequence[str], place: Placer) -> list[str]:
    """``get`` of ``keys`` (one command) on the client's connection, each value found read into
    the buffers ``place`` gives for it, in the order the server sends them (the keys' order);
    the keys found. An error raised by ``place`` closes the connection (its reply is unread)."""
    prefixed = [client.check_key(key, client.key_prefix) for key in keys]
    names = dict(zip(prefixed, keys, strict=True))
    sock = _connected(client)
    try:
        sock.sendall(b"get " + b" ".join(prefixed) + b"\r\n")
        pending, end = bytearray(), bytearray(2)
        found: list[str] = []
        while True:
            line = _line(sock, pending)
            client._raise_errors(line, b"get")
            if line == b"END":
                return found
            fields = line.split()  # VALUE <key> <flags> <bytes>
            if len(fields) != 4 or fields[0] != b"VALUE" or fields[1] not in names:
                raise MemcacheUnknownError(line[:32])
            key, length = names[fields[1]], int(fields[3])
            views = place(key, length)
            if sum(v.nbytes for v in views) != length:
                raise ValueError(f"{key}: buffers for {sum(v.nbytes for v in views)} bytes, the value has {length}")
            for view in (*views, memoryview(end)):
                _fill(sock, pending, view)
            if end != b"\r\n":
                raise MemcacheUnknownError(b"value not followed by CRLF")
            found.append(key)
    except BaseException:
        client.close()
        raise


def send_all(sock: socket.socket, buffers: list[bytes | memoryview]) -> None:
    """``sendall`` of several buffers without joining them; ``sendmsg`` may send only part of them."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    first = 0  # views before it are sent
    while first < len(views):
        sent = sock.sendmsg(views[first : first + _IOV_MAX])
        while first < len(views) and sent >= len(views[first]):
            sent -= len(views[first])
            first += 1
        if sent:
            views[first] = views[first][sent:]


def _connected(client: Client) -> socket.socket:
    if client.sock is None:
        client._connect()
    sock: socket.socket = client.sock
    return sock


def _line(sock: socket.socket, pending: bytearray) -> bytes:
    """The next line (without its CRLF), from what was read ahead and the socket."""
    searched = 0
    while (end := pending.find(b"\r\n", searched)) < 0:
        searched = max(len(pending) - 1, 0)
        data = sock.recv(_RECV)
        if not data:
            raise MemcacheUnexpectedCloseError()
        pending += data
    line = bytes(pending[:end])
    del pending[: end + 2]
    return line


def _fill(sock: socket.socket, pending: bytearray, view: memoryview) -> None:
    """Fill ``view``: first from what was read ahead, then straight from the socket."""
    taken = min(len(pending), view.nbytes)
    if taken:
        view[:taken] = pending[:taken]
        del pending[:taken]
    while taken < view.nbytes:
        received = sock.recv_into(view[taken:])
        if not received:
            raise MemcacheUnexpectedCloseError()
        taken += received
