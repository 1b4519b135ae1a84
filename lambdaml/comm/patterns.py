"""Collective patterns over a channel, written once for every channel.

The channel is the only thing that differs between S3, Redis, Memcached and DynamoDB.
Both patterns add the W contributions in rank order 0..W-1, element by element, so they
return bit-identical sums: to each other and to the left fold ``x0 + x1 + ... + x_{W-1}``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from lambdaml import codec

if TYPE_CHECKING:
    from lambdaml.comm.channel import ChannelCommunicator

log = logging.getLogger(__name__)


def chunk_bounds(size: int, parts: int) -> list[tuple[int, int]]:
    """``np.array_split``'s boundaries: the first ``size % parts`` chunks hold one extra element.

    With ``size < parts`` the last chunks are empty; they still travel (as 32-byte values)
    so that every rank issues the same 3W-2 requests whatever the vector's length.
    """
    base, extra = divmod(size, parts)
    bounds: list[tuple[int, int]] = []
    start = 0
    for j in range(parts):
        stop = start + base + (1 if j < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class AllReduce:
    """One aggregator (rank 0): W-1 puts in, one merged put out, W-1 gets of it.

    The aggregator keeps its own vector in memory and fetches the others concurrently;
    contributions are summed in rank order so every run reduces identically. Simple, but
    the aggregator moves W times the vector, so it is the bottleneck for large W and d.
    """

    def allreduce(self, comm: ChannelCommunicator, x: np.ndarray, round_: int) -> np.ndarray:
        if comm.world_size == 1:
            return x.copy()
        timeout = comm.timeout_s
        merged_key = comm.key(round_, "ar", rank=None)
        if comm.rank != 0:
            comm.put(round_, comm.key(round_, "ar", rank=comm.rank), codec.encode(x))
            raw = comm.channel.wait_for([merged_key], timeout)[merged_key]
            # Rank 0 merged this round, so every rank had posted it: none reads round_-1 again.
            comm.retire_round(round_ - 1)
            return codec.decode(raw, dtype=x.dtype, shape=x.shape, what=f"merged value of round {round_}").copy()
        part_keys = [comm.key(round_, "ar", rank=r) for r in range(1, comm.world_size)]
        parts = comm.channel.wait_for(part_keys, timeout)
        values = (
            codec.decode(parts[key], dtype=x.dtype, shape=x.shape, what=f"rank {r}'s value of round {round_}")
            for r, key in enumerate(part_keys, start=1)
        )
        total = np.add(x, next(values))  # rank order: x0 + x1, then + x2 ...; a new array, x is untouched
        for value in values:
            total += value
        comm.put(round_, merged_key, codec.encode(total))
        # Every rank has posted this round, so all have read the previous round's merged value.
        comm.retire_round(round_ - 1)
        return total


class ScatterReduce:
    """Every rank owns 1/W of the vector: W-1 concurrent puts, W-1 gets, 1 put, W-1 gets.

    Rank i splits x into W contiguous chunks, puts chunk j for its owner j, sums the W
    pieces of its own chunk (its own piece from memory) and puts the merged chunk; then
    everyone gathers the W-1 merged chunks it does not own. That is 3W-2 requests of about
    d/W elements per rank per round, so no rank moves more than about 3 vectors, where
    AllReduce's aggregator moves W+1.
    """

    tag = "sr"

    def allreduce(self, comm: ChannelCommunicator, x: np.ndarray, round_: int) -> np.ndarray:
        world, rank = comm.world_size, comm.rank
        flat = np.ascontiguousarray(x).reshape(-1)
        if world == 1:
            return flat.copy().reshape(x.shape)
        channel, timeout = comm.channel, comm.timeout_s
        bounds = chunk_bounds(flat.size, world)

        # 1. Scatter: my piece of every chunk I do not own goes to its owner, all at once.
        comm.put_many(
            round_,
            [
                (comm.key(round_, self.tag, rank=rank, chunk=j), codec.encode(flat[lo:hi]))
                for j, (lo, hi) in enumerate(bounds)
                if j != rank
            ],
        )

        # 2. Reduce my chunk: the W-1 other pieces, added in rank order around my own.
        lo, hi = bounds[rank]
        piece_keys = {r: comm.key(round_, self.tag, rank=r, chunk=rank) for r in range(world) if r != rank}
        pieces = channel.wait_for(list(piece_keys.values()), timeout)
        # Safe: rank r writes its pieces of this round only after its call for round_-1
        # returned, i.e. after it wrote every round_-1 key it writes (pieces, merged chunk)
        # and read every round_-1 value it reads (its chunk's pieces, all merged chunks).
        # Holding this round's piece from every other rank, and being past round_-1 itself,
        # this rank knows nobody touches round_-1 again, and deletes what it wrote there:
        # the channel keeps the last two rounds (three while a delete runs).
        comm.retire_round(round_ - 1)

        def piece(r: int) -> np.ndarray:
            if r == rank:
                return flat[lo:hi]
            return codec.decode(
                pieces[piece_keys[r]],
                dtype=flat.dtype,
                shape=(hi - lo,),
                what=f"rank {r}'s piece of chunk {rank} in round {round_}",
            )

        total = np.add(piece(0), piece(1))  # a new, writable array: one pass instead of copy-then-add
        for r in range(2, world):
            total += piece(r)
        comm.put(round_, comm.key(round_, self.tag, rank=None, chunk=rank), codec.encode(total))

        # 3. Gather the merged chunks the other ranks own.
        out = np.empty_like(flat)
        out[lo:hi] = total
        merged_keys = {j: comm.key(round_, self.tag, rank=None, chunk=j) for j in range(world) if j != rank}
        merged = channel.wait_for(list(merged_keys.values()), timeout)
        for j, key in merged_keys.items():
            lo_j, hi_j = bounds[j]
            out[lo_j:hi_j] = codec.decode(
                merged[key], dtype=flat.dtype, shape=(hi_j - lo_j,), what=f"merged chunk {j} of round {round_}"
            )
        return out.reshape(x.shape)
