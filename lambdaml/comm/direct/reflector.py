"""The rendezvous service: a TCP reflector that tells a worker the address and port it is seen from.

Behind NAT that is the worker's public endpoint, the one peers must aim at to punch through. Per
connection it writes one line, ``LMLR1 <ip> <port>``, and closes; it keeps no state, so it can be
restarted at any time, and it never waits on a client for more than a few seconds.

Run it as ``python -m lambdaml.comm.direct.reflector --host H --port P``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Sequence
from types import FrameType, TracebackType

from lambdaml.errors import ChannelError, ChannelUnavailable, brief

log = logging.getLogger(__name__)

MAGIC = "LMLR1"
#: How long the service waits on one client (its write and close) before dropping it.
CLIENT_TIMEOUT_S = 3.0
#: A reply is one short line; more than this is not a reflector talking.
_MAX_LINE = 128

Address = tuple[str, int]


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(CLIENT_TIMEOUT_S)
        host, port = self.client_address[0], self.client_address[1]
        try:
            sock.sendall(f"{MAGIC} {host} {port}\n".encode())
            sock.shutdown(socket.SHUT_WR)
        except OSError as exc:  # the client went away: nothing to tell anyone
            log.debug("reflector: client %s:%s: %s", host, port, exc)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128


class Reflector:
    """A running reflector; ``close()`` (or leaving the ``with`` block) stops it."""

    def __init__(self, server: socketserver.ThreadingTCPServer) -> None:
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="lambdaml-reflector", daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> Address:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> Reflector:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def serve(host: str, port: int = 0) -> Reflector:
    """A reflector listening on ``host:port`` (0: a free port), serving from a background thread."""
    try:
        server = _Server((host, port), _Handler)
    except OSError as exc:
        raise ChannelUnavailable(f"rendezvous service cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return Reflector(server)


def parse_reply(data: bytes, where: str) -> Address:
    """The address in a reflector's line, or ChannelError naming ``where``."""
    parts = data.decode("ascii", errors="replace").strip().split(" ")
    if len(parts) != 3 or parts[0] != MAGIC or not parts[1] or not parts[2].isdigit():
        raise ChannelError(f"rendezvous service {where} answered {brief(data)}, not '{MAGIC} <ip> <port>'")
    port = int(parts[2])
    if not 1 <= port <= 65535:
        raise ChannelError(f"rendezvous service {where} answered port {port}")
    return parts[1], port


def observed_address(reflector: Address, local: Address, timeout_s: float) -> Address:
    """The address and port ``reflector`` sees a connection from ``local`` come from.

    The connection is made from ``local`` itself (sharing a listener's port), so behind NAT the
    answer is the mapping that peers' connections to that port will meet.
    """
    where = f"{reflector[0]}:{reflector[1]}"
    sock = reuse_socket(local)
    try:
        sock.settimeout(timeout_s)
        sock.connect(reflector)
        data = _read_to_close(sock)
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ChannelUnavailable(f"rendezvous service {where}: {reason}") from None
    finally:
        sock.close()
    return parse_reply(data, where)


def _read_to_close(sock: socket.socket) -> bytes:
    # Up to the service's close, so it closes first and keeps the TIME_WAIT: this end's port is
    # a listener's, and the next observation from it must not find the pair still taken.
    data = b""
    while len(data) < _MAX_LINE:
        try:
            chunk = sock.recv(_MAX_LINE - len(data))
        except TimeoutError:
            if data.endswith(b"\n"):  # the line came; only the close is late
                break
            raise
        if not chunk:
            break
        data += chunk
    return data


def reuse_socket(local: Address) -> socket.socket:
    """A TCP socket bound to ``local`` beside a listener there (SO_REUSEADDR and SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(local)
    except OSError as exc:
        sock.close()
        raise ChannelUnavailable(f"cannot bind {local[0]}:{local[1]}: {exc.strerror or exc}") from None
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lambdaml.comm.direct.reflector",
        description="The direct channel's rendezvous service: tells each client the address it is seen from.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if not 0 <= args.port <= 65535:
        print(f"error: --port {args.port} is not 0-65535", file=sys.stderr)
        return 1
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        reflector = serve(args.host, args.port)
    except ChannelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with reflector:
        host, port = reflector.address
        log.info("rendezvous service listening on %s:%d", host, port)
        while not stop.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
