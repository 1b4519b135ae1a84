"""Settings agree with the template: every LAMBDAML_* variable template.yaml sets is read through
lambdaml/settings.py, and every name settings.py defines is read somewhere. And what the coordinator
does with them: it refuses a job that is not its stack's, and routes torch models to the image worker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lambdaml import settings
from lambdaml.config import parse_job
from lambdaml.errors import ConfigError
from lambdaml.platforms.aws_lambda.handlers import worker_function
from lambdaml.platforms.fit import check_fits_stack
from tests.unit.test_template import CfnLoader

ROOT = Path(__file__).resolve().parents[2]
NAMES = {name: value for name, value in vars(settings).items() if name.startswith("ENV_")}


def template_variables() -> set[str]:
    template = yaml.load((ROOT / "template.yaml").read_text(), Loader=CfnLoader)  # a SafeLoader
    found = set(template["Globals"]["Function"]["Environment"]["Variables"])
    for resource in template["Resources"].values():
        found |= set(resource.get("Properties", {}).get("Environment", {}).get("Variables", {}))
    return {name for name in found if name.startswith("LAMBDAML_")}


def test_every_variable_the_template_sets_is_a_setting() -> None:
    assert template_variables() <= set(NAMES.values()), template_variables() - set(NAMES.values())


def test_every_setting_is_read_somewhere() -> None:
    code = (
        "\n".join(path.read_text() for path in (ROOT / "lambdaml").rglob("*.py") if path.name != "settings.py")
        + (ROOT / "lambdaml" / "settings.py").read_text().split("def home", 1)[1]
    )
    unread = [name for name in NAMES if not re.search(rf"\b{name}\b", code)]
    assert not unread, f"settings nobody reads: {unread}"


STACK = {
    settings.ENV_DATA_BUCKET: "stack-data",
    settings.ENV_COMM_BUCKET: "stack-comm",
    settings.ENV_CHANNEL_TABLE: "stack-channel",
    settings.ENV_CACHE_KIND: "memcached",
    settings.ENV_CACHE_HOST: "cache.internal",
    settings.ENV_CACHE_PORT: "11211",
    settings.ENV_CACHE_TLS: "false",
    settings.ENV_WORKER_FUNCTION: "stack-Worker",
    settings.ENV_TORCH_WORKER_FUNCTION: "",  # the template's value for a stack without the image
}


@pytest.fixture
def in_stack(monkeypatch: pytest.MonkeyPatch) -> settings.StackEnvironment:
    for name, value in STACK.items():
        monkeypatch.setenv(name, value)
    return settings.stack_environment()


def job(channel: dict[str, object], model: str = "lr", bucket: str = "stack-data") -> object:
    return parse_job({"dataset": "d", "storage": {"bucket": bucket}, "channel": channel, "model": {"name": model}})


def test_the_stack_environment_is_read(in_stack: settings.StackEnvironment) -> None:
    assert in_stack.in_a_stack and in_stack.cache_kind == "memcached" and in_stack.cache_port == 11211
    assert in_stack.torch_worker_function is None and not in_stack.cache_tls


@pytest.mark.parametrize(
    ("channel", "bucket", "refusal"),
    [
        ({"kind": "s3", "bucket": "stack-comm"}, "other-data", "keeps its data in 'stack-data', not 'other-data'"),
        ({"kind": "s3", "bucket": "other-comm"}, "stack-data", "S3 channel is bucket 'stack-comm'"),
        ({"kind": "dynamodb", "table": "other"}, "stack-data", "channel table is 'stack-channel'"),
        ({"kind": "redis"}, "stack-data", "the job's channel is redis, but this stack's cache is memcached"),
        ({"kind": "memory"}, "stack-data", "in-memory channel cannot connect Lambda workers"),
    ],
)
def test_a_job_that_is_not_the_stacks_is_refused_in_one_line(
    in_stack: settings.StackEnvironment, channel: dict[str, object], bucket: str, refusal: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(refusal)) as info:
        check_fits_stack(job(channel, bucket=bucket), in_stack)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_the_stacks_own_job_fits(in_stack: settings.StackEnvironment) -> None:
    for channel in (
        {"kind": "s3", "bucket": "stack-comm"},
        {"kind": "memcached"},
        {"kind": "dynamodb", "table": "stack-channel"},
    ):
        check_fits_stack(job(channel), in_stack)  # type: ignore[arg-type]


def test_torch_models_go_to_the_image_worker_or_are_refused_where_there_is_none(
    in_stack: settings.StackEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = {"kind": "s3", "bucket": "stack-comm"}
    assert worker_function(job(channel), in_stack) == "stack-Worker"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="TorchImageUri"):
        worker_function(job(channel, model="mlp"), in_stack)  # type: ignore[arg-type]
    monkeypatch.setenv(settings.ENV_TORCH_WORKER_FUNCTION, "stack-TorchWorker")
    with_image = settings.stack_environment()
    assert worker_function(job(channel, model="mlp"), with_image) == "stack-TorchWorker"  # type: ignore[arg-type]
    assert worker_function(job(channel, model="softmax"), with_image) == "stack-Worker"  # type: ignore[arg-type]
