"""2-D ScatterReduce: the ranks on an r x c grid reduce along rows, then columns, and gather back.

Flat ScatterReduce has every rank issue 3W-2 requests a round, which for large W is what a
round costs on a store. On a grid each rank talks only to the c ranks of its row and the r
of its column: 3(r + c) - 4 requests, about 6 sqrt(W), of about the same total bytes. Where
the channel packs (S3, whose PUTs cost 12.5 GETs), a rank's row pieces go out as one packed
value and its column pieces as another: 4 PUTs a round instead of r + c.
"""

from __future__ import annotations

import math

import numpy as np

from lambdaml.arrays import Array
from lambdaml.comm.patterns import (
    ChunkCodec,
    Pattern,
    PlainCodec,
    ScatterReduce,
    chunk_bounds,
    owner_sum,
    receive_merged,
    receive_pieces,
    send_pieces,
)
from lambdaml.comm.rounds import Round
from lambdaml.errors import ConfigError


def grid_shape(world: int) -> tuple[int, int]:
    """(rows r, columns c) with r * c == W, r <= c and r as close to sqrt(W) as divides W.

    A prime W has no such grid but 1 x W: the 2-D pattern is then flat ScatterReduce.
    """
    rows = max(r for r in range(1, math.isqrt(world) + 1) if world % r == 0)
    return rows, world // rows


class ScatterReduce2D(Pattern):
    """Hierarchical ScatterReduce on an r x c grid (``grid_shape``), summed in a fixed order.

    Rank k sits in row k % r and column k // r, and owns chunk k of the W chunks
    (``chunk_bounds``); column b's r chunks are contiguous, its *segment*. A round:

    1. rows: my piece of every other column's segment to that column's rank in my row
       (c-1 puts, c-1 gets); I sum my column's segment over my row, in column order;
    2. columns: the row sums of every other chunk of my segment to its owner in my column
       (r-1 puts, r-1 gets); I sum my chunk over the column, in row order, and put it;
    3. columns: the r-1 other merged chunks of my segment (r-1 gets), and I put the
       assembled segment for my row;
    4. rows: the c-1 other segments from my row (c-1 gets).

    Each chunk's sum is made once, by its owner, so every rank returns the same bits, and
    each run the same: the flat sum regrouped (rows first), equal to it within rounding,
    not bit for bit. Values travel as plain codec tensors: the intermediate row sums would
    need a compressor's error feedback of their own, so compressed jobs refuse this pattern.
    """

    row_tag = "g2r"  # row pieces (rank: sender, chunk: receiver) and assembled segments (rank None)
    column_tag = "g2c"  # column pieces (rank: sender, chunk: receiver) and merged chunks (rank None)

    def chunks(self, world: int) -> int:
        return world

    def allreduce(self, round_: Round, x: Array, codec: ChunkCodec) -> Array:
        if not isinstance(codec, PlainCodec):
            raise ConfigError("scatter_reduce_2d sends plain values only; compression needs another pattern")
        world, me, number = round_.world_size, round_.rank, round_.number
        r, c = grid_shape(world)
        if r == 1:  # a prime W: a 1 x W grid is flat ScatterReduce
            return ScatterReduce().allreduce(round_, x, codec)
        row, col = me % r, me // r
        flat = np.ascontiguousarray(x).reshape(-1)
        bounds = chunk_bounds(flat.size, world)

        def segment(b: int) -> tuple[int, int]:
            return bounds[b * r][0], bounds[b * r + r - 1][1]

        row_peers = [b * r + row for b in range(c)]  # by column
        col_peers = [col * r + a for a in range(r)]  # by row; also the chunks of my segment
        seg_lo, seg_hi = segment(col)

        # 1. Rows: my piece of each other segment to its column's rank in my row; sum mine over the row.
        def row_piece(peer: int) -> Array:
            return flat[slice(*segment(peer // r))]

        send_pieces(round_, codec, self.row_tag, row_peers, row_piece)
        raw = receive_pieces(round_, codec, self.row_tag, row_peers, row_piece)
        mine = flat[seg_lo:seg_hi]
        row_sum = owner_sum(codec, me, mine, mine, row_peers, raw, f"row piece in round {number}")

        # 2. Columns: the row sum of each other chunk of my segment to its owner; sum mine over the column.
        def part(k: int) -> slice:
            return slice(bounds[k][0] - seg_lo, bounds[k][1] - seg_lo)

        def column_piece(peer: int) -> Array:
            return row_sum[part(peer)]

        send_pieces(round_, codec, self.column_tag, col_peers, column_piece)
        raw = receive_pieces(round_, codec, self.column_tag, col_peers, column_piece)
        own = row_sum[part(me)]
        # Safe: the only ranks that read what I wrote in the previous round are my row and my
        # column, and I now hold this round's pieces from all of them, which each wrote only
        # after its call for the previous round returned (every read there done).
        round_.retire()
        what = f"column piece in round {number}"
        out = np.empty_like(flat)
        seg = out[seg_lo:seg_hi]
        summed = owner_sum(codec, me, own, own, col_peers, raw, what, into=seg[part(me)])
        round_.put(round_.key(self.column_tag, rank=None, chunk=me), codec.encode_merged(me, summed)[0])

        # 3. Columns: the other merged chunks of my segment; my assembled segment for my row.
        keys = {peer: round_.key(self.column_tag, rank=None, chunk=peer) for peer in col_peers if peer != me}
        receive_merged(
            round_, codec, keys, lambda peer: seg[part(peer)], lambda peer: f"merged chunk {peer} of round {number}"
        )
        round_.put(round_.key(self.row_tag, rank=None, chunk=me), codec.encode_merged(me, seg)[0])

        # 4. Rows: the other columns' segments, from the ranks of my row.
        keys = {peer: round_.key(self.row_tag, rank=None, chunk=peer) for peer in row_peers if peer != me}
        column = {peer: b for b, peer in enumerate(row_peers)}
        receive_merged(
            round_,
            codec,
            keys,
            lambda peer: out[slice(*segment(column[peer]))],
            lambda peer: f"segment {column[peer]} of round {number}",
        )
        return out.reshape(x.shape)
