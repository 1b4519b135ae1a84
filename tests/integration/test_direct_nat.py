"""The direct channel's links through an emulated NAT (tests/netns.py): two functions, each behind
its own masquerading NAT, and the rendezvous service on the public side.

Skipped, with one line saying why, where network namespaces cannot be made (not root, no `ip` or
`nft`).
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lambdaml.comm.direct.connect import GRACE_S
from tests.netns import NatNet

LINK_TIMEOUT_S = 4.0
#: Generous: process start-up in a namespace, plus the deadline and its grace.
PROCESS_BOUND_S = LINK_TIMEOUT_S + GRACE_S + 30.0


def _line(proc: subprocess.Popen[str], timeout_s: float, what: str) -> Any:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise AssertionError(f"{what}: no line within {timeout_s}s")
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"{what}: ended without a line (rc {proc.wait(5)}): {err[-2000:]}")
    return json.loads(line)


def _reflector(net: NatNet) -> str:
    proc = net.popen(
        "public",
        [sys.executable, "-m", "lambdaml.comm.direct.reflector", "--host", net.public_ip, "--port", "3478"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], 30.0)
    line = proc.stderr.readline() if ready else ""
    assert "listening on" in line, f"the rendezvous service did not start: {line!r}"
    return f"{net.public_ip}:3478"


def _peer(net: NatNet, rank: int, reflector: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "tests.direct_peer", "link", "--rank", str(rank), "--world", "2"]
    argv += ["--reflector", reflector, "--timeout", str(LINK_TIMEOUT_S)]
    return net.popen(rank, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _plan(endpoints: dict[int, Any]) -> str:
    return json.dumps({"secret": "ab" * 32, "job": "nat-job", "endpoints": endpoints}) + "\n"


def _finish(procs: list[subprocess.Popen[str]], plan: str) -> list[Any]:
    """Every process handed ``plan`` at once (they connect to each other), then their results."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(plan)
        proc.stdin.flush()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=PROCESS_BOUND_S)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def net() -> Iterator[NatNet]:
    with NatNet.create(functions=2) as made:
        yield made


@pytest.fixture
def random_net() -> Iterator[NatNet]:
    with NatNet.create(functions=2, randomize=True) as made:
        yield made


def test_a_plain_connect_between_functions_fails(net: NatNet) -> None:
    reflector = _reflector(net)
    peer = _peer(net, 1, reflector)
    ends = _line(peer, 60.0, "function 1's endpoints")["endpoints"]
    assert ends["private"][0] == net.function_ip(1)
    # It is listening: from its own namespace the private endpoint answers...
    assert net.reachable(1, tuple(ends["private"]))
    # ...but from function 0 neither its private address nor its NAT's mapping lets a plain connect in.
    assert not net.reachable(0, tuple(ends["private"]))
    assert not net.reachable(0, tuple(ends["public"]))
    assert _finish([peer], _plan({}))[0]["links"] == []


def test_b_hole_punching_links_two_functions_behind_nat(net: NatNet) -> None:
    reflector = _reflector(net)
    peers = [_peer(net, rank, reflector) for rank in range(2)]
    ends = {rank: _line(proc, 60.0, f"function {rank}'s endpoints")["endpoints"] for rank, proc in enumerate(peers)}
    for rank in range(2):
        port = ends[rank]["private"][1]
        assert ends[rank]["private"] == [net.function_ip(rank), port]
        # The rendezvous service saw the NAT's address and (port-preserving NAT) the same port.
        assert ends[rank]["public"] == [net.nat_ip(rank), port]
    results = _finish(peers, _plan(ends))
    assert results[0]["links"] == [1], results
    assert results[1]["links"] == [0], results
    assert results[0]["echo"] == {"1": 1}
    assert results[1]["echo"] == {"0": 0}


def test_c_port_randomizing_nat_defeats_punching_within_the_deadline(random_net: NatNet) -> None:
    reflector = _reflector(random_net)
    peers = [_peer(random_net, rank, reflector) for rank in range(2)]
    ends = {rank: _line(proc, 60.0, f"function {rank}'s endpoints")["endpoints"] for rank, proc in enumerate(peers)}
    assert all(ends[rank]["public"][0] == random_net.nat_ip(rank) for rank in range(2))
    start = time.monotonic()
    results = _finish(peers, _plan(ends))
    assert [r["links"] for r in results] == [[], []], results
    # Given up at the deadline (and its grace for handshakes under way), not hung.
    assert all(r["elapsed_s"] <= LINK_TIMEOUT_S + GRACE_S + 5.0 for r in results), results
    assert time.monotonic() - start < PROCESS_BOUND_S
