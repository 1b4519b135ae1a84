"""Logging in to memcached (``memcached -Y``): on a raw socket, and on every connection a client opens.

The text protocol's authentication is a ``set`` whose value is "username password"; the server
answers STORED, or CLIENT_ERROR and refuses every other command on that connection.
"""

from __future__ import annotations

import socket
from typing import Any

from pymemcache.client.base import Client, PooledClient

from lambdaml import credentials
from lambdaml.errors import ChannelUnavailable


def authenticate(sock: socket.socket, login: credentials.Credentials, endpoint: str) -> None:
    """Log a fresh connection in; raises ChannelUnavailable if the server refuses the credentials."""
    token = f"{login.username} {login.password}".encode()
    sock.sendall(b"set auth 0 0 %d\r\n%s\r\n" % (len(token), token))
    reply = b""
    while not reply.endswith(b"\r\n") and len(reply) < 256:
        data = sock.recv(256)
        if not data:
            break
        reply += data
    if reply != b"STORED\r\n":
        answer = reply.decode(errors="replace").strip() or "connection closed"
        raise ChannelUnavailable(
            f"memcached at {endpoint} refused the credentials of user {login.username!r} (authentication: {answer})"
        )


class AuthenticatingClient(Client):  # type: ignore[misc]  # pymemcache ships no types
    """A pymemcache client that logs every new connection in before its first command."""

    login: credentials.Credentials | None = None

    def _connect(self) -> None:
        super()._connect()
        if self.login is not None:
            try:
                authenticate(self.sock, self.login, f"{self.server[0]}:{self.server[1]}")
            except BaseException:
                self.close()
                raise


class AuthenticatingPool(PooledClient):  # type: ignore[misc]
    """A pooled client whose connections log in (``login``: None, they do not)."""

    client_class = AuthenticatingClient

    def __init__(self, *args: Any, login: credentials.Credentials | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.login = login

    def _create_client(self) -> Client:
        client = super()._create_client()
        client.login = self.login
        return client
