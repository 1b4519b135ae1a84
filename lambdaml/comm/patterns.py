"""Collective patterns over a channel, written once for every channel.

The channel is the only thing that differs between S3, Redis, Memcached and DynamoDB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lambdaml import codec

if TYPE_CHECKING:
    from lambdaml.comm.channel import ChannelCommunicator


class AllReduce:
    """One aggregator (rank 0): W-1 puts in, one merged put out, W-1 gets of it.

    The aggregator keeps its own vector in memory and fetches the others concurrently;
    contributions are summed in rank order so every run reduces identically.
    """

    def allreduce(self, comm: ChannelCommunicator, x: np.ndarray, round_: int) -> np.ndarray:
        timeout = comm.timeout_s
        merged_key = comm.key(round_, "ar", rank=None)
        if comm.rank != 0:
            comm.channel.put(comm.key(round_, "ar", rank=comm.rank), codec.encode(x))
            raw = comm.channel.wait_for([merged_key], timeout)[merged_key]
            return codec.decode(raw, dtype=x.dtype, shape=x.shape, what=f"merged value of round {round_}").copy()
        part_keys = [comm.key(round_, "ar", rank=r) for r in range(1, comm.world_size)]
        parts = comm.channel.wait_for(part_keys, timeout)
        total = x.copy()
        for r, key in enumerate(part_keys, start=1):
            total += codec.decode(parts[key], dtype=x.dtype, shape=x.shape, what=f"rank {r}'s value of round {round_}")
        comm.channel.put(merged_key, codec.encode(total))
        # Every rank has posted this round, so all have read the previous round's merged value.
        comm.retire_round(round_ - 1)
        return total
