"""The direct channel's link handshake, endpoints and reflector replies, over real socket pairs."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from lambdaml.comm.direct.endpoints import Endpoints
from lambdaml.comm.direct.handshake import MAC_BYTES, LinkAuth, LinkRefused, authenticate
from lambdaml.comm.direct.reflector import parse_reply
from lambdaml.errors import ChannelError

SECRET = bytes(range(32))
TIMEOUT_S = 5.0


def _both(left: LinkAuth, right: LinkAuth, world: int = 4) -> tuple[int | LinkRefused, int | LinkRefused]:
    """Each end's outcome, the two run at once on a socket pair; a refusing end closes its socket."""
    a, b = socket.socketpair()

    def side(sock: socket.socket, auth: LinkAuth) -> int | LinkRefused:
        try:
            return authenticate(sock, auth, world, TIMEOUT_S)
        except LinkRefused as exc:
            return exc
        finally:
            sock.close()

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.submit(side, a, left), pool.submit(side, b, right)
        return first.result(timeout=30), second.result(timeout=30)


def test_peers_of_one_job_learn_each_others_rank() -> None:
    assert _both(LinkAuth(SECRET, "job", 1, 0), LinkAuth(SECRET, "job", 1, 3)) == (3, 0)


@pytest.mark.parametrize(
    "other",
    [
        LinkAuth(b"another secret, same length....!", "job", 1, 2),
        LinkAuth(SECRET, "another-job", 1, 2),
        LinkAuth(SECRET, "job", 2, 2),
    ],
    ids=["wrong secret", "another job", "another attempt"],
)
def test_a_link_outside_the_job_is_refused_both_ways(other: LinkAuth) -> None:
    outcomes = _both(LinkAuth(SECRET, "job", 1, 0), other)
    for outcome in outcomes:
        assert isinstance(outcome, LinkRefused), outcomes
        assert "does not verify" in str(outcome)
        assert "\n" not in str(outcome)


@pytest.mark.parametrize("rank", [4, 0], ids=["out of range", "equal to mine"])
def test_a_bad_rank_is_refused(rank: int) -> None:
    mine, theirs = _both(LinkAuth(SECRET, "job", 1, 0), LinkAuth(SECRET, "job", 1, rank))
    assert isinstance(mine, LinkRefused)
    assert ("outside a world of 4" if rank == 4 else "this worker's own") in str(mine)
    assert isinstance(theirs, LinkRefused)  # the other end meets the close, or refuses in turn


def _against(raw: Callable[[socket.socket], None], timeout_s: float = 1.0) -> tuple[LinkRefused, float]:
    a, b = socket.socketpair()
    peer = threading.Thread(target=raw, args=(b,), daemon=True)
    peer.start()
    start = time.monotonic()
    with pytest.raises(LinkRefused) as caught:
        authenticate(a, LinkAuth(SECRET, "job", 1, 0), 4, timeout_s)
    elapsed = time.monotonic() - start
    a.close()
    peer.join(10)
    return caught.value, elapsed


def test_eof_mid_handshake_is_refused_within_the_timeout() -> None:
    def half_hello(sock: socket.socket) -> None:
        sock.recv(64)
        sock.sendall(b"LMLH1\x00\x00")
        sock.close()

    refused, elapsed = _against(half_hello)
    assert "closed by the peer" in str(refused)
    assert elapsed < 10.0


def test_a_silent_peer_is_refused_at_the_timeout() -> None:
    def silent(sock: socket.socket) -> None:
        sock.settimeout(10)
        while sock.recv(64):  # reads the hello, answers nothing, ends when the other end closes
            pass
        sock.close()

    refused, elapsed = _against(silent, timeout_s=0.3)
    assert "timed out" in str(refused)
    assert elapsed < 10.0


def test_a_stranger_speaking_another_protocol_is_refused() -> None:
    def http(sock: socket.socket) -> None:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(64)

    refused, _ = _against(http)
    assert "not a lambdaml link hello" in str(refused)


def test_no_message_carries_the_secret() -> None:
    seen = bytearray()

    def record(sock: socket.socket) -> None:
        hello = sock.recv(64)
        seen.extend(hello)
        sock.sendall(hello[:5] + (3).to_bytes(4, "big") + bytes(16))
        while len(seen) < len(hello) + MAC_BYTES:
            chunk = sock.recv(64)
            if not chunk:
                break
            seen.extend(chunk)
        sock.sendall(bytes(MAC_BYTES))  # a wrong answer: the recorded side refuses
        sock.close()

    refused, _ = _against(record)
    assert "does not verify" in str(refused)
    assert len(seen) == 25 + MAC_BYTES
    assert SECRET not in seen and SECRET[:8] not in seen
    assert "secret" not in repr(LinkAuth(SECRET, "job", 1, 0))


def test_endpoints_round_trip() -> None:
    for ends in (Endpoints(("10.0.0.2", 4000), ("54.1.2.3", 61000)), Endpoints(("127.0.0.1", 1), None)):
        assert Endpoints.from_json(ends.to_json(), "rank 1") == ends


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"private": ["10.0.0.2", 4000]}',
        b'{"private": ["10.0.0.2", 70000], "public": null}',
        b'{"private": ["10.0.0.2", true], "public": null}',
        b'{"private": ["", 4000], "public": null}',
        b'{"private": ["10.0.0.2", 4000], "public": "54.1.2.3:1"}',
        b'{"private": ["10.0.0.2", 4000], "public": null, "extra": 1}',
    ],
)
def test_malformed_endpoints_are_refused_naming_where(data: bytes) -> None:
    with pytest.raises(ChannelError, match=r"^rank 3's endpoints: ") as caught:
        Endpoints.from_json(data, "rank 3's endpoints")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("line", [b"", b"hello\n", b"LMLR1 1.2.3.4\n", b"LMLR1 1.2.3.4 99999\n", b"LMLR2 a 1\n"])
def test_a_garbled_reflector_reply_is_refused(line: bytes) -> None:
    with pytest.raises(ChannelError, match=r"rendezvous service 10\.0\.0\.1:3478"):
        parse_reply(line, "10.0.0.1:3478")


def test_a_reflector_reply_parses() -> None:
    assert parse_reply(b"LMLR1 54.1.2.3 61000\n", "here") == ("54.1.2.3", 61000)
