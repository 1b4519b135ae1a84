"""The local stack runs the direct channel's rendezvous service: ``lambdaml local up`` starts the
reflector on loopback, ``local status`` shows it, a direct job bound to the stack gets it as its
``reflector``, and ``local down`` stops it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lambdaml.backends import stack as remote
from lambdaml.channels.kinds.direct import DirectSpec, split_host_port
from lambdaml.comm.direct.reflector import observed_address
from lambdaml.local import services

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / ".venv-sam" / "bin" / "python").exists(), reason="needs the SAM tool venv: make sam-env"
)
NAME = "reflected"
#: How long a stopped process may take to close its port (SIGTERM, then its 1 s stop poll).
CLOSE_DEADLINE_S = 15.0


def refuses(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1.0):
            return False
    except OSError:
        return True


def test_local_up_runs_the_reflector_status_shows_it_and_down_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    env = {**os.environ, "COLUMNS": "500"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "lambdaml", "local", *args, "--name", NAME]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)

    started = cli("up")
    assert started.returncode == 0, started.stderr
    try:
        status = json.loads(cli("status", "--output", "json").stdout)
        assert status["up"]
        endpoint = status["reflector"]
        assert f"ReflectorEndpoint {endpoint}" in " ".join(started.stdout.split())
        reflector = split_host_port(endpoint)
        assert reflector[0] == "127.0.0.1"
        # It answers with the address and port the connection came from.
        local = ("127.0.0.1", services.free_port())
        assert observed_address(reflector, local, timeout_s=5.0) == local
        table = cli("status").stdout
        assert f"reflector       {endpoint}" in table

        # A direct job on the stack meets there: the stack fills the reflector the file leaves unset.
        deployed = remote.resolve_stack(NAME)
        rendezvous = {"kind": "s3", **deployed.channel_fields("s3")}
        job = {
            "name": "direct-on-the-stack",
            "workers": 2,
            "dataset": "higgs",
            "channel": {"kind": "direct", "rendezvous": rendezvous},
            "algorithm": {"name": "ga_sgd", "epochs": 1},
        }
        bound = remote.bind(job, deployed)
        assert isinstance(bound.channel, DirectSpec) and bound.channel.reflector == endpoint
    finally:
        stopped = cli("down")
    assert stopped.returncode == 0, stopped.stderr
    # Its port closes once the process has gone (bounded: a stuck reflector fails here, not hangs).
    deadline = time.monotonic() + CLOSE_DEADLINE_S
    while not refuses(reflector) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert refuses(reflector), f"the reflector still answers at {endpoint} after local down"
    assert cli("status").returncode == 1  # forgotten once down
