"""Compressed allreduce with error feedback on both sides (EF-SGD, 1-bit Adam).

This is the communicator's own AllReduce or ScatterReduce with a compressing codec: each
rank compresses its piece of every chunk with its own error feedback and sends it to the
chunk's owner; the owner decompresses the pieces, sums them in rank order, compresses the
sum with an error feedback of its own, and sends that merged chunk back. So both
directions carry compressed bytes: about 3 d/W compressed elements per rank per round
under ScatterReduce, where the uncompressed one moves 3 d/W floats. A few values (batch
sizes, loss sums) ride along uncompressed and are summed exactly, in the pieces and
merged value of chunk 0.

Over a channel communicator the pieces travel as codec bundles under write-once keys;
over any other communicator (torch.distributed) the same arithmetic runs on its plain
allreduce, with every rank playing owner for every chunk, so results match but bytes are
not saved.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from lambdaml import codec
from lambdaml.arrays import Array
from lambdaml.comm.base import Communicator
from lambdaml.comm.channel import ChannelCommunicator
from lambdaml.comm.patterns import chunk_bounds, rank_order_sum
from lambdaml.compression import Compressor, ErrorFeedback, Payload
from lambdaml.errors import CodecError

_EXACT = "exact"  # the bundle entry of the uncompressed extras; no compressor uses the name
_WORKER, _OWNER = 0, 1  # whose compression a random stream is for


class CompressedAllreduce:
    """One rank's side of compressed allreduce: the compressor and every error-feedback memory.

    ``scatter``: W chunks (ScatterReduce) or one (AllReduce), as the communicator's pattern
    cuts them. The memories are state that a checkpoint must carry (``state_dict``), or a
    resumed run would send different bytes.
    """

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

    def allreduce(self, comm: Communicator, x: Array, exact: Array | None = None) -> tuple[Array, Array | None]:
        """Sum over ranks of ``x`` (compressed) and of ``exact`` (not), identical on every rank."""
        flat = np.ascontiguousarray(x).reshape(-1)
        extras = None if exact is None else np.ascontiguousarray(exact, dtype=flat.dtype).reshape(-1)
        if comm.world_size == 1:
            return flat.copy(), None if extras is None else extras.copy()
        call = _CompressingCodec(self, self.calls, extras)
        self.calls += 1
        if not isinstance(comm, ChannelCommunicator):
            return self._over_allreduce(comm, flat, call)
        chunks = comm.pattern.chunks(comm.world_size)
        if chunks != self.parts:
            raise ValueError(f"compressed allreduce for {self.parts} chunks over a pattern of {chunks}")
        summed = comm.allreduce_with(flat, call)
        return np.asarray(summed, dtype=flat.dtype), call.exact_sum

    def compress_piece(self, chunk: int, values: Array, call: int) -> tuple[Payload, Array]:
        """My piece of ``chunk``, compressed with my memory of it: the payload and what it decodes to."""
        return self.sent[chunk].compress(self.compressor, values, self._rng(_WORKER, self.rank, call))

    def compress_merged(self, chunk: int, total: Array, call: int) -> tuple[Payload, Array]:
        """The merged ``chunk``, compressed with its owner's memory (chunk j's owner is rank j)."""
        return self.merged[chunk].compress(self.compressor, total, self._rng(_OWNER, chunk, call))

    def _rng(self, role: int, who: int, call: int) -> np.random.Generator | None:
        if not self.compressor.stochastic:
            return None
        return np.random.default_rng([self.seed, role, who, call])

    def _over_allreduce(self, comm: Communicator, flat: Array, call: _CompressingCodec) -> tuple[Array, Array | None]:
        """The same arithmetic on a plain allreduce: every rank owns (and compresses) every chunk."""
        bounds = chunk_bounds(flat.size, self.parts)
        extras = call.exact
        sent = np.empty_like(flat)
        for j, (lo, hi) in enumerate(bounds):
            _, sent[lo:hi] = self.compress_piece(j, flat[lo:hi], call.number)
        n_extras = 0 if extras is None else extras.size
        summed = comm.allreduce(sent if extras is None else np.concatenate([sent, extras]))
        out = np.empty_like(flat)
        for j, (lo, hi) in enumerate(bounds):
            _, out[lo:hi] = self.compress_merged(j, summed[lo:hi], call.number)
        return out, None if extras is None else summed[flat.size : flat.size + n_extras]

    def state_dict(self) -> dict[str, Array]:
        state: dict[str, Array] = {"calls": np.array(self.calls)}
        for side, memories in (("sent", self.sent), ("merged", self.merged)):
            for j, ef in enumerate(memories):
                state.update({f"{side}.{j}.{k}": v for k, v in ef.state_dict().items()})
        return state

    def load_state_dict(self, state: Mapping[str, Array]) -> None:
        self.calls = int(state["calls"])
        for side, memories in (("sent", self.sent), ("merged", self.merged)):
            for j, ef in enumerate(memories):
                prefix = f"{side}.{j}."
                ef.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})


class _CompressingCodec:
    """The ``ChunkCodec`` of one compressed call: compressed pieces and merged chunks, and the
    exact extras riding in chunk 0 (the owner of chunk 0 sums them in rank order)."""

    def __init__(self, state: CompressedAllreduce, number: int, exact: Array | None) -> None:
        self.state = state
        self.number = number  # which call of ``state`` this is: it keys the random streams
        self.exact = exact
        self.exact_pieces: dict[int, Array] = {}  # chunk 0's owner: each rank's extras
        self.exact_sum: Array | None = None
        self.piece_lengths: dict[int, int] = {}  # by chunk: the length of this rank's piece of it

    def encode_piece(self, chunk: int, values: Array) -> bytes:
        payload, _ = self.state.compress_piece(chunk, values, self.number)
        data = _bundle(payload, self._extras(chunk))
        self.piece_lengths[chunk] = len(data)
        return data

    def piece_bytes(self, chunk: int, like: Array) -> int | None:
        """Every compressor's payload has shapes set by the piece's length alone (its decompress
        checks them), and every rank's piece of a chunk has the same length and extras: so each is as
        long as this rank's piece of it, encoded or (its own chunk) counted."""
        return self.piece_lengths.get(chunk)

    def own_piece(self, chunk: int, values: Array) -> Array:
        payload, q = self.state.compress_piece(chunk, values, self.number)
        if chunk == 0 and self.exact is not None:
            self.exact_pieces[self.state.rank] = self.exact
        self.piece_lengths[chunk] = codec.bundle_bytes(_entries(payload, self._extras(chunk)))
        return q

    def _extras(self, chunk: int) -> Array | None:
        return self.exact if chunk == 0 else None

    def decode_piece(self, chunk: int, sender: int, raw: bytes | memoryview, like: Array, what: str) -> Array:
        value, extra = self._unbundle(raw, like.size, chunk, what)
        if chunk == 0 and extra is not None:
            self.exact_pieces[sender] = extra
        return value

    def encode_merged(self, chunk: int, total: Array) -> tuple[bytes, Array]:
        payload, q = self.state.compress_merged(chunk, total, self.number)
        if chunk == 0 and self.exact is not None:
            self.exact_sum = rank_order_sum(self.exact_pieces[r] for r in range(self.state.world))
        return _bundle(payload, self.exact_sum if chunk == 0 else None), q

    def decode_merged(self, chunk: int, raw: bytes | memoryview, like: Array, what: str) -> Array:
        value, extra = self._unbundle(raw, like.size, chunk, what)
        if chunk == 0:
            self.exact_sum = extra
        return value

    def _unbundle(self, raw: bytes | memoryview, size: int, chunk: int, what: str) -> tuple[Array, Array | None]:
        payload = dict(codec.decode_bundle(raw, what=what))
        extra = payload.pop(_EXACT, None)
        extras = self.exact if chunk == 0 else None
        if extras is not None and (extra is None or extra.dtype != extras.dtype or extra.shape != extras.shape):
            raise CodecError(f"{what} lacks its {extras.size} uncompressed {extras.dtype} values")
        return self.state.compressor.decompress(payload, size), extra


def _entries(payload: Payload, extras: Array | None) -> Mapping[str, Array]:
    return payload if extras is None else {**payload, _EXACT: extras}


def _bundle(payload: Payload, extras: Array | None) -> bytes:
    return codec.encode_bundle(_entries(payload, extras))
