"""The in-memory channel: a dict of one process, for tests and single-process runs."""

from __future__ import annotations

from typing import Literal

from lambdaml.catalogue import ChannelInfo
from lambdaml.config.channel import ChannelSpec


class MemorySpec(ChannelSpec):
    kind: Literal["memory"] = "memory"


DESCRIPTION = ChannelInfo(
    "memory",
    "lambdaml.channels.memory:MemoryChannel",
    spec=f"{__name__}:MemorySpec",
    title="in-memory",
    connects_processes=False,
    authenticates_clients=True,  # no other party reaches a process's memory
)
