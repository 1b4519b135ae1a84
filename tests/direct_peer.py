"""One worker's link set-up, run as a process (in a network namespace) by the direct-channel tests.

``python -m tests.direct_peer link --rank R --world W [--host H] [--reflector HOST:PORT]``
prints ``{"endpoints": ...}``, reads one JSON line ``{"secret": hex, "job": ..., "endpoints":
{rank: endpoints}}``, connects, swaps its rank with every linked peer and prints ``{"links":
[...], "echo": {...}, "elapsed_s": ...}``.

``python -m tests.direct_peer connect HOST:PORT --timeout S`` tries one plain connect and prints
``{"connected": bool, "error": ...}``.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

from lambdaml.channels.kinds.direct import split_host_port
from lambdaml.comm.direct.connect import connect_peers, local_endpoints, open_listener
from lambdaml.comm.direct.endpoints import Endpoints
from lambdaml.comm.direct.handshake import LinkAuth


def _say(value: object) -> None:
    print(json.dumps(value), flush=True)


def _link(args: argparse.Namespace) -> int:
    listener = open_listener(args.host)
    reflector = split_host_port(args.reflector) if args.reflector else None
    ends = local_endpoints(listener, reflector, timeout_s=3.0)
    _say({"endpoints": json.loads(ends.to_json())})
    plan = json.loads(sys.stdin.readline())
    endpoints = {int(r): Endpoints.from_json(json.dumps(e), f"rank {r}") for r, e in plan["endpoints"].items()}
    auth = LinkAuth(bytes.fromhex(plan["secret"]), plan["job"], int(plan.get("attempt", 1)), args.rank)
    start = time.monotonic()
    links = connect_peers(listener, auth, args.world, endpoints, args.timeout)
    elapsed = time.monotonic() - start
    echo: dict[str, int | str] = {}
    for sock in links.values():
        sock.sendall(struct.pack(">I", args.rank))
    for peer, sock in links.items():
        sock.settimeout(10.0)
        try:
            data = sock.recv(4, socket.MSG_WAITALL)
            echo[str(peer)] = struct.unpack(">I", data)[0] if len(data) == 4 else f"short read {data!r}"
        except OSError as exc:
            echo[str(peer)] = f"error {exc}"
        sock.close()
    listener.close()
    _say({"links": sorted(links), "echo": echo, "elapsed_s": elapsed})
    return 0


def _connect(args: argparse.Namespace) -> int:
    try:
        with socket.create_connection(split_host_port(args.address), timeout=args.timeout):
            _say({"connected": True, "error": None})
    except OSError as exc:
        _say({"connected": False, "error": str(exc)})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.direct_peer")
    sub = parser.add_subparsers(dest="mode", required=True)
    link = sub.add_parser("link")
    link.add_argument("--rank", type=int, required=True)
    link.add_argument("--world", type=int, required=True)
    link.add_argument("--host", default="0.0.0.0")
    link.add_argument("--reflector", default=None)
    link.add_argument("--timeout", type=float, default=10.0)
    connect = sub.add_parser("connect")
    connect.add_argument("address")
    connect.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    return _link(args) if args.mode == "link" else _connect(args)


if __name__ == "__main__":
    sys.exit(main())
