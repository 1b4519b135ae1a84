"""Where a worker can be reached: the address it listens on, and the one the rendezvous service saw."""

from __future__ import annotations

import json
from dataclasses import dataclass

from lambdaml.errors import ChannelError, brief

Address = tuple[str, int]


def _address(value: object, field: str, what: str) -> Address:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not 0 < len(value[0]) <= 255
        or not isinstance(value[1], int)
        or isinstance(value[1], bool)
        or not 1 <= value[1] <= 65535
    ):
        raise ChannelError(f"{what}: {field} is not [host, port]: {brief(value)}")
    return value[0], value[1]


@dataclass(frozen=True)
class Endpoints:
    """A worker's listening address (``private``) and, behind NAT, the one peers reach (``public``)."""

    private: Address
    public: Address | None = None

    def to_json(self) -> bytes:
        public = None if self.public is None else list(self.public)
        return json.dumps({"private": list(self.private), "public": public}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str, what: str) -> Endpoints:
        """Endpoints from ``to_json``'s text; anything else is a ChannelError naming ``what``."""
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ChannelError(f"{what}: endpoints are not JSON ({exc})") from None
        if not isinstance(value, dict) or set(value) != {"private", "public"}:
            raise ChannelError(f"{what}: endpoints are not an object with private and public: {brief(value)}")
        public = None if value["public"] is None else _address(value["public"], "public", what)
        return cls(_address(value["private"], "private", what), public)

    def addresses(self) -> list[Address]:
        """The distinct addresses to try, private first."""
        if self.public is None or self.public == self.private:
            return [self.private]
        return [self.private, self.public]
