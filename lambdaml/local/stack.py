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

from lambdaml import aws, settings
from lambdaml.backends.stack import local_record, record_path, refusing_endpoint
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.local import services

ROOT = Path(__file__).resolve().parents[2]
CODE_BUCKET = "lambdaml-local-code"
CODE_KEY = "functions.zip"
CREATE_TIMEOUT_S = 120.0
# Parameters for a local stack: no VPC and no ElastiCache (a local cache stands in).
LOCAL_PARAMETERS = {"ChannelCache": "None"}


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation's short tags (!Ref, !GetAtt, ...) as plain values."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


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


def _resolve(value: Any, parameters: dict[str, Any]) -> Any:
    if isinstance(value, dict) and "Ref" in value:
        return parameters[value["Ref"]]
    return value


def function_configs(template: Path, outputs: dict[str, str], overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """The template's zip functions as the local Lambda service needs them (plain data)."""
    sam = yaml.load(template.read_text(), Loader=_CfnLoader)
    parameters = {k: str(v.get("Default", "")) for k, v in sam.get("Parameters", {}).items()}
    parameters.update(overrides)
    configs = []
    for logical, output in (
        ("CoordinatorFunction", "CoordinatorFunctionName"),
        ("WorkerFunction", "WorkerFunctionName"),
    ):
        props = sam["Resources"][logical]["Properties"]
        configs.append(
            {
                "logical": logical,
                "name": outputs[output],
                "handler": props["Handler"],
                "code_dir": str(ROOT / str(props["CodeUri"]).rstrip("/")),
                "timeout_s": float(_resolve(props.get("Timeout", 3), parameters)),
                "memory_mb": int(_resolve(props.get("MemorySize", 128), parameters)),
            }
        )
    return configs


def up(name: str = "local", *, cache: str = "none", template: Path | None = None) -> dict[str, Any]:
    """Start moto, the Lambda service and a cache; create the template's stack; record it."""
    template = template or ROOT / "template.yaml"
    path = record_path(name)
    previous = local_record(name)
    if previous is not None:
        if refusing_endpoint(previous) is None:
            raise ConfigError(f"local stack {name!r} is already up ({path}); run 'lambdaml local down' first")
        down(name)  # what is left of a stack that went down (a reboot, a killed moto): stopped, forgotten
    workdir = settings.home() / "local" / name
    workdir.mkdir(parents=True, exist_ok=True)
    started: list[services.Service] = []
    try:
        moto = services.start_moto(log_path=workdir / "moto.log")
        started.append(moto)
        translated = _translate(template, LOCAL_PARAMETERS, workdir / "template.json")
        s3 = aws.client("s3", endpoint_url=moto.url)
        s3.create_bucket(Bucket=CODE_BUCKET)
        s3.put_object(Bucket=CODE_BUCKET, Key=CODE_KEY, Body=_code_zip())
        cloudformation = aws.client("cloudformation", endpoint_url=moto.url)
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=json.dumps(translated),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in LOCAL_PARAMETERS.items()],
        )
        outputs = aws.wait_for_stack(cloudformation, name, timeout_s=CREATE_TIMEOUT_S)
        extra: dict[str, str] = {}
        if cache in ("redis", "memcached"):
            server = services.start_redis if cache == "redis" else services.start_memcached
            cache_service = server(log_path=workdir / f"{cache}.log")
            started.append(cache_service)
            extra.update(CacheEndpoint=f"127.0.0.1:{cache_service.port}", CacheKind=cache)  # as the template's
        record: dict[str, Any] = {
            "name": name,
            "region": "us-east-1",
            "endpoints": {"s3": moto.url, "dynamodb": moto.url, "cloudformation": moto.url},
            "outputs": extra,
            "functions": function_configs(template, outputs, {}),
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
            environment=environment,
            # As the template's EventInvokeConfig: a worker AWS gave up on goes to the coordinator.
            on_failure=names["CoordinatorFunction"] if f["logical"] == "WorkerFunction" else None,
        )
        for f in record["functions"]
    ]
    service = LambdaService(functions, port=port, log_dir=Path(record["workdir"]))
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
