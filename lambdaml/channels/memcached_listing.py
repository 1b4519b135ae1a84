"""Listing a memcached server's keys, which it has no command for: a walk of its items.

``lru_crawler metadump`` prints one line per item (its URL-encoded key, its expiry, ...) on a
connection of the listing's own, which logs in where the channel does. The walk is bounded:
a crawler busy with another walk is waited for with backoff up to the listing's timeout.
"""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import unquote

from lambdaml import credentials
from lambdaml.channels.memcached_auth import authenticate
from lambdaml.errors import ChannelError, ChannelUnavailable, ChannelUnreachable, TransientChannelError

log = logging.getLogger(__name__)


class _UnknownCommand(Exception):
    """The server answered a plain ERROR: it does not know this metadump mode."""


class MetadumpListing:
    """The keys of the server at ``server``, each walk within ``timeout_s`` (every socket
    operation within ``socket_timeout_s``)."""

    def __init__(
        self,
        server: tuple[str, int],
        login: credentials.Credentials | None,
        timeout_s: float,
        socket_timeout_s: float,
    ) -> None:
        self.server = server
        self.endpoint = f"{server[0]}:{server[1]}"
        self.login = login
        self.timeout_s = timeout_s
        self.socket_timeout_s = socket_timeout_s
        self._mode = "hash"  # falls back to "all" on servers without the hash walk

    def keys(self, prefix: str) -> list[str]:
        """Every unexpired key starting with ``prefix``."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.005
        while True:
            lines = self._metadump(deadline)
            if lines is not None:
                break
            if time.monotonic() + delay > deadline:
                raise TransientChannelError(f"memcached at {self.endpoint}: the LRU crawler stayed busy")
            time.sleep(delay)  # another crawl (ours or the server's own) is running
            delay = min(delay * 2, 0.2)
        now = time.time()
        keys = []
        for line in lines:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if "key" not in fields:
                continue
            key = unquote(fields["key"])
            exp = int(fields.get("exp", "-1"))
            if key.startswith(prefix) and (exp < 0 or exp > now):
                keys.append(key)
        return keys

    def _metadump(self, deadline: float) -> list[str] | None:
        """Every item line from ``lru_crawler metadump``; None while the crawler is busy.

        ``metadump hash`` walks the hash table. ``metadump all`` walks the LRUs and can miss
        an item the LRU maintainer moves between segments mid-walk, so it is only the fallback
        for servers older than the hash mode.
        """
        while True:
            mode = self._mode
            try:
                return self._dump(mode, deadline)
            except _UnknownCommand:
                if mode != "hash":
                    raise ChannelError(f"memcached at {self.endpoint} cannot list keys (no lru_crawler)") from None
                log.warning("memcached at %s has no 'metadump hash'; listing via the LRUs", self.endpoint)
                self._mode = "all"

    def _dump(self, mode: str, deadline: float) -> list[str] | None:
        remaining = max(deadline - time.monotonic(), 0.1)
        try:
            with socket.create_connection(self.server, timeout=min(remaining, self.socket_timeout_s)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.login is not None:
                    authenticate(sock, self.login, self.endpoint)
                sock.sendall(f"lru_crawler metadump {mode}\r\n".encode())
                buffer = bytearray()
                while True:
                    if time.monotonic() > deadline:
                        raise ChannelUnavailable(f"memcached at {self.endpoint}: key listing timed out")
                    data = sock.recv(1 << 16)
                    if not data:
                        raise TransientChannelError(f"memcached at {self.endpoint} closed the connection mid-listing")
                    buffer += data
                    if buffer.startswith(b"BUSY") and buffer.endswith(b"\r\n"):
                        return None
                    if buffer == b"ERROR\r\n":
                        raise _UnknownCommand(mode)
                    if buffer.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")) and buffer.endswith(b"\r\n"):
                        message = bytes(buffer).decode(errors="replace").strip()
                        raise ChannelError(f"memcached at {self.endpoint} cannot list keys: {message}")
                    # Item lines end in "\n" and hold URL-encoded keys, so "\nEND\r\n" only ends the dump.
                    if buffer.endswith(b"END\r\n") and (len(buffer) == 5 or buffer[-6:-5] == b"\n"):
                        break
        except (TimeoutError, OSError) as exc:
            raise ChannelUnreachable(f"cannot reach memcached at {self.endpoint} to list keys: {exc}") from exc
        return bytes(buffer[:-5]).decode(errors="replace").splitlines()
