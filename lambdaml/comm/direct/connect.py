"""Setting up the links: one authenticated TCP socket per pair of workers, or none by the deadline.

Every worker listens on one port and makes every connection from that same port
(SO_REUSEADDR and SO_REUSEPORT). For each peer it accepts on the listener and, at the same time,
connects to the peer's private endpoint and to its public one, again and again with a small
backoff until the deadline. Where the peer is reachable a plain connect or accept wins; where
both sit behind NAT, each one's SYN opens its own NAT's mapping for the other's, the SYNs cross
and the simultaneous open succeeds (TCP hole punching, as TCPunch does).

A pair can end with two authenticated sockets (each end's connect accepted by the other, or a
private and a public route). The lower rank decides: it sends ``USE`` on the first socket it
authenticated for that peer and ``CLOSE`` on any later one; the higher rank keeps a socket only
once it reads ``USE`` on it.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping

from lambdaml.comm.direct.endpoints import Address, Endpoints
from lambdaml.comm.direct.handshake import LinkAuth, LinkRefused, authenticate
from lambdaml.comm.direct.reflector import observed_address, reuse_socket
from lambdaml.errors import ChannelError, ChannelUnavailable

log = logging.getLogger(__name__)

#: The lower rank's verdict on an authenticated socket, one byte.
USE, CLOSE = b"U", b"C"
#: A handshake (or verdict) already under way at the deadline may finish this much later: both
#: ends are one round trip from agreeing, and stopping them then would leave one end with a link
#: the other dropped.
GRACE_S = 2.0
#: One connect attempt waits at most this long before a fresh SYN is sent (the kernel's first
#: retransmission would wait 1 s; a punched hole is usually there well before).
CONNECT_ATTEMPT_S = 0.5
_BACKOFF_S = (0.02, 0.5)
_ACCEPT_POLL_S = 0.1


def open_listener(host: str) -> socket.socket:
    """A listening socket on ``host`` and a free port, which connections from this worker share."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, 0))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ChannelUnavailable(f"cannot listen on {host}: {exc.strerror or exc}") from None
    return sock


def _route_source(destination: Address) -> str | None:
    """The local address this host would send from to reach ``destination`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(destination)
            return str(probe.getsockname()[0])
        except OSError:
            return None


def local_endpoints(listener: socket.socket, reflector: Address | None, timeout_s: float) -> Endpoints:
    """This worker's endpoints: the listener's address, and the one ``reflector`` sees it from.

    A listener on 0.0.0.0 publishes the address its route to the reflector leaves from (or
    127.0.0.1 without one). A reflector that does not answer leaves ``public`` None, with a warning:
    peers then try the private address only.
    """
    host, port = listener.getsockname()[:2]
    public: Address | None = None
    if reflector is not None:
        try:
            public = observed_address(reflector, (host, port), timeout_s)
        except ChannelError as exc:
            log.warning("direct links: %s; peers will try this worker's private address only", exc)
    if host == "0.0.0.0":
        host = (_route_source(reflector) if reflector is not None else None) or "127.0.0.1"
    return Endpoints(private=(str(host), int(port)), public=public)


def connect_peers(
    listener: socket.socket, auth: LinkAuth, world: int, endpoints: Mapping[int, Endpoints], timeout_s: float
) -> dict[int, socket.socket]:
    """One authenticated, blocking, TCP_NODELAY socket per peer reached within ``timeout_s``.

    ``endpoints`` holds the peers' published endpoints (this worker's own, if present, is
    skipped). Peers not reached are absent from the result: their exchanges go through the store.
    """
    return _Linker(listener, auth, world, endpoints, timeout_s).run()


class _Linker:
    def __init__(
        self,
        listener: socket.socket,
        auth: LinkAuth,
        world: int,
        endpoints: Mapping[int, Endpoints],
        timeout_s: float,
    ) -> None:
        self.listener, self.auth, self.world = listener, auth, world
        host, port = listener.getsockname()[:2]
        self.local: Address = (str(host), int(port))
        mine = endpoints.get(auth.rank)
        self.own = {self.local, *(mine.addresses() if mine else [])}
        self.peers = {r: e for r, e in endpoints.items() if r != auth.rank and 0 <= r < world}
        self.deadline = time.monotonic() + timeout_s
        self.cond = threading.Condition()
        self.chosen: dict[int, socket.socket] = {}
        self.in_flight = 0
        self.done = False

    # -- the caller's thread --------------------------------------------------------------------

    def run(self) -> dict[int, socket.socket]:
        if not self.peers:
            return {}
        accepting = self._spawn("accept", self._accept_loop)
        for peer, ends in sorted(self.peers.items()):
            for address in ends.addresses():
                if address not in self.own:
                    self._spawn(f"connect-{peer}", self._connect_loop, peer, address)
        with self.cond:
            while not self._settled():  # woken by every link kept or handshake ended, else polled
                self.cond.wait(timeout=_ACCEPT_POLL_S)
            self.done = True
            links = dict(self.chosen)
        # The caller may close the listener as soon as this returns: the accept loop is off it first.
        accepting.join(timeout=5 * _ACCEPT_POLL_S)
        missing = sorted(set(self.peers) - set(links))
        if missing:
            log.info(
                "direct links: rank %d reached no link to rank(s) %s by the deadline; they go through the store",
                self.auth.rank,
                ", ".join(map(str, missing)),
            )
        for sock in links.values():
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return links

    def _settled(self) -> bool:
        if set(self.peers) <= set(self.chosen):
            return True
        now = time.monotonic()
        return now >= self.deadline and (self.in_flight == 0 or now >= self.deadline + GRACE_S)

    # -- worker threads -------------------------------------------------------------------------

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> threading.Thread:
        def guarded() -> None:
            try:
                target(*args)
            except Exception as exc:  # a thread must not die silently; the pair falls back
                log.warning("direct links: %s thread failed: %s", name, exc)

        thread = threading.Thread(target=guarded, name=f"lambdaml-link-{name}", daemon=True)
        thread.start()
        return thread

    def _stopped(self, peer: int | None = None) -> bool:
        """Past the deadline, or ``peer`` (None: every peer) has its link."""
        with self.cond:
            linked = set(self.peers) <= set(self.chosen) if peer is None else peer in self.chosen
            return self.done or linked or time.monotonic() >= self.deadline

    def _accept_loop(self) -> None:
        while not self._stopped():
            wait = min(_ACCEPT_POLL_S, max(0.0, self.deadline - time.monotonic()))
            ready, _, _ = select.select([self.listener], [], [], wait)
            if not ready:
                continue
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            self._spawn("session", self._session, sock)

    def _connect_loop(self, peer: int, address: Address) -> None:
        backoff = _BACKOFF_S[0]
        while not self._stopped(peer):
            left = self.deadline - time.monotonic()
            try:
                sock = reuse_socket(self.local)
            except ChannelUnavailable as exc:
                log.debug("direct links: rank %d to %d: %s", self.auth.rank, peer, exc)
            else:
                sock.settimeout(max(0.01, min(CONNECT_ATTEMPT_S, left)))
                try:
                    sock.connect(address)
                except OSError:
                    sock.close()
                else:
                    self._session(sock)
                    continue
            time.sleep(max(0.0, min(backoff, self.deadline - time.monotonic())))
            backoff = min(2 * backoff, _BACKOFF_S[1])

    def _session(self, sock: socket.socket) -> None:
        """Authenticate ``sock``, then keep or drop it by the lower rank's verdict."""
        with self.cond:
            if self.done:
                sock.close()
                return
            self.in_flight += 1
        kept = False
        try:
            end = self.deadline + GRACE_S
            peer = authenticate(sock, self.auth, self.world, max(0.01, end - time.monotonic()))
            kept = self._decide_lower(peer, sock) if self.auth.rank < peer else self._await_verdict(peer, sock, end)
        except LinkRefused as exc:
            log.info("direct links: rank %d refused a link: %s", self.auth.rank, exc)
        finally:
            if not kept:
                sock.close()
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()

    def _decide_lower(self, peer: int, sock: socket.socket) -> bool:
        # Under the lock, so the verdict sent and the socket kept cannot disagree; one byte on a
        # fresh socket does not block.
        with self.cond:
            keep = not self.done and peer not in self.chosen
            sock.settimeout(1.0)
            try:
                sock.sendall(USE if keep else CLOSE)
            except OSError as exc:
                log.info("direct links: rank %d to %d: verdict not sent: %s", self.auth.rank, peer, exc)
                return False
            if keep:
                self.chosen[peer] = sock
                self.cond.notify_all()
            return keep

    def _await_verdict(self, peer: int, sock: socket.socket, end: float) -> bool:
        sock.settimeout(max(0.01, end - time.monotonic()))
        try:
            verdict = sock.recv(1)
        except OSError as exc:
            raise LinkRefused(f"no verdict from rank {peer}: {exc.strerror or exc}") from None
        if verdict != USE:
            return False
        with self.cond:
            if self.done or peer in self.chosen:
                return False
            self.chosen[peer] = sock
            self.cond.notify_all()
            return True


__all__ = ["CLOSE", "USE", "connect_peers", "local_endpoints", "open_listener"]
