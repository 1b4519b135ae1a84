"""The local stack: the SAM template's resources on moto, its functions on the local
Lambda service, and Redis or Memcached when a job wants a cache channel.

``lambdaml local up`` translates template.yaml to CloudFormation offline (the SAM
translator in .venv-sam), creates it on moto's CloudFormation, and serves the created
functions under their physical names, so the local stack differs from AWS only in its
endpoints. The endpoints and the processes are recorded in
``~/.lambdaml/stacks/NAME.json``, which ``lambdaml train --stack NAME`` reads.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import yaml

from lambdaml import aws, keys, settings
from lambdaml.backends.stack import local_stacks
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.local import services

ROOT = Path(__file__).resolve().parents[2]
CODE_BUCKET = "lambdaml-local-code"
CODE_KEY = "functions.zip"
CREATE_TIMEOUT_S = 120.0
# Parameters for a local stack: no VPC and no ElastiCache (a local cache stands in).
LOCAL_PARAMETERS = {"ChannelCache": "None"}
ACCOUNT_CONCURRENCY = 1000  # AWS's default quota of concurrent executions per region


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation's short tags (!Ref, !GetAtt, ...) as plain values."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


def record_path(name: str) -> Path:
    return local_stacks() / f"{keys.check_name(name, 'stack name')}.json"


def _translate(template: Path, parameters: dict[str, str], out: Path) -> dict[str, Any]:
    translator = ROOT / ".venv-sam" / "bin" / "python"
    if not translator.exists():
        raise ConfigError("the SAM translator is missing: run 'make sam-env' first")
    command = [str(translator), str(ROOT / "infra" / "sam" / "translate.py"), "-t", str(template)]
    command += ["--code-uri", f"s3://{CODE_BUCKET}/{CODE_KEY}", "-o", str(out)]
    for key, value in parameters.items():
        command += ["--parameter", f"{key}={value}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ConfigError(f"cannot translate {template}: {done.stderr.strip().splitlines()[-1:]}")
    translated: dict[str, Any] = json.loads(out.read_text())
    return translated


def _code_zip() -> bytes:
    """What CloudFormation gets as the functions' code (the service runs them from the tree)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in (ROOT / "functions").rglob("app.py"):
            archive.write(path, path.relative_to(ROOT / "functions"))
    return buffer.getvalue()


def _resolve(value: Any, parameters: dict[str, Any], conditions: dict[str, Any] | None = None) -> Any:
    """A property's value with its parameters and conditions resolved (None for ``AWS::NoValue``)."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, arg),) = value.items()
        if tag == "Ref":
            return None if arg == "AWS::NoValue" else parameters[arg]
        if tag == "If":
            name, when_true, when_false = arg
            chosen = when_true if _condition(name, parameters, conditions or {}) else when_false
            return _resolve(chosen, parameters, conditions)
    return value


def _condition(name: str, parameters: dict[str, Any], conditions: dict[str, Any]) -> bool:
    """A template condition built of Equals, Not, And, Or and Condition over parameters."""

    def holds(node: Any) -> bool:
        ((tag, arg),) = node.items()
        if tag == "Equals":
            left, right = (str(_resolve(a, parameters, conditions)) for a in arg)
            return left == right
        if tag == "Not":
            return not holds(arg[0])
        if tag == "And":
            return all(holds(a) for a in arg)
        if tag == "Or":
            return any(holds(a) for a in arg)
        if tag == "Condition":
            return holds(conditions[arg])
        raise ConfigError(f"the local stack cannot evaluate condition {name!r} ({tag})")

    return holds(conditions[name])


def _log_groups(cloudformation: Any, stack: str) -> dict[str, str]:
    """Logical id -> name of the stack's log groups (what the functions' LoggingConfig names)."""
    resources = cloudformation.describe_stack_resources(StackName=stack)["StackResources"]
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in resources
        if r.get("ResourceType") == "AWS::Logs::LogGroup"
    }


def function_configs(
    template: Path, outputs: dict[str, str], overrides: dict[str, Any], log_groups: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The template's zip functions as the local Lambda service needs them (plain data)."""
    sam = yaml.load(template.read_text(), Loader=_CfnLoader)
    parameters = {k: str(v.get("Default", "")) for k, v in sam.get("Parameters", {}).items()}
    parameters.update(overrides)
    conditions = sam.get("Conditions", {})
    architectures = sam.get("Globals", {}).get("Function", {}).get("Architectures", ["x86_64"])
    configs = []
    for logical, output in (
        ("CoordinatorFunction", "CoordinatorFunctionName"),
        ("WorkerFunction", "WorkerFunctionName"),
    ):
        props = sam["Resources"][logical]["Properties"]
        reserved = _resolve(props.get("ReservedConcurrentExecutions"), parameters, conditions)
        group = props.get("LoggingConfig", {}).get("LogGroup")  # a !Ref to the template's log group
        configs.append(
            {
                "logical": logical,
                "name": outputs[output],
                "handler": props["Handler"],
                "code_dir": str(ROOT / str(props["CodeUri"]).rstrip("/")),
                "timeout_s": float(_resolve(props.get("Timeout", 3), parameters)),
                "memory_mb": int(_resolve(props.get("MemorySize", 128), parameters)),
                "reserved_concurrency": None if reserved is None else int(reserved),
                "architecture": str(_resolve(props.get("Architectures", architectures), parameters)[0]),
                "description": str(props.get("Description", "")),
                "log_group": (log_groups or {}).get(group["Ref"], "") if isinstance(group, dict) else "",
            }
        )
    return configs


def up(
    name: str = "local",
    *,
    cache: str = "none",
    template: Path | None = None,
    parameters: dict[str, str] | None = None,
    account_concurrency: int = ACCOUNT_CONCURRENCY,
) -> dict[str, Any]:
    """Start moto, the Lambda service and a cache; create the template's stack; record it.

    ``parameters`` override the template's (``WorkerReservedConcurrency=4``, say);
    ``account_concurrency`` is the account's concurrent executions the local Lambda service
    enforces and reports, of which 100 (or a tenth, below 1000) stay unreserved as on AWS.
    """
    if account_concurrency < 1:
        raise ConfigError(f"the account's concurrency must be >= 1, got {account_concurrency}")
    overrides = dict(parameters or {})
    template = template or ROOT / "template.yaml"
    path = record_path(name)
    if path.exists():
        raise ConfigError(f"local stack {name!r} is already up ({path}); run 'lambdaml local down' first")
    workdir = settings.home() / "local" / name
    workdir.mkdir(parents=True, exist_ok=True)
    started: list[services.Service] = []
    try:
        moto = services.start_moto(log_path=workdir / "moto.log")
        started.append(moto)
        stack_parameters = {**overrides, **LOCAL_PARAMETERS}
        translated = _translate(template, stack_parameters, workdir / "template.json")
        s3 = aws.client("s3", endpoint_url=moto.url)
        s3.create_bucket(Bucket=CODE_BUCKET)
        s3.put_object(Bucket=CODE_BUCKET, Key=CODE_KEY, Body=_code_zip())
        cloudformation = aws.client("cloudformation", endpoint_url=moto.url)
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=json.dumps(translated),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in stack_parameters.items()],
        )
        outputs = aws.wait_for_stack(cloudformation, name, timeout_s=CREATE_TIMEOUT_S)
        log_groups = _log_groups(cloudformation, name)
        extra: dict[str, str] = {}
        if cache in ("redis", "memcached"):
            server = services.start_redis if cache == "redis" else services.start_memcached
            cache_service = server(log_path=workdir / f"{cache}.log")
            started.append(cache_service)
            extra["CacheEndpoint"] = f"127.0.0.1:{cache_service.port}"
        record: dict[str, Any] = {
            "name": name,
            "region": "us-east-1",
            "endpoints": {"s3": moto.url, "dynamodb": moto.url, "cloudformation": moto.url, "logs": moto.url},
            "outputs": extra,
            "functions": function_configs(template, outputs, stack_parameters, log_groups),
            "account_concurrency": account_concurrency,
            "pids": [s.process.pid for s in started],
            "workdir": str(workdir),
        }
        lambda_port = services.free_port()
        record["endpoints"]["lambda"] = f"http://127.0.0.1:{lambda_port}"
        config = workdir / "service.json"
        config.write_text(json.dumps(record))
        serve_log = (workdir / "lambda-service.log").open("wb")
        server_process = subprocess.Popen(
            [sys.executable, "-m", "lambdaml.local.stack", str(config), str(lambda_port)],
            stdout=serve_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        record["pids"].append(server_process.pid)
        _wait_port(lambda_port, server_process)
    except BaseException:
        for service in started:
            service.stop()
        raise
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return record


def unreserved_minimum(limit: int) -> int:
    """What an account must leave unreserved: AWS keeps 100 of its default 1000; smaller local accounts a tenth."""
    return min(100, limit // 10)


def _wait_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LambdaMLError(f"the local Lambda service exited at start (code {process.returncode})")
        if services._answers(port, b"GET / HTTP/1.0\r\n\r\n", b"HTTP"):
            return
        time.sleep(0.1)
    raise LambdaMLError("the local Lambda service did not start within 30s")


def down(name: str = "local") -> list[int]:
    """Stop every process of the local stack and forget it."""
    path = record_path(name)
    if not path.exists():
        raise ConfigError(f"no local stack named {name!r}")
    record = json.loads(path.read_text())
    stopped = []
    for pid in record["pids"]:
        try:
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
        except ProcessLookupError:
            continue
    path.unlink()
    return stopped


def serve(config_path: Path, port: int) -> None:
    """Run the local Lambda service for a stack until terminated (``lambdaml local up`` starts this)."""
    from lambdaml.local.lambda_service import FunctionConfig, LambdaService

    record = json.loads(config_path.read_text())
    moto = record["endpoints"]["s3"]
    lambda_url = f"http://127.0.0.1:{port}"
    names = {f["logical"]: f["name"] for f in record["functions"]}
    environment = {
        "AWS_ENDPOINT_URL_S3": moto,
        "AWS_ENDPOINT_URL_DYNAMODB": moto,
        "AWS_ENDPOINT_URL_LAMBDA": lambda_url,
        "LAMBDAML_WORKER_FUNCTION": names["WorkerFunction"],
    }
    functions = [
        FunctionConfig(
            name=f["name"],
            handler=f["handler"],
            code_dir=f["code_dir"],
            timeout_s=f["timeout_s"],
            memory_mb=f["memory_mb"],
            reserved_concurrency=f.get("reserved_concurrency"),
            architecture=f.get("architecture", "x86_64"),
            description=f.get("description", ""),
            log_group=f.get("log_group", ""),
            environment=environment,
            # As the template's EventInvokeConfig: a worker AWS gave up on goes to the coordinator.
            on_failure=names["CoordinatorFunction"] if f["logical"] == "WorkerFunction" else None,
        )
        for f in record["functions"]
    ]
    limit = int(record.get("account_concurrency", ACCOUNT_CONCURRENCY))
    service = LambdaService(
        functions, port=port, log_dir=Path(record["workdir"]), max_concurrency=limit,
        unreserved_minimum=unreserved_minimum(limit), logs_endpoint_url=record["endpoints"].get("logs"),
    )  # fmt: skip
    service.start()
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    try:
        while not stop["now"]:
            time.sleep(0.2)
    finally:
        service.stop()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    serve(Path(sys.argv[1]), int(sys.argv[2]))
