"""The HTTP front of the local Lambda service: every listening socket, and HTTP/1.1 on each connection.

The Invoke API and every sandbox's Runtime API port are served by one selector thread
(``Frontend``), which hands each accepted connection to a short-lived thread of its own;
``HttpHandler`` reads a request there and passes (method, path, headers, body) to a routing
function. What the routes mean is for runtime_api and routing/invoke.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

from lambdaml.local.lambda_service.models import IDLE_WAIT_S, JOIN_S, Stopping
from lambdaml.local.lambda_service.responses import ApiError, Response

log = logging.getLogger(__name__)

Handler = Callable[[socket.socket, Any], None]
RouteFunction = Callable[[str, str, Mapping[str, str], bytes], Response]


class Frontend:
    """One selector thread accepting on every listening socket; each connection gets its own thread."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._closed = False
        self._conns: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._loop, name="lambda-service-accept", daemon=True)
        self._thread.start()

    def listen(self, host: str, port: int, handler: Handler) -> socket.socket:
        sock = socket.create_server((host, port), backlog=128)
        sock.setblocking(False)
        with self._lock:
            if self._closed:
                sock.close()
                raise Stopping
            self._selector.register(sock, selectors.EVENT_READ, handler)
        return sock

    def unlisten(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = [key.fileobj for key in self._selector.get_map().values() if key.data is not None]
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(JOIN_S)
        for sock in socks:
            self.unlisten(cast(socket.socket, sock))
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # idle keep-alive readers see EOF and end; a response being written still goes out
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _loop(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=IDLE_WAIT_S):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(64)
                    continue
                try:
                    conn, addr = cast(socket.socket, key.fileobj).accept()
                except OSError:  # closed meanwhile, or another accept won the race
                    continue
                with self._lock:
                    self._conns.add(conn)
                threading.Thread(target=self._serve, args=(key.data, conn, addr), daemon=True).start()

    def _serve(self, handler: Handler, conn: socket.socket, addr: Any) -> None:
        try:
            handler(conn, addr)
        except OSError as exc:  # the peer went away (a killed runtime, a client that gave up)
            log.debug("connection from %s ended: %s", addr, exc)
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()


class HttpHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; the routing function turns (method, path, headers, body) into a response."""

    protocol_version = "HTTP/1.1"
    timeout = 300  # an idle keep-alive connection is dropped after this
    disable_nagle_algorithm = True  # headers and body are two writes: without this, delayed ACKs add 40 ms
    server_version = "lambdaml-local-lambda"

    def __init__(self, conn: socket.socket, addr: Any, route: RouteFunction) -> None:
        self._route = route
        super().__init__(conn, addr, cast(Any, None))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self) -> None:
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            response = self._route(self.command, self.path, headers, body)
        except Exception as exc:  # a bug here must still answer the caller, not leave it hanging
            log.exception("internal error serving %s %s", self.command, self.path)
            response = ApiError(500, "ServiceException", f"internal error: {exc}").response(str(uuid.uuid4()))
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if response.body:
            self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch
