"""Start and stop local services (moto, Redis, Memcached) on free loopback ports.

Every wait here is bounded: a service that does not come up fails with a clear error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from lambdaml.errors import LambdaMLError

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    name: str
    port: int
    process: subprocess.Popen[bytes]

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


def _wait_until(ready: object, service: Service, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise LambdaMLError(f"{service.name} exited at start (code {service.process.returncode})")
        if ready():  # type: ignore[operator]
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    service.stop()
    raise LambdaMLError(f"{service.name} did not start on port {service.port} within {timeout:g}s")


def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def start_moto(port: int | None = None, timeout: float = 60.0) -> Service:
    """moto's server (S3, DynamoDB, ...) as a subprocess: its own process, its own GIL."""
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    service = Service("moto_server", port, process)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{service.url}/moto-api/data.json", timeout=1):
                return True
        except (urllib.error.URLError, OSError):
            return False

    _wait_until(ready, service, timeout)
    return service


_PACKAGES = {"redis-server": "redis-server", "memcached": "memcached"}


def _binary(name: str) -> str:
    path = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.path.exists(p)), None)
    if path is None:
        raise LambdaMLError(f"{name} is not installed; 'make test' installs it (apt-get install {_PACKAGES[name]})")
    return path


def start_redis(port: int | None = None, timeout: float = 20.0) -> Service:
    port = port or free_port()
    process = subprocess.Popen(
        [_binary("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    service = Service("redis-server", port, process)
    _wait_until(lambda: _accepts(port), service, timeout)
    return service


def start_memcached(port: int | None = None, timeout: float = 20.0, item_size: str = "1m") -> Service:
    port = port or free_port()
    command = [_binary("memcached"), "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-I", item_size]
    if os.geteuid() == 0:
        command += ["-u", "root"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    service = Service("memcached", port, process)
    _wait_until(lambda: _accepts(port), service, timeout)
    return service


@contextlib.contextmanager
def running(*services: Service) -> Iterator[tuple[Service, ...]]:
    try:
        yield services
    finally:
        for service in services:
            service.stop()
