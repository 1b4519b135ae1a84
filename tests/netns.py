"""An emulated NAT built from Linux network namespaces, for tests of the direct channel.

    public (10.44.0.1 on bridge br0): the rendezvous service and any shared service
      |-- nat0 (wan 10.44.0.10, masquerade) -- fn0 (10.100.0.2)
      |-- nat1 (wan 10.44.0.11, masquerade) -- fn1 (10.101.0.2)
      ...

Each "function" sits behind its own NAT namespace, which masquerades what leaves its wan side
and silently drops what arrives there unasked (as cloud NATs do: no RST that would close a hole
before it opens). With ``randomize`` the NAT picks a fresh random port for every connection (a
symmetric NAT), which hole punching cannot get through. The public namespace does not forward,
so a function's private address cannot be reached from outside its NAT.

Use::

    with NatNet.create(functions=2) as net:
        redis = net.popen("public", ["redis-server", "--bind", net.public_ip, "--port", "6379"])
        assert net.reachable(0, (net.public_ip, 6379))
        worker = net.popen(0, [sys.executable, "-m", "some.module"], stdout=subprocess.PIPE)

``NatNet.create()`` skips the test (one line saying why) where namespaces cannot be made; every
namespace and every process started in one is removed on close, even after a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import pytest

PUBLIC_IP = "10.44.0.1"
_SETUP_TIMEOUT_S = 20.0


def why_not() -> str | None:
    """Why namespaces with NAT cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, as CI does)"
    for tool, install in (
        ("ip", "apt-get install iproute2"),
        ("nft", "apt-get install nftables, as `make services` does"),
    ):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed ({install})"
    return None


def _run(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=_SETUP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


class NatNet:
    """A public namespace and ``functions`` function namespaces, each behind its own NAT."""

    def __init__(self, functions: int, randomize: bool) -> None:
        self.tag = f"lml{uuid.uuid4().hex[:8]}"
        self.public = f"{self.tag}pub"
        self.nats = [f"{self.tag}nat{i}" for i in range(functions)]
        self.functions = [f"{self.tag}fn{i}" for i in range(functions)]
        self.randomize = randomize
        self._made: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []

    # -- addresses ------------------------------------------------------------------------------

    public_ip = PUBLIC_IP

    @staticmethod
    def function_ip(i: int) -> str:
        """Function ``i``'s private address (only its own NAT routes to it)."""
        return f"10.{100 + i}.0.2"

    @staticmethod
    def nat_ip(i: int) -> str:
        """Function ``i``'s public address: its NAT's wan side."""
        return f"10.44.0.{10 + i}"

    def namespace(self, where: str | int) -> str:
        """The namespace of ``"public"`` or function ``i``."""
        return self.public if where == "public" else self.functions[int(where)]

    # -- running things -------------------------------------------------------------------------

    def argv(self, where: str | int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``where`` (``"public"`` or a function's index)."""
        return ["ip", "netns", "exec", self.namespace(where), *argv]

    def popen(self, where: str | int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """A process started inside ``where``; killed on close if still running."""
        proc: subprocess.Popen[Any] = subprocess.Popen(self.argv(where, argv), **kwargs)
        self._procs.append(proc)
        return proc

    def run(
        self, where: str | int, argv: Sequence[str], timeout_s: float, **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        """``argv`` run to its end inside ``where``, bounded by ``timeout_s``."""
        return subprocess.run(self.argv(where, argv), timeout=timeout_s, check=False, **kwargs)

    def reachable(self, where: str | int, address: tuple[str, int], timeout_s: float = 2.0) -> bool:
        """Whether a plain TCP connect from ``where`` to ``address`` succeeds (e.g. a service started
        on the public side with ``popen("public", ...)`` and bound to ``public_ip``)."""
        argv = [sys.executable, "-m", "tests.direct_peer", "connect", f"{address[0]}:{address[1]}"]
        done = self.run(where, [*argv, "--timeout", str(timeout_s)], timeout_s + 60, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"connect helper failed in {self.namespace(where)}: {done.stderr.strip()[-500:]}")
        return bool(json.loads(done.stdout)["connected"])

    # -- building and removing ------------------------------------------------------------------

    @classmethod
    def create(cls, functions: int = 2, randomize: bool = False) -> NatNet:
        """The network built, or the test skipped with the reason it cannot be."""
        reason = why_not()
        if reason is not None:
            pytest.skip(f"emulated NAT: {reason}")
        net = cls(functions, randomize)
        try:
            net._build()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            net.close()
            if not net._made:  # not even one namespace: a sandbox without the capability
                pytest.skip(f"emulated NAT: cannot create a network namespace here ({exc})")
            raise
        return net

    def _ns(self, name: str, *argv: str) -> None:
        _run(["ip", "-n", name, *argv])

    def _add(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self._made.append(name)
        self._ns(name, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add(self.public)
        self._ns(self.public, "link", "add", "br0", "type", "bridge")
        self._ns(self.public, "addr", "add", f"{PUBLIC_IP}/24", "dev", "br0")
        self._ns(self.public, "link", "set", "br0", "up")
        for i, (nat, fn) in enumerate(zip(self.nats, self.functions, strict=True)):
            self._add(nat)
            self._add(fn)
            self._ns(nat, "link", "add", "wan", "type", "veth", "peer", "name", f"p{i}", "netns", self.public)
            self._ns(self.public, "link", "set", f"p{i}", "master", "br0", "up")
            self._ns(nat, "addr", "add", f"{self.nat_ip(i)}/24", "dev", "wan")
            self._ns(nat, "link", "set", "wan", "up")
            self._ns(nat, "route", "add", "default", "via", PUBLIC_IP)
            self._ns(nat, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", fn)
            lan = f"10.{100 + i}.0"
            self._ns(nat, "addr", "add", f"{lan}.1/24", "dev", "lan")
            self._ns(nat, "link", "set", "lan", "up")
            self._ns(fn, "addr", "add", f"{lan}.2/24", "dev", "eth0")
            self._ns(fn, "link", "set", "eth0", "up")
            self._ns(fn, "route", "add", "default", "via", f"{lan}.1")
            _run(["ip", "netns", "exec", nat, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            masquerade = "masquerade fully-random" if self.randomize else "masquerade"
            # What arrives on the wan side unasked is dropped before conntrack confirms it, so a
            # peer's early SYN neither resets the other's attempt nor takes its mapping's port.
            ruleset = f"""
table ip lmlnat {{
  chain post {{ type nat hook postrouting priority srcnat; oifname "wan" {masquerade}; }}
  chain input {{ type filter hook input priority filter;
    iifname "wan" ct state established,related accept; iifname "wan" drop; }}
  chain forward {{ type filter hook forward priority filter;
    iifname "wan" ct state established,related accept; iifname "wan" drop; }}
}}
"""
            done = subprocess.run(
                ["ip", "netns", "exec", nat, "nft", "-f", "-"],
                input=ruleset,
                capture_output=True,
                text=True,
                timeout=_SETUP_TIMEOUT_S,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"nft in {nat}: {done.stderr.strip()}")

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=_SETUP_TIMEOUT_S, check=False)
        self._made.clear()

    def __enter__(self) -> NatNet:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
