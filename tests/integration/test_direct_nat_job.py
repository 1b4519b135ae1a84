"""A whole direct job through the emulated NAT (tests/netns.py): two functions, each behind its own
masquerading NAT; Redis (the rendezvous store), moto (the data bucket) and the rendezvous service
on the public side. Each rank runs in its function's namespace (tests/direct_job_worker.py).

Behind NATs that pick a random port per connection no link forms: the job must go through the
store in every round and still give, bit for bit, the model the same job gives on Redis. Behind
port-preserving NATs the pair punches through and no round goes through the store.

Skipped, with one line saying why, where network namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from lambdaml.comm.direct.connect import GRACE_S
from lambdaml.config import JobSpec, StorageSpec, parse_job
from tests.netns import NatNet

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2
ROWS = 400
EPOCHS = 2
DATASET = "natjob"
LINK_TIMEOUT_S = 3.0  # the randomizing NAT's job waits this long for a link that never forms
PUNCH_TIMEOUT_S = 15.0
PORTS = {"redis": 6379, "moto": 5000, "reflector": 3478}
#: Bounds on the processes run in the namespaces: start-up, the links' deadline, a small job.
PREPARE_BOUND_S = 90.0
RANK_BOUND_S = 60.0 + PUNCH_TIMEOUT_S + GRACE_S
#: moto signs nothing, but a client on a non-loopback endpoint needs keys to sign with.
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def _services(net: NatNet, logs: Path) -> dict[str, str]:
    """Redis, moto and the reflector started on the public side, each logging to a file of
    ``logs``; their addresses (``prepare`` waits until they answer)."""
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)", pytrace=False)
    ip = net.public_ip
    argvs = {
        "redis": [redis_server, "--bind", ip, "--save", "", "--appendonly", "no", "--protected-mode", "no", "--port"],
        "moto": [sys.executable, "-m", "moto.server", "-H", ip, "-p"],  # as lambdaml.local.services starts it
        "reflector": [sys.executable, "-m", "lambdaml.comm.direct.reflector", "--host", ip, "--port"],
    }
    for name, argv in argvs.items():
        with (logs / f"{name}.log").open("wb") as log:
            net.popen("public", [*argv, str(PORTS[name])], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    return {name: f"{ip}:{port}" for name, port in PORTS.items()}


def _tails(logs: Path) -> str:
    """The last lines of every service's log, for a failure's message."""
    return " || ".join(
        f"{path.stem}: {' | '.join(path.read_text(errors='replace').strip().splitlines()[-3:])}"
        for path in sorted(logs.glob("*.log"))
    )


def _job(storage: StorageSpec, channel: dict[str, Any]) -> JobSpec:
    return parse_job(
        {
            "name": "natjob",
            "workers": WORKERS,
            "dataset": DATASET,
            "storage": storage.model_dump(mode="json"),
            "channel": channel,
            "model": {"name": "lr"},
            "algorithm": {"name": "ga_sgd", "epochs": EPOCHS, "batch_size": 40, "lr": 0.5},
            "sync": {"timeout_s": 60, "pattern": "allreduce"},
            "runtime": {"margin_s": 0},
        }
    )


def _prepare(net: NatNet, request: dict[str, Any], logs: Path) -> Any:
    """The services waited for, the dataset made and every job claimed, from the public side."""
    argv = [sys.executable, "-m", "tests.direct_job_worker", "prepare"]
    done = net.run(
        "public", argv, PREPARE_BOUND_S, input=json.dumps(request), capture_output=True, text=True, cwd=ROOT, env=_env()
    )
    assert done.returncode == 0, f"prepare failed: {done.stderr[-3000:]} (services: {_tails(logs)})"
    return json.loads(done.stdout.strip().splitlines()[-1])["jobs"]


def _env() -> dict[str, str]:
    return {**os.environ, **ENV}


def _run_job(net: NatNet, job: JobSpec, claim: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank started at once, each in its own function's namespace; their figures by rank."""
    procs = []
    for rank in range(WORKERS):
        request = {"job": job.model_dump(mode="json"), "attempt": claim["attempt"], "rank": rank}
        proc = net.popen(
            rank,
            [sys.executable, "-m", "tests.direct_job_worker", "rank"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=_env(),
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({**request, "secret": claim["secret"]}) + "\n")  # one line: it starts
        proc.stdin.flush()
        procs.append(proc)
    figures = []
    for rank, proc in enumerate(procs):  # a rank that fails ends the test; closing the net kills the other
        try:
            out, err = proc.communicate(timeout=RANK_BOUND_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rank {rank} did not finish within {RANK_BOUND_S:g}s") from None
        assert proc.returncode == 0, f"rank {rank} failed: {err[-3000:]}"
        figures.append(json.loads(out.strip().splitlines()[-1]))
    return figures


def _direct_and_redis(
    net: NatNet, logs: Path, link_timeout_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The same job on the direct channel and on Redis (a fresh job id each, one dataset), run in
    the NAT's functions: each rank's figures, by job."""
    services = _services(net, logs)
    tag = uuid.uuid4().hex[:8]
    storage = StorageSpec(bucket=f"natjob-{tag}", endpoint_url=f"http://{services['moto']}")
    redis = {"kind": "redis", "host": net.public_ip, "port": PORTS["redis"], "connect_timeout_s": 2.0}
    direct = {
        "kind": "direct",
        "rendezvous": redis,
        "reflector": services["reflector"],
        "link_timeout_s": link_timeout_s,
    }
    jobs = {"direct": _job(storage, direct), "redis": _job(storage, redis)}
    request = {
        "services": services,
        "rows": ROWS,
        "workers": WORKERS,
        "dataset": DATASET,
        "jobs": [{"id": f"natjob-{name}-{tag}", "spec": job.model_dump(mode="json")} for name, job in jobs.items()],
    }
    claims = _prepare(net, request, logs)
    on_direct = _run_job(net, jobs["direct"], claims[0])
    on_redis = _run_job(net, jobs["redis"], claims[1])
    return on_direct, on_redis


def _assert_same_job(on_direct: list[dict[str, Any]], on_redis: list[dict[str, Any]]) -> int:
    """Both jobs made every round of the job and ended with one model, the saved ones the same bit
    for bit; the job's rounds."""
    rounds = EPOCHS * on_direct[0]["steps_per_epoch"]
    assert rounds > 0 and all(f["rounds"] == rounds for f in on_direct + on_redis), (on_direct, on_redis)
    assert all(f["links_direct"] is None for f in on_redis), on_redis  # the store's job had no links
    assert len({f["checksum"] for f in on_direct + on_redis}) == 1, (on_direct, on_redis)
    assert on_direct[0]["model_sha256"] == on_redis[0]["model_sha256"], (on_direct[0], on_redis[0])
    assert on_direct[0]["model_shape"] == on_redis[0]["model_shape"] == [29]  # 28 features and a bias
    return int(rounds)


def test_a_port_randomizing_nat_makes_the_job_fall_back_to_the_store_with_the_same_model(tmp_path: Path) -> None:
    with NatNet.create(functions=WORKERS, randomize=True) as net:
        on_direct, on_redis = _direct_and_redis(net, tmp_path, LINK_TIMEOUT_S)
    rounds = _assert_same_job(on_direct, on_redis)
    for figures in on_direct:
        # No link formed (or the pair's was dropped): every round went through the store.
        assert figures["links_direct"] == 0 or figures["links_dropped"] == 1, figures
        assert figures["rounds_fallback"] == rounds, figures
        assert figures["bytes_sent_links"] == 0, figures


def test_b_port_preserving_nats_let_the_job_punch_through_with_the_same_model(tmp_path: Path) -> None:
    with NatNet.create(functions=WORKERS, randomize=False) as net:
        # A roomier deadline costs nothing where the pair links, and spares a loaded machine a missed one.
        on_direct, on_redis = _direct_and_redis(net, tmp_path, PUNCH_TIMEOUT_S)
    _assert_same_job(on_direct, on_redis)
    for figures in on_direct:
        assert figures["links_direct"] == 1, figures
        assert figures["links_dropped"] == 0, figures
        assert figures["rounds_fallback"] == 0, figures
        assert figures["bytes_sent_links"] > 0, figures
