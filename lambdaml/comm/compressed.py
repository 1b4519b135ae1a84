"""Compressed allreduce with error feedback on both sides (EF-SGD, 1-bit Adam).

The vector is cut into chunks, each owned by one rank: W chunks (ScatterReduce) or one
chunk owned by rank 0 (AllReduce). Each rank compresses its piece of every chunk with
its own error feedback and sends it to the owner; the owner decompresses the pieces, sums
them in rank order, compresses the sum with an error feedback of its own, and sends that
merged chunk back. So both directions carry compressed bytes: about 3 d/W compressed
elements per rank per round under ScatterReduce, where the uncompressed one moves 3 d/W
floats. A few values (batch sizes, loss sums) ride along uncompressed and are summed
exactly, in the pieces and merged value of chunk 0.

Over a channel communicator the pieces travel as codec bundles under write-once keys;
over any other communicator (torch.distributed) the same arithmetic runs on its plain
allreduce, with every rank playing owner for every chunk, so results match but bytes are
not saved.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from lambdaml import codec
from lambdaml.comm.base import Communicator
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.patterns import chunk_bounds
from lambdaml.compression import Compressor, ErrorFeedback, Payload
from lambdaml.errors import CodecError

log = logging.getLogger(__name__)

_EXACT = "exact"  # the bundle entry of the uncompressed extras; no compressor uses the name
_WORKER, _OWNER = 0, 1  # whose compression a random stream is for


class CompressedAllreduce:
    """One rank's side of compressed allreduce: the compressor and every error-feedback memory.

    ``scatter``: W chunks (ScatterReduce) or one (AllReduce). The memories are state that
    a checkpoint must carry (``state_dict``), or a resumed run would send different bytes.
    """

    tag = "csr"

    def __init__(
        self, compressor: Compressor, *, rank: int, world: int, scatter: bool, error_feedback: bool, seed: int = 0
    ) -> None:
        self.compressor = compressor
        self.rank, self.world = rank, world
        self.parts = world if scatter else 1
        self.seed = seed
        self.calls = 0  # keys the random streams of stochastic compressors, so replays draw the same
        self.sent = [ErrorFeedback(error_feedback) for _ in range(self.parts)]  # my piece of each chunk
        self.merged = [ErrorFeedback(error_feedback) for _ in range(self.parts)]  # chunks I reduce

    def allreduce(
        self, comm: Communicator, x: np.ndarray, exact: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Sum over ranks of ``x`` (compressed) and of ``exact`` (not), identical on every rank."""
        flat = np.ascontiguousarray(x).reshape(-1)
        extras = None if exact is None else np.ascontiguousarray(exact, dtype=flat.dtype).reshape(-1)
        if comm.world_size == 1:
            return flat.copy(), None if extras is None else extras.copy()
        call = self.calls
        self.calls += 1
        if isinstance(comm, ChannelCommunicator):
            return self._over_channel(comm, flat, extras, call)
        return self._over_allreduce(comm, flat, extras, call)

    def _rng(self, role: int, who: int, call: int) -> np.random.Generator | None:
        if not self.compressor.stochastic:
            return None
        return np.random.default_rng([self.seed, role, who, call])

    def _over_channel(
        self, comm: ChannelCommunicator, flat: np.ndarray, extras: np.ndarray | None, call: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        rank, channel, timeout = self.rank, comm.channel, comm.timeout_s
        bounds = chunk_bounds(flat.size, self.parts)
        round_ = comm.next_round()
        with comm.timed():
            # 1. My piece of every chunk, compressed with my memory of it, to the chunk's owner.
            outgoing = []
            own: tuple[np.ndarray, np.ndarray | None] | None = None
            for j, (lo, hi) in enumerate(bounds):
                payload, q = self.sent[j].compress(self.compressor, flat[lo:hi], self._rng(_WORKER, rank, call))
                extra = extras if j == 0 else None
                if j == rank:
                    own = (q, extra)
                else:
                    outgoing.append((comm.key(round_, self.tag, rank=rank, chunk=j), _bundle(payload, extra)))
            comm.put_many(round_, outgoing)

            # 2. As an owner: decompress the W pieces, sum them in rank order, compress the sum.
            merged: dict[int, np.ndarray] = {}
            merged_extras = None
            if own is not None:
                lo, hi = bounds[rank]
                keys = {r: comm.key(round_, self.tag, rank=r, chunk=rank) for r in range(self.world) if r != rank}
                raw = channel.wait_for(list(keys.values()), timeout)
                pieces = {rank: own}
                for r, key in keys.items():
                    expected = extras if rank == 0 else None
                    pieces[r] = self._unbundle(raw[key], hi - lo, expected, what=f"rank {r}'s piece of chunk {rank}")
                total = np.add(pieces[0][0], pieces[1][0])
                for r in range(2, self.world):
                    total += pieces[r][0]
                rng = self._rng(_OWNER, rank, call)
                payload, merged[rank] = self.merged[rank].compress(self.compressor, total, rng)
                if extras is not None and rank == 0:
                    merged_extras = np.add(pieces[0][1], pieces[1][1])  # type: ignore[arg-type]
                    for r in range(2, self.world):
                        merged_extras += pieces[r][1]
                comm.put(round_, comm.key(round_, self.tag, rank=None, chunk=rank), _bundle(payload, merged_extras))

            # 3. Every merged chunk I do not own.
            others = {j: comm.key(round_, self.tag, rank=None, chunk=j) for j in range(self.parts) if j != rank}
            raw = channel.wait_for(list(others.values()), timeout)
            # Every owner merged this round from every rank's piece (a rank that owns no
            # chunk learns it here): none reads round_-1 again.
            comm.retire_round(round_ - 1)
            out = np.empty_like(flat)
            for j, (lo, hi) in enumerate(bounds):
                if j in merged:
                    out[lo:hi] = merged[j]
                    continue
                value, extra = self._unbundle(raw[others[j]], hi - lo, extras if j == 0 else None, what=f"chunk {j}")
                out[lo:hi] = value
                if j == 0:
                    merged_extras = extra
        return out, merged_extras

    def _over_allreduce(
        self, comm: Communicator, flat: np.ndarray, extras: np.ndarray | None, call: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The same arithmetic on a plain allreduce: every rank owns (and compresses) every chunk."""
        bounds = chunk_bounds(flat.size, self.parts)
        sent = np.empty_like(flat)
        for j, (lo, hi) in enumerate(bounds):
            _, sent[lo:hi] = self.sent[j].compress(self.compressor, flat[lo:hi], self._rng(_WORKER, self.rank, call))
        n_extras = 0 if extras is None else extras.size
        summed = comm.allreduce(sent if extras is None else np.concatenate([sent, extras]))
        out = np.empty_like(flat)
        for j, (lo, hi) in enumerate(bounds):
            _, out[lo:hi] = self.merged[j].compress(self.compressor, summed[lo:hi], self._rng(_OWNER, j, call))
        return out, None if extras is None else summed[flat.size : flat.size + n_extras]

    def _unbundle(
        self, raw: bytes, size: int, extras: np.ndarray | None, *, what: str
    ) -> tuple[np.ndarray, np.ndarray | None]:
        payload = dict(codec.decode_bundle(raw, what=what))
        extra = payload.pop(_EXACT, None)
        if extras is not None and (extra is None or extra.dtype != extras.dtype or extra.shape != extras.shape):
            raise CodecError(f"{what} lacks its {extras.size} uncompressed {extras.dtype} values")
        return self.compressor.decompress(payload, size), extra

    def state_dict(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {"calls": np.array(self.calls)}
        for side, memories in (("sent", self.sent), ("merged", self.merged)):
            for j, ef in enumerate(memories):
                state.update({f"{side}.{j}.{k}": v for k, v in ef.state_dict().items()})
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        self.calls = int(state["calls"])
        for side, memories in (("sent", self.sent), ("merged", self.merged)):
            for j, ef in enumerate(memories):
                prefix = f"{side}.{j}."
                ef.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})


def _bundle(payload: Payload, extras: np.ndarray | None) -> bytes:
    return codec.encode_bundle(payload if extras is None else {**payload, _EXACT: extras})
