"""The serverless path end to end on the local stack: the template created on moto, the
functions run by the local Lambda service, and a job started with boto3 through
``lambdaml train --stack`` ending with the local-process backend's model."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import codec, keys
from lambdaml.backends import stack as remote
from lambdaml.channels import open_channel
from lambdaml.data import shards, synthetic
from lambdaml.driver import run_job
from lambdaml.local import artifacts, stack
from lambdaml.runtime import records
from lambdaml.runtime.reports import JobResult

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not (ROOT / ".venv-sam" / "bin" / "python").exists(), reason="needs the SAM tool venv: make sam-env"
)


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    home = tmp_path_factory.mktemp("lambdaml-home")
    previous = os.environ.get("LAMBDAML_HOME")
    os.environ["LAMBDAML_HOME"] = str(home)
    try:
        # The worker's reservation comes from the template's parameter, the account's limit from up().
        record = stack.up(
            "e2e", cache="redis", parameters={"WorkerReservedConcurrency": "8"}, account_concurrency=50, torch=True
        )
        try:
            yield "e2e", record
        finally:
            stack.down("e2e")
    finally:
        if previous is None:
            os.environ.pop("LAMBDAML_HOME", None)
        else:
            os.environ["LAMBDAML_HOME"] = previous


JOB = {
    "name": "e2e-lr",
    "workers": 4,
    "dataset": "higgs",
    "channel": {"kind": "redis"},
    "algorithm": {"name": "ga_sgd", "lr": 0.5, "batch_size": 50, "epochs": 2, "seed": 3},
    "sync": {"timeout_s": 60},
}


def test_job_on_the_local_stack_matches_the_local_process_backend(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, record = local_stack
    deployed = remote.resolve_stack(name)
    store = remote.stack_store(deployed)
    X, y, _ = synthetic.higgs_like(4000, seed=4)
    shards.prepare(store, "higgs", X, y, shards=4)

    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(JOB))
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", "train", str(job_file), "--stack", name, "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    result = JobResult.from_json(json.loads(next(tmp_path.glob("e2e-lr-*.json")).read_text()))
    assert result.ranks_agree
    on_lambda = codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]

    # The same job on the local-process backend, against the same bucket and cache.
    job = remote.bind(JOB, deployed)
    local = run_job(job, results_dir=None)
    np.testing.assert_array_equal(on_lambda, codec.decode_bundle(store.get(keys.job_model(local.job_id)))["params"])

    # Every worker ran as a Lambda invocation; the first ones were cold starts.
    log = [json.loads(line) for line in (Path(record["workdir"]) / "invocations.jsonl").read_text().splitlines()]
    workers = [r for r in log if "WorkerFunction" in r["function"]]
    assert len(workers) >= 4 and all(r["status"] == "success" for r in workers)
    assert any(r["cold"] for r in workers)
    # The result counts the same: one billed entry per worker invocation, cold starts marked.
    assert result.cost["lambda"]["invocations"] == len(workers)
    assert result.cost["lambda"]["cold_starts"] == sum(1 for r in workers if r["cold"])


def test_a_direct_job_on_the_local_stack_links_its_functions_and_matches_the_stores_model(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    """The functions, as the local Lambda service runs the built artifacts, link to each other
    through the stack's reflector, and meet through its cache: the model is the one Redis gives."""
    name, _ = local_stack
    deployed = remote.resolve_stack(name)
    store = remote.stack_store(deployed)
    X, y, _ = synthetic.higgs_like(4000, seed=4)
    shards.prepare(store, "higgs-direct", X, y, shards=4)
    job = {**JOB, "name": "e2e-direct", "dataset": "higgs-direct"}
    job_file = tmp_path / "direct.yaml"
    job_file.write_text(yaml.safe_dump({**job, "channel": {"kind": "direct", "rendezvous": {"kind": "redis"}}}))
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", "train", str(job_file), "--stack", name, "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "links: 6 of 6 pairs direct, 0 dropped; 0 rounds with values through the store" in done.stdout
    result = JobResult.from_json(json.loads(next(tmp_path.glob("e2e-direct-*.json")).read_text()))
    assert [w.channel.links_direct for w in result.workers] == [3, 3, 3, 3]
    on_links = codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]
    # AllReduce: its sums are in rank order, as direct's are (a 2-D grid's are not: sync.pattern auto may pick it).
    allreduce = {**job, "sync": {**JOB["sync"], "pattern": "allreduce"}}
    on_redis = run_job(remote.bind(allreduce, deployed), results_dir=None)
    np.testing.assert_array_equal(on_links, codec.decode_bundle(store.get(keys.job_model(on_redis.job_id)))["params"])


def test_channel_auto_on_the_stack_chooses_among_the_stacks_channels_before_any_worker_starts(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, _ = local_stack
    deployed = remote.resolve_stack(name)
    X, y, _ = synthetic.higgs_like(2000, seed=5)
    shards.prepare(remote.stack_store(deployed), "higgs-auto", X, y, shards=4)
    job_file = tmp_path / "auto.yaml"
    job_file.write_text(yaml.safe_dump({**JOB, "name": "e2e-auto", "dataset": "higgs-auto", "channel": "auto"}))
    command = ["train", str(job_file), "--stack", name, "--budget", "1", "--output", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("chose ")]
    assert line.startswith("chose for the budget $1.00"), line
    printed = json.loads(done.stdout)
    kind = printed["spec"]["channel"]["kind"]
    # The stack has its bucket, its table and a Redis cache (no Memcached): the choice is one of them.
    assert kind in ("s3", "dynamodb", "redis", "direct") and f"({kind}" in printed["prediction"]["configuration"]
    assert printed["prediction"]["chosen_for"] == "the budget $1.00" and printed["cost"]["total_dollars"] <= 1


def test_function_logs_are_in_cloudwatch_logs_where_lambda_puts_them(local_stack: tuple[str, dict[str, Any]]) -> None:
    name, record = local_stack
    deployed = remote.resolve_stack(name)
    worker = deployed.output("WorkerFunctionName")
    group = deployed.client("lambda").get_function_configuration(FunctionName=worker)["LoggingConfig"]["LogGroup"]
    assert group == next(f["log_group"] for f in record["functions"] if f["logical"] == "WorkerFunction") != ""
    logs = deployed.client("logs")
    messages: list[str] = []
    deadline = time.monotonic() + 60  # lines are shipped in the background, in batches
    while time.monotonic() < deadline:
        pages = logs.get_paginator("filter_log_events").paginate(logGroupName=group)
        messages = [e["message"] for page in pages for e in page["events"]]
        if sum(m.startswith("REPORT RequestId:") for m in messages) >= 4:
            break
        time.sleep(0.5)
    assert sum(m.startswith("START RequestId:") for m in messages) >= 4
    assert sum(m.startswith("REPORT RequestId:") for m in messages) >= 4
    streams = logs.describe_log_streams(logGroupName=group)["logStreams"]
    assert streams and all("/[$LATEST]" in s["logStreamName"] for s in streams)

    # The AWS CLI reads the same, pointed at the local stack's endpoints.
    cli = ROOT / ".venv-awscli" / "bin" / "aws"
    if cli.exists():
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

        def aws(service: str, *args: str) -> Any:
            url = deployed.endpoints[service]
            done = subprocess.run(
                [str(cli), "--endpoint-url", url, "--output", "json", service, *args],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        listed = aws("lambda", "list-functions")["Functions"]
        assert worker in [f["FunctionName"] for f in listed]
        got = aws("lambda", "get-function", "--function-name", worker)["Configuration"]
        assert got["FunctionName"] == worker and got["LoggingConfig"]["LogGroup"] == group
        out = Path(record["workdir"]) / "cli-invoke.json"
        coordinator = deployed.output("CoordinatorFunctionName")
        invoked = aws("lambda", "invoke", "--function-name", coordinator, "--payload", '{"action": "nope"}', str(out))
        assert invoked["StatusCode"] == 200 and invoked["ExecutedVersion"] == "$LATEST"
        assert json.loads(out.read_text())["state"] == "rejected"  # the coordinator's own answer
        events = aws("logs", "filter-log-events", "--log-group-name", group, "--filter-pattern", "REPORT")["events"]
        assert events and all("REPORT RequestId:" in e["message"] for e in events)


def test_status_reports_a_finished_job_and_rejects_an_unknown_one(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, _ = local_stack
    store = remote.stack_store(remote.resolve_stack(name))
    job_ids = [k.split("/")[1] for k in store.list("jobs/") if k.endswith("/status.json")]
    assert job_ids, "the previous test left a finished job"
    status = subprocess.run(
        [sys.executable, "-m", "lambdaml", "status", job_ids[0], "--stack", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "succeeded" in status.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "lambdaml", "status", "no-such-job", "--stack", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert "no job 'no-such-job'" in missing.stderr


def test_a_job_wider_than_the_worker_concurrency_is_refused_before_any_worker_starts(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, record = local_stack
    deployed = remote.resolve_stack(name)
    client = deployed.client("lambda")
    worker = deployed.output("WorkerFunctionName")
    assert client.get_function_concurrency(FunctionName=worker)["ReservedConcurrentExecutions"] == 8
    limits = client.get_account_settings()["AccountLimit"]
    # Both workers (zip and torch) reserve 8 of the 50.
    assert (limits["ConcurrentExecutions"], limits["UnreservedConcurrentExecutions"]) == (50, 34)
    names = [f["FunctionName"] for f in client.list_functions()["Functions"]]
    expected = [worker, deployed.output("CoordinatorFunctionName"), deployed.output("TorchWorkerFunctionName")]
    assert sorted(names) == sorted(expected)

    store = remote.stack_store(deployed)
    X, y, _ = synthetic.higgs_like(400, seed=5)
    shards.prepare(store, "narrow", X, y, shards=4)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({**JOB, "name": "too-wide", "dataset": "narrow"}))
    invocations = Path(record["workdir"]) / "invocations.jsonl"
    before = invocations.read_text().count("\n") if invocations.exists() else 0
    client.put_function_concurrency(FunctionName=worker, ReservedConcurrentExecutions=2)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lambdaml", "train", str(job_file), "--stack", name],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        client.put_function_concurrency(FunctionName=worker, ReservedConcurrentExecutions=8)
    assert done.returncode == 1, done.stderr
    message = done.stderr.strip().splitlines()
    assert len(message) == 1 and "needs 4 workers at once" in message[0] and "reserved concurrency of 2" in message[0]
    after = invocations.read_text().count("\n") if invocations.exists() else 0
    assert after == before, "nothing was invoked: not the coordinator, not a worker"


def test_an_mlp_job_runs_on_the_torch_worker_and_matches_the_local_process_backend(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, record = local_stack
    deployed = remote.resolve_stack(name)
    store = remote.stack_store(deployed)
    X, y, _ = synthetic.higgs_like(600, seed=6)
    shards.prepare(store, "higgs-mlp", X, y, shards=2)
    job = {
        **JOB,
        "name": "e2e-mlp",
        "workers": 2,
        "dataset": "higgs-mlp",
        "model": {"name": "mlp", "hidden": [8]},
        "algorithm": {"name": "ga_sgd", "lr": 0.1, "batch_size": 50, "epochs": 1, "seed": 3},
    }
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump(job))
    done = subprocess.run(
        [sys.executable, "-m", "lambdaml", "train", str(job_file), "--stack", name, "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = JobResult.from_json(json.loads(next(tmp_path.glob("e2e-mlp-*.json")).read_text()))
    on_lambda = codec.decode_bundle(store.get(keys.job_model(result.job_id)))["params"]
    local = run_job(remote.bind(job, deployed), results_dir=None)
    np.testing.assert_array_equal(on_lambda, codec.decode_bundle(store.get(keys.job_model(local.job_id)))["params"])
    # Its workers ran in the torch worker, from the environment built of functions/worker_image/.
    log = [json.loads(line) for line in (Path(record["workdir"]) / "invocations.jsonl").read_text().splitlines()]
    torch_worker = deployed.output("TorchWorkerFunctionName")
    assert sum(1 for r in log if r["function"] == torch_worker and r["status"] == "success") >= 2
    torch_config = next(f for f in record["functions"] if f["logical"] == "TorchWorkerFunction")
    assert torch_config["code_dir"].endswith("torch-worker/task") and torch_config["layers"]


def test_a_build_missing_a_requirement_fails_the_job_with_its_import_error(tmp_path: Path) -> None:
    """As on AWS: the zip worker lacks numpy (removed from its build), so the job fails, naming it."""
    built = artifacts.sam_build(ROOT / "template.yaml")
    broken = tmp_path / "sam"
    shutil.copytree(built, broken, symlinks=True)
    for path in (broken / "WorkerFunction").iterdir():
        if path.name.startswith("numpy"):
            shutil.rmtree(path)
    previous = os.environ.get("LAMBDAML_HOME")
    os.environ["LAMBDAML_HOME"] = str(tmp_path / "home")
    try:
        record = stack.up("broken", build_dir=broken)
        try:
            deployed = remote.resolve_stack("broken")
            store = remote.stack_store(deployed)
            X, y, _ = synthetic.higgs_like(200, seed=7)
            shards.prepare(store, "higgs", X, y, shards=2)
            job_file = tmp_path / "job.yaml"
            job_file.write_text(yaml.safe_dump({**JOB, "workers": 2, "channel": {"kind": "s3"}}))
            done = subprocess.run(
                [sys.executable, "-m", "lambdaml", "train", str(job_file), "--stack", "broken"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 1
            assert "No module named 'numpy'" in done.stderr, done.stderr
            worker = deployed.output("WorkerFunctionName")
            function_log = (Path(record["workdir"]) / f"{worker}.log").read_text()
            # The handler imports the package lazily, so Python's own error, not Runtime.ImportModuleError.
            assert "ModuleNotFoundError: No module named 'numpy'" in function_log
        finally:
            stack.down("broken")
    finally:
        if previous is None:
            os.environ.pop("LAMBDAML_HOME", None)
        else:
            os.environ["LAMBDAML_HOME"] = previous


def wide() -> dict[str, str]:
    """This environment with lines as long as they are, so each compares whole (80 columns wrap them)."""
    return {**os.environ, "COLUMNS": "500"}


def lambdaml_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lambdaml", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=wide())


def start_detached(stack: str, tmp_path: Path, job: dict[str, Any]) -> str:
    """Start ``job`` on the stack with ``train --detach`` and return its id."""
    job_file = tmp_path / f"{job['name']}.yaml"
    job_file.write_text(yaml.safe_dump(job))
    started = lambdaml_cli("train", str(job_file), "--stack", stack, "--detach", "--output", "json")
    assert started.returncode == 0, started.stderr
    return str(json.loads(started.stdout)["job_id"])


def interrupt_after_first_epoch(*args: str) -> tuple[int, str, str]:
    """Run a command that follows a job, Ctrl-C it once it has printed an epoch line, and return how it ended."""
    process = subprocess.Popen(
        [sys.executable, "-m", "lambdaml", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**wide(), "PYTHONUNBUFFERED": "1"},
        # As in a terminal's foreground: a run started in the background (``make test &``) would
        # hand down SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    timer = threading.Timer(300, process.kill)  # a bound for a broken run only, far beyond any epoch
    timer.start()
    seen: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(line)
            if line.lstrip().startswith("epoch"):
                break
        else:
            raise AssertionError(f"no epoch line: {''.join(seen)}{process.stderr.read() if process.stderr else ''}")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        timer.cancel()
    return process.returncode, "".join(seen) + out, err


@pytest.fixture(scope="module")
def jobs_dataset(local_stack: tuple[str, dict[str, Any]]) -> str:
    store = remote.stack_store(remote.resolve_stack(local_stack[0]))
    X, y, _ = synthetic.higgs_like(2000, seed=8)
    shards.prepare(store, "jobs-data", X, y, shards=4)
    return "jobs-data"


def test_a_detached_job_is_followed_by_attach_to_the_result_train_prints(
    local_stack: tuple[str, dict[str, Any]], jobs_dataset: str, tmp_path: Path
) -> None:
    name, _ = local_stack
    job_file = tmp_path / "job.yaml"
    # Checkpoints every few rounds, so the job leaves some for clean to remove.
    detached = {**JOB, "name": "detached", "dataset": jobs_dataset, "runtime": {"checkpoint_every": 4}}
    job_file.write_text(yaml.safe_dump(detached))
    started = lambdaml_cli("train", str(job_file), "--stack", name, "--detach")
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.split()[1]
    assert f"lambdaml attach {job_id} --stack {name}" in started.stdout
    assert f"lambdaml cancel {job_id} --stack {name}" in started.stdout

    attached = lambdaml_cli("attach", job_id, "--stack", name, "--results-dir", str(tmp_path))
    assert attached.returncode == 0, attached.stderr
    store = remote.stack_store(remote.resolve_stack(name))
    stored = JobResult.from_json(json.loads(store.get(keys.job_result(job_id))))
    # The line train ends with, of the result the job's rank 0 recorded, and the same file on disk.
    assert f"job {job_id} finished in {stored.wall_time_s:.1f}s; model at {stored.model_uri}" in attached.stdout
    assert f"result: {tmp_path / f'{job_id}.json'}" in attached.stdout
    assert json.loads((tmp_path / f"{job_id}.json").read_text()) == stored.to_json()
    # Attaching to the finished job again ends the same way.
    again = lambdaml_cli("attach", job_id, "--stack", name, "--results-dir", str(tmp_path / "again"))
    assert again.returncode == 0 and again.stdout.splitlines()[-2:-1] == attached.stdout.splitlines()[-2:-1]


def test_status_watch_follows_a_job_to_its_end_in_json_lines(
    local_stack: tuple[str, dict[str, Any]], jobs_dataset: str, tmp_path: Path
) -> None:
    name, _ = local_stack
    job_id = start_detached(name, tmp_path, {**JOB, "name": "watched", "dataset": jobs_dataset})

    watched = lambdaml_cli("status", job_id, "--stack", name, "--watch", "--interval", "0.2", "--output", "json")
    assert watched.returncode == 0, watched.stderr
    looks = [json.loads(line) for line in watched.stdout.splitlines()]
    assert looks[-1]["state"] == "succeeded" and all(look["state"] == "running" for look in looks[:-1])
    epochs = [max((h["epoch"] for h in look["heartbeats"]), default=0) for look in looks]
    assert epochs == sorted(epochs) and epochs[-1] == JOB["algorithm"]["epochs"]
    assert len({json.dumps(look, sort_keys=True) for look in looks}) == len(looks)  # a line for each change only


# Hours of rounds: it cannot end before the Ctrl-C however loaded the machine is; each test cancels it.
LONG = {**JOB, "algorithm": {**JOB["algorithm"], "epochs": 100_000}}


def test_ctrl_c_leaves_an_attached_job_running_and_says_how_to_cancel_it(
    local_stack: tuple[str, dict[str, Any]], jobs_dataset: str, tmp_path: Path
) -> None:
    name, _ = local_stack
    job_id = start_detached(name, tmp_path, {**LONG, "name": "left-running", "dataset": jobs_dataset})

    code, _, err = interrupt_after_first_epoch("attach", job_id, "--stack", name)
    assert code == 130, err
    cancel = f"lambdaml cancel {job_id} --stack {name}"
    assert cancel in err and f"lambdaml attach {job_id} --stack {name}" in err
    status = lambdaml_cli("status", job_id, "--stack", name, "--output", "json")
    assert json.loads(status.stdout)["state"] == "running"  # hours of rounds left
    # The stack's job list has it, running.
    listed = lambdaml_cli("jobs", "--stack", name, "--state", "running", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert [s["state"] for s in json.loads(listed.stdout) if s["job_id"] == job_id] == ["running"]

    # The command it printed cancels it.
    cancelled = lambdaml_cli(*cancel.split()[1:])
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout, cancelled.stderr
    # Watching a job that ended other than succeeded says so, and exits 1.
    watched = lambdaml_cli("status", job_id, "--stack", name, "--watch")
    assert watched.returncode == 1 and watched.stdout.startswith(f"job {job_id}: cancelled"), watched.stderr


def test_ctrl_c_with_cancel_on_interrupt_cancels_the_job(
    local_stack: tuple[str, dict[str, Any]], jobs_dataset: str, tmp_path: Path
) -> None:
    name, _ = local_stack
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({**LONG, "name": "cancelled", "dataset": jobs_dataset}))
    code, out, err = interrupt_after_first_epoch("train", str(job_file), "--stack", name, "--cancel-on-interrupt")
    assert code == 130, err
    job_id = out.split()[1].rstrip(":")
    assert f"job {job_id} cancelled" in err
    status = lambdaml_cli("status", job_id, "--stack", name, "--output", "json")
    assert json.loads(status.stdout)["state"] == "cancelled"


def test_jobs_lists_the_stacks_jobs_newest_first(local_stack: tuple[str, dict[str, Any]], jobs_dataset: str) -> None:
    name, _ = local_stack
    deployed = remote.resolve_stack(name)
    store = remote.stack_store(deployed)
    in_bucket = {k.split("/")[1] for k in store.list("jobs/") if k.endswith("/status.json")}
    results = store.get_many([keys.job_result(job_id) for job_id in in_bucket])
    # The stack's own jobs; the tests above also ran some with local processes on its bucket.
    recorded = {
        j for j in in_bucket if json.loads(results.get(keys.job_result(j), b"{}")).get("backend", "lambda") == "lambda"
    }
    assert len(recorded) >= 3 and recorded != in_bucket  # the tests above left both kinds

    listed = lambdaml_cli("jobs", "--stack", name, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    summaries = json.loads(listed.stdout)
    assert {s["job_id"] for s in summaries} == recorded
    assert [s["created_at"] for s in summaries] == sorted((s["created_at"] for s in summaries), reverse=True)
    cancelled = next(s for s in summaries if s["job_id"].startswith("cancelled-"))
    assert cancelled["state"] == "cancelled"
    # The list is the stack's JobsTable, written by its functions as each job's state changed.
    table = deployed.client("dynamodb").scan(TableName=deployed.output("JobsTableName"))["Items"]
    assert sorted(item["job_id"]["S"] for item in table if item["item"]["S"] == "record") == sorted(recorded)
    done = [s for s in summaries if s["state"] == "succeeded"]
    assert done and all(s["spec_hash"] and s["result_key"].endswith("/result.json") for s in done)
    assert all(s["model_uri"].startswith("s3://") and s["cost_dollars"] > 0 for s in done)
    # The bucket's records list every job that used it, the local processes' too.
    everything = lambdaml_cli("jobs", "--bucket", deployed.output("DataBucketName"), "--endpoint-url",
                              deployed.endpoints["s3"], "--output", "json")  # fmt: skip
    assert {s["job_id"] for s in json.loads(everything.stdout)} == in_bucket, everything.stderr

    finished = lambdaml_cli("jobs", "--stack", name, "--state", "succeeded")
    assert finished.returncode == 0, finished.stderr
    rows = [line.split() for line in finished.stdout.splitlines() if line.split() and line.split()[0] in recorded]
    succeeded = {s["job_id"] for s in summaries if s["state"] == "succeeded"}
    assert {r[0] for r in rows} == succeeded and all(r[1] == "succeeded" and r[-1].startswith("$") for r in rows)
    assert all(len(line) <= 80 for line in lambdaml_cli("jobs", "--stack", name).stdout.splitlines())


def test_local_status_shows_endpoints_functions_and_where_their_logs_are(
    local_stack: tuple[str, dict[str, Any]],
) -> None:
    name, record = local_stack
    shown = lambdaml_cli("local", "status", "--name", name, "--output", "json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["up"] and status["endpoints"] == record["endpoints"]
    assert status["ports"]["lambda"] == int(record["endpoints"]["lambda"].rsplit(":", 1)[1])
    groups = {f["name"]: f["log_group"] for f in record["functions"]}
    assert {f["function"]: f["log_group"] for f in status["functions"]} == groups
    worker = next(f for f in status["functions"] if f["logical"] == "WorkerFunction")
    assert Path(worker["log_file"]).read_text(), "the jobs above ran workers, which logged"
    table = lambdaml_cli("local", "status", "--name", name)
    assert f"local stack {name!r} is up" in table.stdout and worker["log_group"] in table.stdout


def test_local_up_port_fixes_the_lambda_endpoints_port(tmp_path: Path) -> None:
    from lambdaml.aws import client
    from lambdaml.local import services

    port = services.free_port()
    env = {**wide(), "LAMBDAML_HOME": str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "lambdaml", "local", *args, "--name", "ported"]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)

    started = cli("up", "--port", str(port))
    try:
        assert started.returncode == 0, started.stderr
        assert f"http://127.0.0.1:{port}" in started.stdout
        status = json.loads(cli("status", "--output", "json").stdout)
        assert status["ports"]["lambda"] == port and status["up"]
        functions = client("lambda", endpoint_url=f"http://127.0.0.1:{port}").list_functions()["Functions"]
        assert {f["FunctionName"] for f in functions} == {f["function"] for f in status["functions"]}
    finally:
        cli("down")
    assert cli("status").returncode == 1  # forgotten once down


def test_clean_removes_an_ended_jobs_checkpoints_and_keeps_its_result(
    local_stack: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, _ = local_stack
    store = remote.stack_store(remote.resolve_stack(name))
    job_id = next(s["job_id"] for s in json.loads(lambdaml_cli("jobs", "--stack", name, "--json").stdout)
                  if s["job_id"].startswith("detached-"))  # fmt: skip
    left = [k for k in store.list(keys.job_prefix(job_id)) if k.startswith(keys.attempt_prefix(job_id, 1))]
    assert any("/checkpoints/" in k for k in left) and any("/heartbeats/" in k for k in left)

    # What a worker that crashed mid-round would leave on the job's channel (the stack's redis).
    stored = records.stored_job(store, job_id)
    with open_channel(stored.channel) as channel:
        stray = [keys.round_prefix(job_id, 7) + f"w{rank}" for rank in range(3)]
        channel.put_many([(key, b"partial") for key in stray])

        dry = lambdaml_cli("clean", "--stack", name, "--older-than", "0s", "--dry-run")
        said = f"job {job_id}: would remove {len(left)} objects and 3 channel keys"
        assert dry.returncode == 0 and said in dry.stdout, dry.stdout + dry.stderr
        assert [k for k in store.list(keys.job_prefix(job_id)) if k in left] == left
        assert channel.list(keys.comm_job_prefix(job_id)) == sorted(stray)
        done = lambdaml_cli("clean", "--stack", name, "--older-than", "0s")
        said = f"job {job_id}: removed {len(left)} objects and 3 channel keys"
        assert done.returncode == 0 and said in done.stdout, done.stdout + done.stderr
        assert channel.list(keys.comm_job_prefix(job_id)) == []
    kept = store.list(keys.job_prefix(job_id))
    assert not set(kept) & set(left)
    assert {keys.job_result(job_id), keys.job_model(job_id), keys.job_status(job_id), keys.job_spec(job_id)} <= set(
        kept
    )
    # Its result still answers as it did.
    again = lambdaml_cli("attach", job_id, "--stack", name, "--results-dir", str(tmp_path))
    assert again.returncode == 0 and f"job {job_id} finished in" in again.stdout, again.stderr


def test_logs_follow_shows_every_ranks_lines_of_a_running_job_until_it_ends(
    local_stack: tuple[str, dict[str, Any]], jobs_dataset: str, tmp_path: Path
) -> None:
    name, _ = local_stack
    job_id = start_detached(name, tmp_path, {**LONG, "name": "logged", "dataset": jobs_dataset})

    follow = subprocess.Popen(
        [sys.executable, "-m", "lambdaml", "logs", job_id, "--stack", name, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**wide(), "PYTHONUNBUFFERED": "1"},
    )
    timer = threading.Timer(300, follow.kill)  # a bound for a broken run only
    timer.start()
    ranks: set[int] = set()
    try:
        assert follow.stdout is not None
        for line in follow.stdout:
            ranks.add(int(line.split()[2]))  # "HH:MM:SS.mmm rank R  message"
            if ranks == {0, 1, 2, 3}:
                break
        assert ranks == {0, 1, 2, 3}, follow.stderr.read() if follow.stderr else ""
        # The job ends; so does --follow, by itself.
        assert lambdaml_cli("cancel", job_id, "--stack", name).returncode == 0
        _, err = follow.communicate(timeout=120)
    finally:
        timer.cancel()
    assert follow.returncode == 0, err

    one = lambdaml_cli("logs", job_id, "--stack", name, "--rank", "2")
    assert one.returncode == 0, one.stderr
    lines = one.stdout.splitlines()
    assert lines and all(line.split()[1:3] == ["rank", "2"] for line in lines)
    assert any(f"lambdaml job {job_id} rank 2 attempt 1" in line for line in lines)
    assert any("START RequestId:" in line for line in lines)
    as_json = lambdaml_cli("logs", job_id, "--stack", name, "--rank", "2", "--output", "json")
    logged = [json.loads(line) for line in as_json.stdout.splitlines()]
    # The same lines (the log may have grown since: its last lines ship a moment after the job ends).
    assert [r["message"].split() for r in logged][: len(lines)] == [line.split()[3:] for line in lines]
    assert all(r["rank"] == 2 and r["at_ms"] > 0 for r in logged)
    missing = lambdaml_cli("logs", "no-such-job", "--stack", name)
    assert missing.returncode == 1 and "no job 'no-such-job'" in missing.stderr
