"""``torchrun`` on one node with every listening socket on loopback (the iaas-local backend's launcher).

``torchrun --standalone`` and its static rendezvous both host their TCPStore on every
interface (torch binds a store's server to ``::``/``0.0.0.0`` whatever host it is given),
so a local run would accept connections from the network. Here the store's listening
socket is made first, bound to 127.0.0.1, and handed to torch as a multi-tenant server on
that port; torchrun's static rendezvous then finds it and shares it, and the ranks reach it
through ``MASTER_ADDR=127.0.0.1`` as their bootstrap store. gloo's own sockets go on ``lo``
through ``GLOO_SOCKET_IFNAME`` (see ``loopback_env``).

Usage: ``python -m lambdaml.runtime.torchrun_local --nproc-per-node W --module M [ARGS...]``;
every argument is torchrun's.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence

LOOPBACK = "127.0.0.1"


def loopback_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the launcher: gloo's and tensorpipe's sockets on the loopback interface."""
    return {
        **(os.environ if environ is None else environ),
        "GLOO_SOCKET_IFNAME": "lo",
        "TP_SOCKET_IFNAME": "lo",
        "MASTER_ADDR": LOOPBACK,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "TORCHELASTIC_ERROR_FILE": "",
    }


def command(workers: int, module: str, args: Sequence[str]) -> list[str]:
    """The command line that runs ``module`` as ``workers`` ranks under this launcher."""
    return [sys.executable, "-m", __name__, "--nproc-per-node", str(workers), "--module", module, *args]


def main(argv: Sequence[str] | None = None) -> int:
    from datetime import timedelta

    from torch._C._distributed_c10d import TCPStore  # what torch.distributed re-exports, typed
    from torch.distributed.run import main as torchrun

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((LOOPBACK, 0))  # the kernel picks a free port: no race with another run
    listener.listen(128)
    port = listener.getsockname()[1]
    # Kept alive while torchrun runs: its rendezvous asks for a multi-tenant store on this port
    # and gets this server, which owns the socket from here on.
    store = TCPStore(
        LOOPBACK,
        port,
        is_master=True,
        multi_tenant=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=300),
        master_listen_fd=listener.detach(),
    )
    rendezvous = ["--rdzv-backend", "static", "--master-addr", LOOPBACK, "--master-port", str(port)]
    try:
        torchrun([*rendezvous, "--nnodes", "1", "--node-rank", "0", *(sys.argv[1:] if argv is None else argv)])
    finally:
        del store
    return 0


if __name__ == "__main__":
    sys.exit(main())
