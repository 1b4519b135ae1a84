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
#: Rows over a channel whose figures rest on published measurements, not measured here (the
#: shipped direct channel's: FMI's model constants).
PUBLISHED_NOTE = "published figures"
#: What each note means, as the advice explains it under its table.
NOTE_MEANINGS: Mapping[str, str] = {
    MODELLED_NOTE: "a prediction for a channel lambdaml cannot run",
    PUBLISHED_NOTE: "latency and bandwidth from FMI's published model (Copik et al., ICS'23: 0.34 ms and "
    "400 MB/s a message between Lambda functions), not measured here; 'lambdaml calibrate' measures a target's",
}


def described(kind: str) -> ChannelInfo:
    """The kind's description. A kind nobody describes (a what-if's) reads no ranges, keeps no
    write order, admits only its own clients and costs nothing."""
    if kind in MODELLED_ONLY:
        return MODELLED_ONLY[kind]
    return catalogue.CHANNELS.get(kind) or ChannelInfo(kind, "", authenticates_clients=True)


#: Kinds the advisor tries only when asked (``--channels``): the direct channel's shipped figures
#: are published ones, not measured here, and would set the study's verdict on their own.
TRIED_WHEN_ASKED = frozenset({"direct"})


def default_channels() -> list[str]:
    """The channels Lambda workers can share that the advisor tries, and calibration measures,
    unless told otherwise (``TRIED_WHEN_ASKED`` only where named)."""
    return [kind for kind in catalogue.shared_channels() if kind not in TRIED_WHEN_ASKED]


def faas_channels(known: Mapping[str, object]) -> list[str]:
    """The default channels (``default_channels``) that ``known`` (a profile's figures) has."""
    return [kind for kind in default_channels() if kind in known]
