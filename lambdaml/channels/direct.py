"""The direct channel's store: its rendezvous channel, which also carries what links do not.

A direct job's values travel over links between its workers (``lambdaml.comm.direct``); what
any part of the platform does with a job's channel as a store (publishing endpoints, barriers,
fallback exchanges, clearing the job's keys) it does with the rendezvous store.
"""

from __future__ import annotations

from lambdaml.channels.base import Channel
from lambdaml.config import ChannelSpec


class DirectChannel(Channel):
    """Never built: ``from_spec`` gives the rendezvous store's channel."""

    @classmethod
    def from_spec(cls, spec: ChannelSpec) -> Channel:
        from lambdaml.channels import open_channel
        from lambdaml.channels.kinds.direct import DirectSpec

        return open_channel(DirectSpec.of(spec).rendezvous)
