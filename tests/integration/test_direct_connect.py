"""The direct channel's link set-up on loopback: real sockets, ranks as threads, a real reflector."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

import pytest

from lambdaml.comm.direct import reflector
from lambdaml.comm.direct.connect import GRACE_S, connect_peers, local_endpoints, open_listener
from lambdaml.comm.direct.endpoints import Endpoints
from lambdaml.comm.direct.handshake import LinkAuth, LinkRefused, authenticate
from lambdaml.errors import ChannelError, ChannelUnavailable

SECRET = os.urandom(32)
JOB = "links-job"


@pytest.fixture
def rendezvous() -> Iterator[reflector.Reflector]:
    with reflector.serve("127.0.0.1") as service:
        yield service


def _link_all(
    listeners: Mapping[int, socket.socket], world: int, endpoints: Mapping[int, Endpoints], timeout_s: float
) -> dict[int, dict[int, socket.socket]]:
    """Every rank in ``listeners`` connecting at once, each in its own thread."""
    with ThreadPoolExecutor(len(listeners)) as pool:
        futures = {
            rank: pool.submit(connect_peers, listener, LinkAuth(SECRET, JOB, 1, rank), world, endpoints, timeout_s)
            for rank, listener in listeners.items()
        }
        return {rank: future.result(timeout=timeout_s + GRACE_S + 30) for rank, future in futures.items()}


def _close(*groups: Mapping[int, socket.socket]) -> None:
    for group in groups:
        for sock in group.values():
            sock.close()


def test_four_ranks_link_every_pair_once(rendezvous: reflector.Reflector) -> None:
    world = 4
    listeners = {rank: open_listener("127.0.0.1") for rank in range(world)}
    endpoints = {rank: local_endpoints(sock, rendezvous.address, 5.0) for rank, sock in listeners.items()}
    links = _link_all(listeners, world, endpoints, 10.0)
    try:
        for rank in range(world):
            assert sorted(links[rank]) == [p for p in range(world) if p != rank]
        # One connection per pair: each end's socket is the other's.
        for rank in range(world):
            for peer, sock in links[rank].items():
                assert sock.getpeername() == links[peer][rank].getsockname()
                assert sock.gettimeout() is None
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        # Data crosses every link both ways (256 KiB: more than a socket buffer holds at once).
        payload = {(r, p): os.urandom(256 * 1024) for r in range(world) for p in range(world) if r != p}
        senders = [
            threading.Thread(target=links[r][p].sendall, args=(payload[r, p],), daemon=True) for (r, p) in payload
        ]
        for thread in senders:
            thread.start()
        for (r, p), data in payload.items():
            got = bytearray()
            links[p][r].settimeout(30)
            while len(got) < len(data):
                chunk = links[p][r].recv(len(data) - len(got))
                assert chunk, f"link {r}->{p} closed early"
                got += chunk
            assert bytes(got) == data, f"link {r}->{p} garbled"
        for thread in senders:
            thread.join(30)
    finally:
        _close(*links.values(), listeners)


def test_two_routes_to_every_peer_still_end_in_one_link_per_pair() -> None:
    # Listening on every address, each peer is reached at 127.0.0.1 (private) and at 127.0.0.2
    # (public): two connections per pair authenticate, and the lower rank's verdict keeps one.
    world = 4
    listeners = {rank: open_listener("0.0.0.0") for rank in range(world)}
    endpoints = {
        rank: Endpoints(("127.0.0.1", sock.getsockname()[1]), ("127.0.0.2", sock.getsockname()[1]))
        for rank, sock in listeners.items()
    }
    links = _link_all(listeners, world, endpoints, 10.0)
    try:
        for rank in range(world):
            assert sorted(links[rank]) == [p for p in range(world) if p != rank]
            for peer, sock in links[rank].items():
                assert sock.getpeername() == links[peer][rank].getsockname()
                sock.sendall(bytes([rank]))
        for rank in range(world):
            for peer, sock in links[rank].items():
                sock.settimeout(30)
                assert sock.recv(1) == bytes([peer])
    finally:
        _close(*links.values(), listeners)


def test_the_reflector_reports_the_clients_address_and_port(rendezvous: reflector.Reflector) -> None:
    listener = open_listener("127.0.0.1")
    try:
        port = listener.getsockname()[1]
        assert reflector.observed_address(rendezvous.address, ("127.0.0.1", port), 5.0) == ("127.0.0.1", port)
        assert local_endpoints(listener, rendezvous.address, 5.0) == Endpoints(("127.0.0.1", port), ("127.0.0.1", port))
        assert local_endpoints(listener, None, 5.0) == Endpoints(("127.0.0.1", port), None)
    finally:
        listener.close()


def test_a_reflector_that_is_down_or_garbled_is_one_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()
    with pytest.raises(ChannelUnavailable, match=f"rendezvous service 127.0.0.1:{dead[1]}"):
        reflector.observed_address(dead, ("127.0.0.1", 0), 2.0)
    listener = open_listener("127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="lambdaml.comm.direct.connect"):
        ends = local_endpoints(listener, dead, 2.0)
    assert ends.public is None
    assert any("rendezvous service" in r.getMessage() for r in caplog.records)
    listener.close()

    with socket.create_server(("127.0.0.1", 0)) as liar:

        def garble() -> None:
            conn, _ = liar.accept()
            conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
            conn.close()

        thread = threading.Thread(target=garble, daemon=True)
        thread.start()
        with pytest.raises(ChannelError, match="not 'LMLR1 <ip> <port>'"):
            reflector.observed_address(liar.getsockname(), ("127.0.0.1", 0), 2.0)
        thread.join(10)


def test_peers_that_never_answer_are_absent_after_the_deadline_not_a_hang() -> None:
    world, timeout_s = 4, 1.5
    listeners = {rank: open_listener("127.0.0.1") for rank in range(2)}
    # Rank 2 accepts TCP (the kernel's backlog) but never speaks; rank 3's port refuses.
    mute = socket.create_server(("127.0.0.1", 0))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused_at = closed.getsockname()
    endpoints = {rank: Endpoints(sock.getsockname()) for rank, sock in listeners.items()}
    endpoints[2] = Endpoints(mute.getsockname())
    endpoints[3] = Endpoints(refused_at)
    start = time.monotonic()
    links = _link_all(listeners, world, endpoints, timeout_s)
    elapsed = time.monotonic() - start
    try:
        assert sorted(links[0]) == [1]
        assert sorted(links[1]) == [0]
        assert elapsed < timeout_s + GRACE_S + 10.0  # bounded, with a generous margin
    finally:
        _close(*links.values(), listeners)
        mute.close()


def test_a_wrong_secret_is_refused_and_the_real_peers_still_link() -> None:
    world = 3
    listeners = {rank: open_listener("127.0.0.1") for rank in range(world)}
    endpoints = {rank: Endpoints(sock.getsockname()) for rank, sock in listeners.items()}
    outcomes: list[int | LinkRefused] = []

    def impostor() -> None:
        # Claims rank 2 to ranks 0 and 1 with a wrong secret, while the real peers connect.
        for rank in (0, 1):
            with socket.create_connection(endpoints[rank].private, timeout=5) as sock:
                try:
                    outcomes.append(authenticate(sock, LinkAuth(b"x" * 32, JOB, 1, 2), world, 5.0))
                except LinkRefused as exc:
                    outcomes.append(exc)

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    links = _link_all(listeners, world, endpoints, 10.0)
    thread.join(30)
    try:
        assert len(outcomes) == 2 and all(isinstance(o, LinkRefused) for o in outcomes), outcomes
        for rank in range(world):
            assert sorted(links[rank]) == [p for p in range(world) if p != rank]
            for peer, sock in links[rank].items():
                assert sock.getpeername() == links[peer][rank].getsockname()  # the real peer, not the impostor
    finally:
        _close(*links.values(), listeners)


def test_the_rendezvous_service_runs_as_a_module_and_stops_cleanly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lambdaml.comm.direct.reflector", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 30.0)
        line = proc.stderr.readline() if ready else ""
        assert line.startswith("rendezvous service listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with socket.socket() as spare:
            spare.bind(("127.0.0.1", 0))
            local = spare.getsockname()
        assert reflector.observed_address(("127.0.0.1", port), local, 5.0) == local
        # The port is taken now: a second service says so in one line and exits 1.
        taken = subprocess.run(
            [sys.executable, "-m", "lambdaml.comm.direct.reflector", "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert taken.returncode == 1
        assert len(taken.stderr.strip().splitlines()) == 1 and "cannot listen" in taken.stderr
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
