"""Direct: workers exchange values over TCP links with each other; a store only for rendezvous
and fallback.

Each worker listens on one socket and publishes its endpoints (private, and public where the
rendezvous service told it) through the ``rendezvous`` store; each pair connects by a plain
connect or, behind NAT, by simultaneous open. A pair that cannot connect by ``link_timeout_s``,
or whose link breaks, carries on through the store: the model is the same bit for bit.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, SerializeAsAny, field_validator, model_validator

from lambdaml.catalogue import ChannelInfo, StackField
from lambdaml.config.channel import ChannelSpec

#: The stores a direct job can meet through and fall back to: shared by processes, with
#: conditional-free writes every worker can read (a cache of one process cannot serve).
RENDEZVOUS_KINDS = ("redis", "dynamodb", "s3")


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` as a pair, or ValueError naming what is wrong."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


class DirectSpec(ChannelSpec):
    kind: Literal["direct"] = "direct"
    #: The store workers publish their endpoints in, and exchange through where a link fails.
    rendezvous: SerializeAsAny[ChannelSpec]
    #: The rendezvous service ("host:port"), a TCP reflector that tells a worker the address and
    #: port it is seen from (behind NAT: its public ones). None: peers reach private addresses.
    reflector: str | None = None
    #: The address workers listen on. None: where peers reach them from, as the reflector says,
    #: loopback where it (or, without one, the store) is on loopback, else every interface (Lambda).
    listen_host: str | None = Field(None, min_length=1, max_length=255)
    #: How long every pair has to connect (plain or punched) before it falls back to the store.
    link_timeout_s: float = Field(10.0, gt=0, le=300)
    #: Vectors of at most this many bytes go by recursive doubling (latency-bound); larger ones
    #: by reduce-scatter and all-gather (bandwidth-bound).
    small_bytes: int = Field(64 * 1024, ge=0)

    @field_validator("reflector")
    @classmethod
    def _host_port(cls, reflector: str | None) -> str | None:
        if reflector is not None:
            split_host_port(reflector)
        return reflector

    @model_validator(mode="after")
    def _store(self) -> Self:
        if self.rendezvous.kind not in RENDEZVOUS_KINDS:
            raise ValueError(
                f"a direct channel meets through {', '.join(RENDEZVOUS_KINDS)}, not {self.rendezvous.kind}"
            )
        if self.integrity == "bound":
            raise ValueError("a direct channel admits a peer by the job's secret: integrity is auto or mac")
        return self

    @property
    def authenticates_values(self) -> bool:
        """Always: the job's secret admits a peer to a link, and the store's values carry its MAC."""
        return True

    @property
    def links_carry_mac(self) -> bool:
        """Whether each frame carries the job's MAC (``integrity: mac``), or only its key's binding.

        A link joins two peers that proved the job's secret, so under ``auto`` a frame is bound to
        its key (a stray or replayed one is refused), as a value on a store that admits only
        authenticated clients is; ``mac`` also stops a party on the path that can write into a
        TCP stream, at the price of hashing every byte (most of a large round's CPU).
        """
        return self.integrity == "mac"

    @property
    def listen_address(self) -> str:
        """The address the workers listen on (``listen_host``, or its default)."""
        if self.listen_host is not None:
            return self.listen_host
        host = split_host_port(self.reflector)[0] if self.reflector else self.rendezvous_host
        return "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else "0.0.0.0"

    @property
    def rendezvous_host(self) -> str:
        """The host of the rendezvous store: a server's, or its AWS endpoint's ("" for AWS's own)."""
        from urllib.parse import urlsplit

        store, fields = self.rendezvous, type(self.rendezvous).model_fields
        if "host" in fields:
            return str(store.model_dump()["host"])
        endpoint = store.model_dump().get("endpoint_url") if "endpoint_url" in fields else None
        return (urlsplit(endpoint).hostname or "") if isinstance(endpoint, str) else ""

    @property
    def store_kind(self) -> str:
        return self.rendezvous.kind

    @property
    def place(self) -> str:
        return f"links, meeting through {self.rendezvous.kind} at {self.rendezvous.place}"


DESCRIPTION = ChannelInfo(
    "direct",
    "lambdaml.channels.direct:DirectChannel",
    spec=f"{__name__}:DirectSpec",
    title="direct",
    authenticates_clients=True,  # a link joins only peers that proved the job's secret (``links_carry_mac``)
    billed_by="nothing",  # the links are free; the store and the rendezvous service are priced as themselves
    stack_fields=(StackField("reflector", "ReflectorEndpoint", "rendezvous service is"),),
)
