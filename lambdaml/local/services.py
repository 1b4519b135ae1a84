"""Start and stop local services (moto, Redis, Memcached, the direct channel's reflector) on free loopback ports.

Used by ``lambdaml demo``, the local stack and the test session. Every wait here is
bounded: a service that does not come up fails with its log's tail in the error.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lambdaml import catalogue
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.interrupts import sigint_blocked

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
_PACKAGES = {"redis-server": "redis-server", "memcached": "memcached"}


class ServiceError(LambdaMLError):
    """A local service is missing or did not start."""


def free_port(port: int = 0) -> int:
    """A loopback port nothing listens on: any (0), or ``port`` itself, refused in one line if taken."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"port {port} is not a TCP port (1-65535, or 0 for any)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConfigError(f"port {port} on 127.0.0.1 is taken ({exc.strerror}); choose another --port") from None
        return int(sock.getsockname()[1])


@dataclass
class Service:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _start(name: str, argv: list[str], port: int, ready: Callable[[], bool], log_path: Path | None) -> Service:
    """Start a service and wait, bounded, until ``ready``."""
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix=f"lambdaml-{name}-")) / f"{name}.log"
    # Deaf to Ctrl-C: the command that started it stops it (a demo's store must outlive the
    # interrupt long enough to record the job as interrupted).
    with log_path.open("wb") as log_file, sigint_blocked():
        process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    service = Service(name, port, process, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    delay = 0.02
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            log.info("%s is up on port %d", name, port)
            return service
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    service.stop()
    tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
    raise ServiceError(f"{name} did not start on port {port} within {START_TIMEOUT_S:g}s: {tail or 'no output'}")


def _answers(port: int, request: bytes, expect: bytes | tuple[bytes, ...], *, tls: bool = False) -> bool:
    """True when a TCP server on the port answers ``request`` with a reply starting ``expect``.

    With ``tls`` the probe speaks TLS without checking the certificate: it only asks whether
    the server is up, and the clients under test do the verifying.
    """
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as plain:
            sock = plain
            if tls:
                context = ssl.create_default_context()
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                sock = context.wrap_socket(plain, server_hostname="127.0.0.1")
            sock.sendall(request)
            return sock.recv(64).startswith(expect)
    except OSError:
        return False


def _http_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:  # any HTTP answer means the server is up
        return True
    except OSError:
        return False


def _binary(name: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.path.exists(p)), None)
    if path is None:
        raise ServiceError(f"{name} is not installed; 'make test' installs it (apt-get install {_PACKAGES[name]})")
    return path


def start_moto(port: int | None = None, log_path: Path | None = None) -> Service:
    """moto's server (S3, DynamoDB, ...) as a subprocess: its own process, its own GIL."""
    port = port or free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return _start("moto_server", argv, port, lambda: _http_up(f"http://127.0.0.1:{port}/moto-api/"), log_path)


def start_redis(
    port: int | None = None,
    log_path: Path | None = None,
    *,
    password: str | None = None,
    tls: tuple[Path, Path] | None = None,
) -> Service:
    """A redis-server without persistence; with ``password`` it requires AUTH, with ``tls``
    (certificate and key PEM files) it speaks only TLS on its port."""
    port = port or free_port()
    argv = [_binary("redis-server"), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    if tls is None:
        argv += ["--port", str(port)]
    else:
        cert, key = tls
        argv += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        argv += ["--tls-auth-clients", "no"]  # clients authenticate with AUTH, not certificates
    if password is not None:
        argv += ["--requirepass", password]
    ready = (b"+PONG", b"-NOAUTH")
    return _start("redis-server", argv, port, lambda: _answers(port, b"PING\r\n", ready, tls=tls is not None), log_path)


def start_memcached(
    port: int | None = None,
    log_path: Path | None = None,
    *,
    item_size: str = "1m",
    memory_mb: int = 256,
    auth_file: Path | None = None,
) -> Service:
    """A memcached; the default 1 MiB item limit is kept so that chunking is exercised.

    ``auth_file`` (lines of ``user:password``) turns on memcached's text-protocol
    authentication (``-Y``): every connection must log in before its first command.
    """
    port = port or free_port()
    argv = [_binary("memcached"), "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-I", item_size, "-m", str(memory_mb)]
    if auth_file is not None:
        argv += ["-Y", str(auth_file)]
    if os.geteuid() == 0:
        argv += ["-u", "root"]  # memcached refuses to run as root otherwise
    ready = (b"VERSION", b"CLIENT_ERROR unauthenticated")
    return _start("memcached", argv, port, lambda: _answers(port, b"version\r\n", ready), log_path)


def start_reflector(port: int | None = None, log_path: Path | None = None) -> Service:
    """The direct channel's rendezvous service on loopback: a TCP reflector that answers each
    connection with one line, ``LMLR1 <ip> <port>`` as it sees the client, and closes it."""
    port = port or free_port()
    argv = [sys.executable, "-m", "lambdaml.comm.direct.reflector", "--host", "127.0.0.1", "--port", str(port)]
    return _start("reflector", argv, port, lambda: _answers(port, b"", b"LMLR1 127.0.0.1 "), log_path)


def start_channel_server(kind: str, log_path: Path | None = None) -> Service:
    """A server of the channel kind on a free loopback port, started as its description says."""
    info = catalogue.channel(kind)
    if info.local_server is None:
        raise ConfigError(f"no {info.called} server can be started here")
    module, _, name = info.local_server.partition(":")
    service = getattr(importlib.import_module(module), name)(log_path=log_path)
    if not isinstance(service, Service):
        raise ConfigError(f"{info.local_server} started no service (got {type(service).__name__})")
    return service


@contextlib.contextmanager
def running(*services: Service) -> Iterator[tuple[Service, ...]]:
    try:
        yield services
    finally:
        for service in services:
            service.stop()
