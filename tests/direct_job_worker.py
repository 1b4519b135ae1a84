"""A direct job's parts, run as processes inside the emulated NAT's namespaces (tests/netns.py).

The test process cannot reach the namespaces' services, so whatever talks to them runs here,
reading one JSON line on stdin and printing one JSON line on stdout:

``python -m tests.direct_job_worker prepare``, in the public namespace: ``{"services": {name:
"host:port"}, "rows": N, "workers": W, "dataset": name, "jobs": [{"id": job id, "spec": JobSpec},
...]}``. It waits (bounded) until Redis, moto and the reflector answer, makes the jobs' bucket and a
Higgs-like dataset in W shards, claims each job as the coordinator does and prints
``{"jobs": [{"attempt": ..., "secret": hex or null}, ...]}``.

``python -m tests.direct_job_worker rank``, in function ``rank``'s namespace: ``{"job": JobSpec,
"attempt": ..., "rank": R, "secret": hex or null}``. It trains the rank to the end and prints its
report's figures: the model's checksum, the channel's link counts and rounds, and (rank 0, which
saved it) the SHA-256 of the saved model's parameters as read back from the bucket.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from lambdaml import codec, keys
from lambdaml.channels.kinds.direct import split_host_port
from lambdaml.config import parse_job
from lambdaml.data import shards, synthetic
from lambdaml.runtime import records
from lambdaml.runtime.records import Attempt
from lambdaml.runtime.reports import WorkerReport
from lambdaml.runtime.start import job_secret
from lambdaml.runtime.worker import run_worker
from lambdaml.storage import open_storage

#: How long ``prepare`` waits for the services to answer.
SERVICES_TIMEOUT_S = 30.0


def _say(value: object) -> None:
    print(json.dumps(value), flush=True)


def _answers(name: str, address: str) -> bool:
    """Whether the service answers as itself (not merely accepts a connection)."""
    host, port = split_host_port(address)
    try:
        if name == "moto":
            try:
                with urllib.request.urlopen(f"http://{address}/moto-api/", timeout=1.0):
                    return True
            except urllib.error.HTTPError:  # any HTTP answer: it is up
                return True
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.settimeout(1.0)
            if name == "redis":
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
            return sock.recv(64).startswith(b"LMLR1 ")  # the reflector speaks first
    except OSError:
        return False


def _wait_for(services: dict[str, str]) -> None:
    deadline = time.monotonic() + SERVICES_TIMEOUT_S
    waiting = dict(services)
    while waiting:
        waiting = {name: address for name, address in waiting.items() if not _answers(name, address)}
        if waiting and time.monotonic() > deadline:
            raise SystemExit(f"not answering within {SERVICES_TIMEOUT_S:g}s: {waiting}")
        if waiting:
            time.sleep(0.1)


def _prepare(request: dict[str, Any]) -> dict[str, Any]:
    _wait_for(request["services"])
    jobs = [(str(j["id"]), parse_job(j["spec"])) for j in request["jobs"]]
    store = open_storage(jobs[0][1].storage)
    store.ensure()
    X, y, _ = synthetic.higgs_like(int(request["rows"]), seed=8)
    version = shards.prepare(store, request["dataset"], X, y, shards=int(request["workers"])).dataset_version
    claimed = []
    for job_id, job in jobs:
        attempt = records.claim_job(store, job, job_id, version)
        secret = job_secret(job)
        claimed.append({"attempt": attempt.to_json(), "secret": None if secret is None else secret.hex()})
    return {"jobs": claimed}


def _rank(request: dict[str, Any]) -> dict[str, Any]:
    job = parse_job(request["job"])
    attempt = Attempt.from_json(request["attempt"])
    rank = int(request["rank"])
    secret = None if request["secret"] is None else bytes.fromhex(request["secret"])
    report = run_worker(job, attempt, rank, secret=secret)
    if not isinstance(report, WorkerReport):  # no deadline here: a run goes to its end
        raise SystemExit(f"rank {rank} stopped at a checkpoint instead of finishing")
    traffic = report.channel
    figures: dict[str, Any] = {
        "rank": rank,
        "checksum": report.model_checksum,
        "steps_per_epoch": report.steps_per_epoch,
        "rounds": traffic.per_round.rounds if traffic.per_round is not None else 0,
        "links_direct": traffic.links_direct,
        "links_dropped": traffic.links_dropped,
        "rounds_fallback": traffic.rounds_fallback,
        "bytes_sent_links": traffic.bytes_sent_links,
    }
    if rank == 0:  # the rank that saved the model: read it back as a user would
        params = codec.decode_bundle(open_storage(job.storage).get(keys.job_model(attempt.job_id)))["params"]
        figures["model_sha256"] = hashlib.sha256(params.tobytes()).hexdigest()
        figures["model_shape"] = list(params.shape)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.direct_job_worker")
    parser.add_argument("mode", choices=("prepare", "rank"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    request = json.loads(sys.stdin.readline())
    _say(_prepare(request) if args.mode == "prepare" else _rank(request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
