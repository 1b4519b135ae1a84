"""The local stack: the SAM template's resources on moto, its functions on the local
Lambda service, and a local server of a cache channel's kind when a job wants one.

``lambdaml local up`` translates template.yaml to CloudFormation offline (the SAM
translator in .venv-sam), creates it on moto's CloudFormation, and serves the created
functions under their physical names, so the local stack differs from AWS only in its
endpoints. It also runs the direct channel's rendezvous service (the reflector) on loopback,
which the template runs on an EC2 instance when ``DirectChannel`` is on. The endpoints and the processes are recorded in
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import yaml

from lambdaml import aws, settings
from lambdaml.errors import ConfigError, LambdaMLError
from lambdaml.local import artifacts, services
from lambdaml.platforms.aws_lambda.find import local_record, record_path, refusing_endpoint
from lambdaml.platforms.aws_lambda.outputs import REFLECTOR_ENDPOINT

ROOT = Path(__file__).resolve().parents[2]
CODE_BUCKET = "lambdaml-local-code"
CODE_KEY = "functions.zip"
CREATE_TIMEOUT_S = 120.0
# Parameters for a local stack: no VPC, no ElastiCache (a local cache stands in) and no EC2
# rendezvous service (a local reflector stands in).
LOCAL_PARAMETERS = {"ChannelCache": "None", "DirectChannel": "false"}
ACCOUNT_CONCURRENCY = 1000  # AWS's default quota of concurrent executions per region
TORCH_IMAGE = "lambdaml-local/torch-worker:latest"  # stands in for the ECR image; never pulled


class FunctionEntry(TypedDict):
    """One of the stack's functions as the local Lambda service runs it (``FunctionConfig``'s settings)."""

    logical: str  # its logical id in the template
    name: str
    timeout_s: float
    memory_mb: int
    reserved_concurrency: int | None
    architecture: str
    description: str
    log_group: str
    environment: dict[str, str]
    handler: str
    image: NotRequired[bool]  # the image function: run from the torch worker's environment
    code: NotRequired[str]  # a zip function: its folder in the ``sam build`` output
    code_dir: NotRequired[str]  # where it runs from, once placed
    layers: NotRequired[list[str]]


class LocalStackRecord(TypedDict):
    """What ``lambdaml local up`` records of a stack (``~/.lambdaml/stacks/NAME.json``)."""

    name: str
    region: str
    endpoints: dict[str, str]  # service -> loopback URL: s3, dynamodb, cloudformation, logs, lambda
    outputs: dict[str, str]  # what the template's outputs would say of a local cache and the reflector
    functions: list[FunctionEntry]
    runtime_dir: str
    cache: str
    account_concurrency: int
    pids: list[int]
    workdir: str


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation's short tags (!Ref, !GetAtt, ...) as plain values."""


def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


def _translate(template: Path, parameters: dict[str, str], out: Path) -> str:
    """The template as CloudFormation JSON, translated by the SAM translator."""
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
    return out.read_text()


def _code_zip() -> bytes:
    """What CloudFormation gets as the functions' code (the service runs them from the tree)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in (ROOT / "functions").rglob("app.py"):
            archive.write(path, path.relative_to(ROOT / "functions"))
    return buffer.getvalue()


class _Template:
    """The template's values as CloudFormation resolves them for one stack: parameters, conditions, resources."""

    def __init__(self, sam: dict[str, Any], parameters: dict[str, str], resources: dict[str, str]) -> None:
        self.sam = sam  # the template as YAML reads it, short tags as ``{tag: argument}``
        self.parameters = {k: str(v.get("Default", "")) for k, v in sam.get("Parameters", {}).items()}
        self.parameters.update(parameters)
        self.resources = resources  # logical id -> physical id

    def condition(self, name: str) -> bool:
        """Whether the template's condition ``name`` holds."""
        return self.holds(self.sam["Conditions"][name])

    def resolve(self, value: Any) -> Any:
        """A property's value (None for ``AWS::NoValue`` or a value only another stack could have)."""
        if isinstance(value, dict) and len(value) == 1:
            ((tag, arg),) = value.items()
            if tag == "Ref":
                if arg == "AWS::NoValue":
                    return None
                return self.parameters[arg] if arg in self.parameters else self.resources.get(arg)
            if tag == "If":
                name, when_true, when_false = arg
                return self.resolve(when_true if self.condition(name) else when_false)
            if tag == "GetAtt":
                return None  # only under conditions the local stack does not meet (ElastiCache)
        return value

    def holds(self, node: Any) -> bool:
        """A condition built of Equals, Not, And, Or and Condition over parameters."""
        ((tag, arg),) = node.items()
        if tag == "Equals":
            left, right = (str(self.resolve(a)) for a in arg)
            return left == right
        if tag == "Not":
            return not self.holds(arg[0])
        if tag == "And":
            return all(self.holds(a) for a in arg)
        if tag == "Or":
            return any(self.holds(a) for a in arg)
        if tag == "Condition":
            return self.condition(arg)
        raise ConfigError(f"the local stack cannot evaluate a condition with {tag}")

    def function(self, logical: str) -> dict[str, Any] | None:
        """One function's properties over the template's Globals, or None if its condition is false."""
        resource = self.sam["Resources"][logical]
        if "Condition" in resource and not self.condition(resource["Condition"]):
            return None
        defaults = self.sam.get("Globals", {}).get("Function", {})
        props = {**defaults, **resource["Properties"]}
        variables = {
            **defaults.get("Environment", {}).get("Variables", {}),
            **resource["Properties"].get("Environment", {}).get("Variables", {}),
        }
        props["Environment"] = {k: self.resolve(v) for k, v in variables.items()}
        return props


def _physical_ids(cloudformation: Any, stack: str) -> dict[str, str]:
    resources = cloudformation.describe_stack_resources(StackName=stack)["StackResources"]
    return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources if r.get("PhysicalResourceId")}


#: The template's functions and the output naming each.
FUNCTIONS = (
    ("CoordinatorFunction", "CoordinatorFunctionName"),
    ("WorkerFunction", "WorkerFunctionName"),
    ("TorchWorkerFunction", "TorchWorkerFunctionName"),
)


def function_configs(
    template: Path, outputs: dict[str, str], overrides: Mapping[str, object], resources: dict[str, str] | None = None
) -> list[FunctionEntry]:
    """The template's functions as the local Lambda service needs them (plain data), from their artifacts.

    Zip functions run from their ``sam build`` directory; the image function (the torch worker,
    when the stack has one) from the environment built of its image's files.
    """
    sam = yaml.load(template.read_text(), Loader=_CfnLoader)
    values = _Template(sam, {k: str(v) for k, v in overrides.items()}, resources or {})
    configs = []
    for logical, output in FUNCTIONS:
        props = values.function(logical)
        if props is None or output not in outputs:
            continue
        reserved = values.resolve(props.get("ReservedConcurrentExecutions"))
        group = values.resolve(props.get("LoggingConfig", {}).get("LogGroup"))
        image = props.get("PackageType") == "Image"
        config: FunctionEntry = {
            "logical": logical,
            "name": outputs[output],
            "timeout_s": float(values.resolve(props.get("Timeout", 3))),
            "memory_mb": int(values.resolve(props.get("MemorySize", 128))),
            "reserved_concurrency": None if reserved is None else int(reserved),
            "architecture": str(values.resolve(props.get("Architectures", ["x86_64"])[0])),
            "description": str(props.get("Description", "")),
            "log_group": str(group or ""),
            "environment": {k: "" if v is None else str(v) for k, v in props["Environment"].items()},
            # The image function's handler is its Dockerfile's CMD.
            "handler": "worker.app.handler" if image else props["Handler"],
        }
        if image:
            config["image"] = True
        else:
            config["code"] = logical
        configs.append(config)
    return configs


def up(
    name: str = "local",
    *,
    cache: str = "none",
    template: Path | None = None,
    parameters: dict[str, str] | None = None,
    account_concurrency: int = ACCOUNT_CONCURRENCY,
    torch: bool = False,
    build_dir: Path | None = None,
    port: int | None = None,
) -> LocalStackRecord:
    """Start moto, the Lambda service, the reflector and a cache; create the template's stack; record it.

    The functions run from their artifacts (``artifacts``): ``build_dir`` is a ``sam build``
    output to use instead of building one. ``torch`` adds the torch worker (the image function),
    run from an environment built of ``functions/worker_image/``. ``parameters`` override the
    template's (``WorkerReservedConcurrency=4``, say); ``account_concurrency`` is the account's
    concurrent executions the local Lambda service enforces and reports, of which 100 (or a
    tenth, below 1000) stay unreserved as on AWS. ``port`` fixes the Lambda endpoint's port (default: a free one).
    """
    if account_concurrency < 1:
        raise ConfigError(f"the account's concurrency must be >= 1, got {account_concurrency}")
    if port is not None:
        services.free_port(port)  # taken: refused before anything is built or started
    overrides = dict(parameters or {})
    if torch:
        overrides.setdefault("TorchImageUri", TORCH_IMAGE)
    template = template or ROOT / "template.yaml"
    path = record_path(name)
    previous = local_record(name)
    if previous is not None:
        if refusing_endpoint(previous) is None:
            raise ConfigError(f"local stack {name!r} is already up ({path}); run 'lambdaml local down' first")
        down(name)  # what is left of a stack that went down (a reboot, a killed moto): stopped, forgotten
    workdir = settings.home() / "local" / name
    workdir.mkdir(parents=True, exist_ok=True)
    built = build_dir or artifacts.sam_build(template)
    runtime = artifacts.runtime_layer()
    torch_env = artifacts.torch_worker() if torch else None
    started: list[services.Service] = []
    try:
        moto = services.start_moto(log_path=workdir / "moto.log")
        started.append(moto)
        reflector = services.start_reflector(log_path=workdir / "reflector.log")
        started.append(reflector)
        stack_parameters = {**overrides, **LOCAL_PARAMETERS}
        translated = _translate(template, stack_parameters, workdir / "template.json")
        s3 = aws.client("s3", endpoint_url=moto.url)
        s3.create_bucket(Bucket=CODE_BUCKET)
        s3.put_object(Bucket=CODE_BUCKET, Key=CODE_KEY, Body=_code_zip())
        cloudformation = aws.client("cloudformation", endpoint_url=moto.url)
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=json.dumps(json.loads(translated)),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in stack_parameters.items()],
        )
        outputs = aws.wait_for_stack(cloudformation, name, timeout_s=CREATE_TIMEOUT_S)
        resources = _physical_ids(cloudformation, name)
        extra = {REFLECTOR_ENDPOINT: f"127.0.0.1:{reflector.port}"}  # as the template's, with DirectChannel on
        if cache != "none":
            cache_service = services.start_channel_server(cache, log_path=workdir / f"{cache}.log")
            started.append(cache_service)
            extra.update(CacheEndpoint=f"127.0.0.1:{cache_service.port}", CacheKind=cache)  # as the template's
        record: LocalStackRecord = {
            "name": name,
            "region": "us-east-1",
            "endpoints": {"s3": moto.url, "dynamodb": moto.url, "cloudformation": moto.url, "logs": moto.url},
            "outputs": extra,
            "functions": _placed(function_configs(template, outputs, stack_parameters, resources), built, torch_env),
            "runtime_dir": str(runtime),
            "cache": cache,
            "account_concurrency": account_concurrency,
            "pids": [s.process.pid for s in started],
            "workdir": str(workdir),
        }
        lambda_port = services.free_port(port or 0)
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


def _placed(configs: list[FunctionEntry], built: Path, torch_env: tuple[Path, Path] | None) -> list[FunctionEntry]:
    """Each function's code folder (and layers): its build directory, or the torch worker's environment."""
    for config in configs:
        if config.pop("image", False):
            if torch_env is None:
                raise ConfigError("the stack has a torch worker, but no environment for it: use --torch")
            config["code_dir"], config["layers"] = str(torch_env[0]), [str(torch_env[1])]
        else:
            code = built / config.pop("code")
            if not (code / config["handler"].rsplit(".", 2)[0]).is_dir():
                raise ConfigError(f"{code} holds no {config['handler']!r}: is {built} a sam build of this template?")
            config["code_dir"], config["layers"] = str(code), []
    return configs


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

    record: LocalStackRecord = json.loads(config_path.read_text())
    moto = record["endpoints"]["s3"]
    names = {f["logical"]: f["name"] for f in record["functions"]}
    # What differs from AWS: the endpoints, and the local cache standing in for ElastiCache.
    local = {
        "AWS_ENDPOINT_URL_S3": moto,
        "AWS_ENDPOINT_URL_DYNAMODB": moto,
        "AWS_ENDPOINT_URL_LOGS": moto,
        "AWS_ENDPOINT_URL_LAMBDA": f"http://127.0.0.1:{port}",
    }
    endpoint = record.get("outputs", {}).get("CacheEndpoint")
    if endpoint:
        host, _, cache_port = endpoint.partition(":")
        local.update(
            {
                settings.ENV_CACHE_KIND: record["cache"],
                settings.ENV_CACHE_HOST: host,
                settings.ENV_CACHE_PORT: cache_port,
                settings.ENV_CACHE_TLS: "false",
            }
        )
    reflector = record.get("outputs", {}).get(REFLECTOR_ENDPOINT)
    if reflector:  # the template gives the functions its instance's address when DirectChannel is on
        local[settings.ENV_REFLECTOR] = reflector
    functions = [
        FunctionConfig(
            name=f["name"],
            handler=f["handler"],
            code_dir=f["code_dir"],
            layers=tuple(f["layers"]),
            timeout_s=f["timeout_s"],
            memory_mb=f["memory_mb"],
            reserved_concurrency=f["reserved_concurrency"],
            architecture=f["architecture"],
            description=f["description"],
            log_group=f["log_group"],
            environment={**f["environment"], **local},
            # As the template's EventInvokeConfigs: a worker AWS gave up on goes to the coordinator.
            on_failure=names["CoordinatorFunction"] if f["logical"] != "CoordinatorFunction" else None,
        )
        for f in record["functions"]
    ]
    limit = int(record.get("account_concurrency", ACCOUNT_CONCURRENCY))
    service = LambdaService(
        functions, port=port, log_dir=Path(record["workdir"]), max_concurrency=limit,
        unreserved_minimum=unreserved_minimum(limit), logs_endpoint_url=record["endpoints"]["logs"],
        runtime_dir=record["runtime_dir"],
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
