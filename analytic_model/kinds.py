"""What the model knows of a channel kind besides its figures: the catalogue's description of it,
or the model's own for a kind it models only (S3 Express One Zone, which lambdaml has no channel for)."""

from __future__ import annotations

from collections.abc import Mapping

from lambdaml import catalogue
from lambdaml.catalogue import ChannelInfo

#: Kinds the model times and prices but lambdaml has no channel for: the advisor tries them only
#: when asked, and every row over one carries ``MODELLED_NOTE``.
MODELLED_ONLY: Mapping[str, ChannelInfo] = {
    "s3express": ChannelInfo(
        "s3express",
        "",
        title="S3 Express One Zone",
        ranged_reads=True,  # it serves ranged GETs as S3 does: a channel over it would pack as the S3 channel does
        authenticates_clients=True,
        billed_by="requests",
        prices="s3express",
    )
}
MODELLED_NOTE = "modelled only: no channel yet"


def described(kind: str) -> ChannelInfo:
    """The kind's description. A kind nobody describes (a what-if's) reads no ranges, keeps no
    write order, admits only its own clients and costs nothing."""
    if kind in MODELLED_ONLY:
        return MODELLED_ONLY[kind]
    return catalogue.CHANNELS.get(kind) or ChannelInfo(kind, "", authenticates_clients=True)


def faas_channels(known: Mapping[str, object]) -> list[str]:
    """The channels Lambda workers can share that ``known`` (a profile's figures) has: what the
    advisor tries unless told otherwise."""
    return [kind for kind in catalogue.shared_channels() if kind in known]
