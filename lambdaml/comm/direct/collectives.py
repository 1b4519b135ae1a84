"""Allreduce over point-to-point messages, its sums in rank order like the storage patterns'.

A ring reduce-scatter adds each chunk in a rotated order (ranks j+1, ..., j), which rounds
differently from the storage patterns' left fold ``x0 + x1 + ... + x_{W-1}``. So neither
collective here lets a partial sum travel: the bandwidth one sends every raw piece to its
chunk's owner, on the ring's shifted schedule (step s: to rank + s, from rank - s), and the
owner folds the W pieces in rank order, as ScatterReduce does; the latency one gathers whole
vectors by recursive doubling (Bruck's dissemination, any W) and every rank folds all W
itself. Either way the result is bit-identical to the storage patterns' on the same inputs.

Messages are posted through a ``Post``: links where they are up, the store where not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from lambdaml import codec
from lambdaml.arrays import Array
from lambdaml.comm.patterns import chunk_bounds, rank_order_sum

PIECE, MERGED, BLOCKS = "dpiece", "dmerged", "dblocks"


class Post(Protocol):
    """One round's point-to-point messages, each under a key of the round (written once)."""

    rank: int
    world_size: int

    def key(self, tag: str, *, rank: int | None, chunk: int | None = None) -> str: ...

    def send(self, peers: Mapping[int, str], value: bytes) -> None:
        """``value`` to each peer under its key (``peers``: peer -> key), all at once."""

    def receive(self, senders: Mapping[int, str], nbytes: int) -> dict[int, memoryview]:
        """Each sender's value under its key (``senders``: sender -> key), once all are there."""


def scatter_gather(post: Post, x: Array) -> Array:
    """Reduce-scatter (raw pieces to their owners, folded in rank order) then all-gather."""
    world, rank = post.world_size, post.rank
    flat = np.ascontiguousarray(x).reshape(-1)
    bounds = chunk_bounds(flat.size, world)
    order = [(rank + s) % world for s in range(1, world)]  # the ring's shifted schedule
    for peer in order:
        lo, hi = bounds[peer]
        post.send({peer: post.key(PIECE, rank=rank, chunk=peer)}, codec.encode(flat[lo:hi]))
    lo, hi = bounds[rank]
    senders = {q: post.key(PIECE, rank=q, chunk=rank) for q in range(world) if q != rank}
    raw = post.receive(senders, codec.encoded_bytes((hi - lo,), flat.dtype))
    pieces = {
        q: codec.decode(raw[q], dtype=flat.dtype, shape=(hi - lo,), what=f"rank {q}'s piece of chunk {rank}")
        for q in senders
    }
    out = np.empty_like(flat)
    rank_order_sum((flat[lo:hi] if q == rank else pieces[q] for q in range(world)), into=out[lo:hi])
    post.send({peer: post.key(MERGED, rank=None, chunk=rank) for peer in order}, codec.encode(out[lo:hi]))
    for q, value in _merged(post, flat, bounds).items():
        out[bounds[q][0] : bounds[q][1]] = value
    return out.reshape(x.shape)


def _merged(post: Post, flat: Array, bounds: list[tuple[int, int]]) -> dict[int, Array]:
    owners = [q for q in range(post.world_size) if q != post.rank]
    got: dict[int, Array] = {}
    for size in sorted({bounds[q][1] - bounds[q][0] for q in owners}):  # chunks differ by at most one element
        senders = {q: post.key(MERGED, rank=None, chunk=q) for q in owners if bounds[q][1] - bounds[q][0] == size}
        raw = post.receive(senders, codec.encoded_bytes((size,), flat.dtype))
        got.update(
            (q, codec.decode(raw[q], dtype=flat.dtype, shape=(size,), what=f"merged chunk {q}")) for q in senders
        )
    return got


def doubling(post: Post, x: Array) -> Array:
    """Gather every rank's whole vector in ceil(log2 W) steps, then fold them in rank order."""
    world, rank = post.world_size, post.rank
    flat = np.ascontiguousarray(x).reshape(-1)
    held = [flat]  # the vectors of ranks rank, rank + 1, ... (mod W)
    step = 0
    while len(held) < world:
        count = min(len(held), world - len(held))
        distance = len(held)
        to, source = (rank - distance) % world, (rank + distance) % world
        post.send({to: post.key(BLOCKS, rank=rank, chunk=step)}, codec.encode(np.stack(held[:count])))
        shape = (count, flat.size)
        raw = post.receive({source: post.key(BLOCKS, rank=source, chunk=step)}, codec.encoded_bytes(shape, flat.dtype))
        blocks = codec.decode(raw[source], dtype=flat.dtype, shape=shape, what=f"rank {source}'s vectors")
        held.extend(blocks)
        step += 1
    total = rank_order_sum(held[(q - rank) % world] for q in range(world))
    return total.reshape(x.shape)
