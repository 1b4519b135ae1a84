"""The communicator of a direct job: collectives over links, the store where a link fails.

Every rank publishes its endpoints through the job's rendezvous store and connects to every
peer (``connect``); then each allreduce runs a collective of point-to-point messages
(``collectives``), every message under a round's key and sealed under it as a stored value is.
A message whose link is down, or goes down, travels through the store under the same key and
with the same bytes, so the sum, and the model, is the same whichever way each one went.

What a dropped link may have lost is sent again: each rank keeps what it sent on each link in
the rounds a peer may still read (this one, the last, and with restarts the rounds since a
checkpoint), and puts it on the store when the link goes. A rank restarted within its attempt
(Lambda's retry, a continuation) finds its endpoints already published and uses the store only;
its peers lost their links to it when its first run ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lambdaml import keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.channels.kinds.direct import DirectSpec, split_host_port
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.direct.collectives import BLOCKS, MERGED, PIECE, doubling, scatter_gather
from lambdaml.comm.direct.connect import connect_peers, local_endpoints, open_listener
from lambdaml.comm.direct.endpoints import Endpoints
from lambdaml.comm.direct.handshake import LinkAuth
from lambdaml.comm.direct.links import Links
from lambdaml.comm.patterns import PLAIN, ChunkCodec
from lambdaml.comm.ring import RingExchange
from lambdaml.comm.rounds import Round
from lambdaml.errors import SyncTimeout
from lambdaml.seal import Sealer

log = logging.getLogger(__name__)

_TAGS = (PIECE, MERGED, BLOCKS, RingExchange.tag)


class DirectCommunicator(ChannelCommunicator):
    """A channel communicator over ``store`` (the rendezvous store) whose allreduce goes over links.

    ``pattern`` is the storage pattern of collectives links do not carry (a compressing codec).
    """

    #: The most bytes of sent link values kept for a dropped link's hand-over beyond the last two
    #: rounds (a restarted peer's replay since its checkpoint): a large model's rounds are not all kept.
    kept_bytes: int = 256 << 20

    def __init__(
        self, store: Channel, job_id: str, rank: int, world_size: int, *, spec: DirectSpec, secret: bytes,
        **options: Any,
    ) -> None:  # fmt: skip
        super().__init__(store, job_id, rank, world_size, secret=secret, **options)
        self.spec = spec
        self._secret = secret
        self._links: Links | None = None
        self._lock = threading.Lock()
        self._sent: dict[int, dict[int, list[tuple[str, bytes]]]] = {}  # peer -> round -> what went on its link
        self._stored: dict[int, set[str]] = {}  # round -> the keys this rank put on the store
        self._fallback_rounds: set[int] = set()
        self.dropped: dict[int, str] = {}  # peer -> why its link went
        self.restarted = False  # this rank's endpoints were published by an earlier run in its attempt
        self._short = False  # whether the kept link values have fallen short of the rounds a restart replays

    # ---- links -----------------------------------------------------------------------

    def connect(self) -> None:
        """Publish this rank's endpoints, read every peer's and link to each one reachable by the
        spec's deadline (once; the first allreduce calls it)."""
        if self._links is not None:
            return
        with self.timed():
            mine = keys.link_endpoints_key(self.job_id, self.rank, self.attempt)
            sockets = {}
            if self.channel.get_many([mine]):
                self.restarted = True
                log.info("rank %d: restarted within its attempt; its values go through the store", self.rank)
            else:
                sockets = self._link_peers(mine)
            sealer = Sealer(self._secret if self.spec.links_carry_mac else None)
            self._links = Links(
                sockets, sealer, admit=self._admit, on_drop=self._on_drop,
                goodbye=lambda peer: keys.link_goodbye_key(self.job_id, peer, self.attempt),
            )  # fmt: skip
        log.info("rank %d: linked to %d of %d peers", self.rank, len(sockets), self.world_size - 1)

    def _link_peers(self, mine: str) -> dict[int, Any]:
        spec = self.spec
        listener = open_listener(spec.listen_address)
        try:
            reflector = None if spec.reflector is None else split_host_port(spec.reflector)
            self.channel.put(mine, local_endpoints(listener, reflector, spec.link_timeout_s).to_json())
            others = {r: keys.link_endpoints_key(self.job_id, r, self.attempt) for r in range(self.world_size)}
            del others[self.rank]
            found = self.channel.wait_for(list(others.values()), self.timeout_s)
            endpoints = {r: Endpoints.from_json(found[key], f"rank {r}'s endpoints") for r, key in others.items()}
            auth = LinkAuth(self._secret, self.job_id, self.attempt, self.rank)
            return dict(connect_peers(listener, auth, self.world_size, endpoints, spec.link_timeout_s))
        finally:
            listener.close()

    def _admit(self, peer: int, key: str) -> str | None:
        """Why ``peer`` may not send a frame under ``key`` now; None where it may."""
        try:
            parsed = keys.parse_comm_key(key)
        except ValueError:
            return "not a key of a round"
        if parsed.job_id != self.job_id or parsed.attempt != self.attempt:
            return "a key of another job or attempt"
        if parsed.tag not in _TAGS:
            return "not a key of a link collective"
        sender = parsed.chunk if parsed.tag == MERGED else parsed.rank
        if sender != peer:
            return f"a key of rank {sender}'s"
        if parsed.round < self.round - 1:  # self.round - 1: the round in progress, or the last one
            return f"round {parsed.round} is over"
        return None

    def _on_drop(self, peer: int, why: str) -> None:
        """A link went: what it carried in the rounds the peer may still read goes on the store."""
        log.warning(
            "rank %d: the link to rank %d is down (%s); their values go through the store", self.rank, peer, why
        )
        with self._lock:
            self.dropped[peer] = why
            sent = self._sent.pop(peer, {})
            fresh = [
                (key, value)
                for number in sorted(sent)
                for key, value in sent[number]
                if key in self._unstored(number, [key])
            ]
        if not fresh:
            return
        try:
            self.channel.put_many(fresh)  # rank 0 clears them at the end
        except Exception as exc:  # on a link's thread: the peer's wait for them ends in its timeout
            log.warning("rank %d: could not hand rank %d's values to the store: %s", self.rank, peer, exc)

    def drop_link(self, peer: int, why: str = "dropped by this rank") -> None:
        """Take the link to ``peer`` down now, as a network fault would."""
        if self._links is not None:
            self._links.drop(peer, why)

    # ---- the collective ----------------------------------------------------------------

    def _reduce(self, x: Array, codec: ChunkCodec) -> Array:
        if codec is not PLAIN:  # links carry plain values; a compressed round goes through the store
            return super()._reduce(x, codec)
        round_ = self._open_link_round()
        post = _RoundPost(self, round_)
        total = doubling(post, x) if x.nbytes <= self.spec.small_bytes else scatter_gather(post, x)
        # Every rank's values of this round reached this one, so every rank is past the last round.
        round_.retire()
        return total

    def exchange(self, tag: str, neighbours: Sequence[int], value: bytes) -> dict[int, memoryview]:
        """The neighbour exchange over links, each value under the key the store would hold it at."""
        with self.timed():
            round_ = self._open_link_round()
            mine = round_.key(tag, rank=self.rank)
            self.post(round_, dict.fromkeys(neighbours, mine), value)
            got = self.fetch(round_, {j: round_.key(tag, rank=j) for j in neighbours})
            round_.retire(behind=round_.world_size // 2)
            return got

    def _open_link_round(self) -> Round:
        """The next round, over links (set up on the first), forgetting what no peer reads again."""
        self.connect()
        round_ = self._open_round()
        self._last_pattern = None
        self._forget_before(round_.number - 1 - self.extra_retention)
        return round_

    def _unstored(self, number: int, keys: Sequence[str]) -> list[str]:
        """The keys of round ``number`` this rank has not put on the store yet, claimed now (under the lock)."""
        done = self._stored.setdefault(number, set())
        fresh = [key for key in dict.fromkeys(keys) if key not in done]
        done.update(fresh)
        return fresh

    def _forget_before(self, oldest: int) -> None:
        """Keep what went on the links from round ``oldest`` on, within ``kept_bytes``: beyond it,
        only this round's and the last, which a live peer may still be reading."""
        with self._lock:
            rounds = sorted({n for sent in self._sent.values() for n in sent if n >= oldest})
            size = {n: sum(len(v) for sent in self._sent.values() for _, v in sent.get(n, ())) for n in rounds}
            short = False
            while len(rounds) > 1 and sum(size[n] for n in rounds) > self.kept_bytes:  # with this round's: two
                rounds.pop(0)
                short = True
            if short and not self._short:
                self._short = True
                log.warning(
                    "rank %d keeps its link values of the last %d rounds only (%d MB at most): a peer restarted "
                    "from an earlier checkpoint cannot replay through the store, and its job ends for --resume",
                    self.rank, len(rounds) + 1, self.kept_bytes >> 20,
                )  # fmt: skip
            keep = rounds[0] if rounds else oldest
            for sent in self._sent.values():
                for number in [n for n in sent if n < keep]:
                    del sent[number]
            for number in [n for n in self._stored if n < oldest]:
                del self._stored[number]

    def post(self, round_: Round, peers: Mapping[int, str], value: bytes) -> None:
        """``value`` to each peer under its key: by its link where up, else once on the store."""
        links = self._links
        assert links is not None
        stored = []
        for peer, key in peers.items():
            if peer in links.peers:
                with self._lock:
                    if peer not in self.dropped:
                        self._sent.setdefault(peer, {}).setdefault(round_.number, []).append((key, value))
                if links.send(peer, key, (value,)):
                    continue
            stored.append(key)
        if not stored:
            return
        with self._lock:
            fresh = self._unstored(round_.number, stored)
        if fresh:
            self._fallback_rounds.add(round_.number)
            round_.put_many([(key, value) for key in fresh])

    def fetch(self, round_: Round, senders: Mapping[int, str], nbytes: int | None = None) -> dict[int, memoryview]:
        """Each sender's value under its key: from its link, or from the store where the link is or goes down."""
        links = self._links
        assert links is not None
        deadline = time.monotonic() + self.timeout_s
        got: dict[int, memoryview] = {}
        for peer, key in senders.items():
            if peer in links.peers:
                value = links.receive(peer, key, max(0.0, deadline - time.monotonic()))
                if value is not None:
                    got[peer] = value
        missing = {peer: key for peer, key in senders.items() if peer not in got}
        if missing:
            self._fallback_rounds.add(round_.number)
            left = deadline - time.monotonic()
            if left <= 0:
                raise SyncTimeout(f"rank {self.rank} waited {self.timeout_s:g}s for round {round_.number}")
            lengths = None if nbytes is None else dict.fromkeys(missing.values(), nbytes)
            found = self.channel.wait_for_views(list(missing.values()), left, lengths=lengths)
            got.update((peer, found[key]) for peer, key in missing.items())
        return got

    # ---- the end ---------------------------------------------------------------------------

    def finish(self, *, early: bool = False) -> None:
        """Close the links (saying goodbye at the job's end), then finish as on a store."""
        self.close(goodbye=not early)
        super().finish(early=early)

    def close(self, *, goodbye: bool = False) -> None:
        """Close the links; without ``goodbye`` the peers take it as a fault and use the store."""
        links = self._links
        if links is None:
            return
        if not goodbye:  # what the peers have not read yet goes on the store
            for peer in links.peers:
                links.drop(peer, f"rank {self.rank} stops here")
        links.close(keys.link_goodbye_key(self.job_id, self.rank, self.attempt) if goodbye else None, self.timeout_s)

    def abandon(self) -> None:
        """This rank fails: hand what its peers have not read to the store where it still can."""
        try:
            self.close()
        except Exception as exc:  # the store may be what failed; the restart replays the rounds
            log.warning("rank %d: could not hand its last values to the store: %s", self.rank, exc)

    def link_stats(self) -> dict[str, float]:
        links = self._links
        stats = links.stats if links is not None else None
        return {
            "links_direct": float(len(links.peers) if links is not None else 0),
            "links_dropped": float(len(self.dropped)),
            "rounds_fallback": float(len(self._fallback_rounds)),
            "bytes_sent_links": float(stats.bytes_sent if stats else 0),
            "bytes_received_links": float(stats.bytes_received if stats else 0),
        }

    def stats(self) -> dict[str, float]:
        return {**super().stats(), **self.link_stats()}


class _RoundPost:
    """One round of a direct communicator, as a collective posts through it."""

    def __init__(self, comm: DirectCommunicator, round_: Round) -> None:
        self._comm = comm
        self._round = round_
        self.rank = round_.rank
        self.world_size = round_.world_size

    def key(self, tag: str, *, rank: int | None, chunk: int | None = None) -> str:
        return self._round.key(tag, rank=rank, chunk=chunk)

    def send(self, peers: Mapping[int, str], value: bytes) -> None:
        self._comm.post(self._round, peers, value)

    def receive(self, senders: Mapping[int, str], nbytes: int) -> dict[int, memoryview]:
        return self._comm.fetch(self._round, senders, nbytes)
