"""Job files: load YAML and JSON, and reject every mistake with one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lambdaml.config import JobSpec, load_job, parse_job
from lambdaml.errors import ConfigError

VALID_YAML = """\
# a comment
name: higgs-lr_2
workers: 8
dataset: higgs.v1
storage:
  bucket: my-data
  endpoint_url: http://127.0.0.1:5000
channel:
  kind: redis
  host: 10.0.0.5
  port: 6380
model:
  name: lr
  l2: 0.001
algorithm:
  name: ga_sgd
  lr: 0.5
  batch_size: 64
  epochs: 3
  seed: 7
  shuffle: false
sync:
  protocol: bsp
  pattern: allreduce
  timeout_s: 30
"""

EXAMPLE = Path(__file__).resolve().parents[2] / "lambdaml" / "examples" / "higgs-lr.yaml"


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(data: Any) -> str:
    """The single-line message parse_job gives for ``data``."""
    with pytest.raises(ConfigError) as info:
        parse_job(data, "job.yaml")
    message = str(info.value)
    assert "\n" not in message, message
    return message


def yaml_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_job(write(tmp_path, text))
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --- valid files ------------------------------------------------------------------


def test_valid_yaml_loads_every_field(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, VALID_YAML))
    assert isinstance(job, JobSpec)
    assert job.name == "higgs-lr_2"
    assert job.workers == 8
    assert job.dataset == "higgs.v1"
    assert job.storage.bucket == "my-data"
    assert job.storage.endpoint_url == "http://127.0.0.1:5000"
    assert job.channel.kind == "redis" and job.channel.host == "10.0.0.5" and job.channel.port == 6380
    assert job.model.name == "lr" and job.model.l2 == pytest.approx(0.001)
    assert job.algorithm.name == "ga_sgd"
    assert job.algorithm.lr == 0.5
    assert (job.algorithm.batch_size, job.algorithm.epochs, job.algorithm.seed) == (64, 3, 7)
    assert job.algorithm.shuffle is False
    assert job.sync.pattern == "allreduce" and job.sync.timeout_s == 30.0


def test_valid_json_loads_and_defaults_fill_the_rest(tmp_path: Path) -> None:
    data = {"dataset": "higgs", "workers": 2, "algorithm": {"lr": 0.01}}
    job = load_job(write(tmp_path, json.dumps(data), "job.json"))
    assert job.workers == 2
    assert job.algorithm.lr == 0.01
    assert job.algorithm.name == "ga_sgd"
    assert job.channel.kind == "s3" and job.channel.bucket == "lambdaml-comm"
    assert job.name == "job"


def test_yml_suffix_and_shipped_example_load(tmp_path: Path) -> None:
    assert load_job(write(tmp_path, VALID_YAML, "job.yml")).workers == 8
    example = load_job(EXAMPLE)
    assert example.name == "higgs-lr" and example.workers == 4 and example.channel.kind == "s3"


def test_to_json_round_trips() -> None:
    job = parse_job({"dataset": "d", "workers": 3, "channel": {"kind": "dynamodb", "table": "comm-table"}})
    again = parse_job(json.loads(job.to_json()))
    assert again == job


def test_spec_is_frozen() -> None:
    job = parse_job({"dataset": "d"})
    with pytest.raises(ValidationError):
        job.workers = 9  # type: ignore[misc]
    assert job.workers == 4


# --- rejected files ---------------------------------------------------------------


def test_unknown_nested_key_names_the_path(tmp_path: Path) -> None:
    message = yaml_error(tmp_path, "dataset: d\nalgorithm: {lrr: 0.1}\n")
    assert "algorithm.lrr" in message
    assert "unknown field" in message
    assert str(tmp_path / "job.yaml") in message


def test_unknown_top_level_key() -> None:
    message = config_error({"dataset": "d", "wokers": 4})
    assert "wokers: unknown field" in message


def test_several_errors_are_reported_together_on_one_line() -> None:
    message = config_error({"dataset": "d", "workers": 0, "algorithm": {"lr": -1, "typo": 1}})
    assert "workers" in message and "algorithm.lr" in message and "algorithm.typo" in message


def test_wrong_type_names_the_field(tmp_path: Path) -> None:
    message = yaml_error(tmp_path, 'dataset: d\nworkers: "four"\n')
    assert "workers" in message
    assert "'four'" in message  # what was given


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("workers: 0", "workers"),
        ("workers: 1025", "workers"),
        ("algorithm: {lr: -1}", "algorithm.lr"),
        ("algorithm: {lr: 0}", "algorithm.lr"),
        ("algorithm: {lr: .nan}", "algorithm.lr"),
        ("algorithm: {lr: .inf}", "algorithm.lr"),
        ("algorithm: {batch_size: 0}", "algorithm.batch_size"),
        ("algorithm: {epochs: 0}", "algorithm.epochs"),
        ("algorithm: {seed: -1}", "algorithm.seed"),
        ("model: {l2: -0.5}", "model.l2"),
        ("model: {l2: .nan}", "model.l2"),
        ("sync: {timeout_s: 0}", "sync.timeout_s"),
        ("sync: {timeout_s: .inf}", "sync.timeout_s"),
        ("channel: {kind: redis, port: 70000}", "channel.port"),
        ("storage: {bucket: ab}", "storage.bucket"),
    ],
)
def test_out_of_range_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    message = yaml_error(tmp_path, f"dataset: d\n{text}\n")
    assert f"{field}:" in message


def test_unknown_algorithm_lists_known_ones() -> None:
    message = config_error({"dataset": "d", "algorithm": {"name": "foo"}})
    assert "algorithm.name" in message
    assert "unknown algorithm 'foo'" in message
    assert "ga_sgd" in message


def test_unknown_pattern_lists_known_ones() -> None:
    message = config_error({"dataset": "d", "sync": {"pattern": "gossip"}})
    assert "sync.pattern" in message
    assert "'gossip'" in message and "allreduce" in message


def test_unknown_model_lists_known_ones() -> None:
    message = config_error({"dataset": "d", "model": {"name": "resnet"}})
    assert "model.name" in message and "unknown model 'resnet'" in message and "lr" in message


def test_unknown_protocol_and_channel_kind() -> None:
    assert "sync.protocol" in config_error({"dataset": "d", "sync": {"protocol": "asp2"}})
    message = config_error({"dataset": "d", "channel": {"kind": "ftp"}})
    assert "channel.kind" in message and "'ftp'" in message


def test_s3_channel_needs_a_bucket() -> None:
    message = config_error({"dataset": "d", "channel": {"kind": "s3"}})
    assert "channel" in message and "needs 'bucket'" in message


def test_dynamodb_channel_needs_a_table() -> None:
    message = config_error({"dataset": "d", "channel": {"kind": "dynamodb"}})
    assert "needs 'table'" in message
    job = parse_job({"dataset": "d", "channel": {"kind": "dynamodb", "table": "comm"}})
    assert job.channel.table == "comm"


def test_missing_dataset() -> None:
    message = config_error({"workers": 2})
    assert "dataset" in message and "required" in message.lower()


@pytest.mark.parametrize(("field", "value"), [("dataset", "has space"), ("dataset", "a/b"), ("name", "-x")])
def test_invalid_names_are_rejected(field: str, value: str) -> None:
    data = {"dataset": "d", field: value}
    message = config_error(data)
    assert f"{field}:" in message and repr(value) in message


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    message = yaml_error(tmp_path, "dataset: d\nworkers: 4\nalgorithm:\n  lr: [0.1\n  epochs: 2\n")
    assert "not valid YAML" in message
    assert "line " in message
    line = int(message.split("line ", 1)[1].split(":", 1)[0])
    assert 4 <= line <= 6


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not valid JSON \(line 3") as info:
        load_job(write(tmp_path, '{\n"dataset": "d",\n"workers": ,\n}', "job.json"))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["- dataset: d\n- workers: 2\n", "just a string\n", "42\n", ""])
def test_non_mapping_document_is_rejected(tmp_path: Path, text: str) -> None:
    message = yaml_error(tmp_path, text)
    assert "a job must be a mapping" in message


def test_top_level_list_names_its_type() -> None:
    assert "got list" in config_error([{"dataset": "d"}])


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_job(path)
    assert str(path) in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read job file") as info:
        load_job(tmp_path)
    assert "\n" not in str(info.value)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"dataset: \xff\xfe\n")
    with pytest.raises(ConfigError, match="cannot read job file"):
        load_job(path)


def test_multiline_string_value_is_reported_on_one_line() -> None:
    message = config_error({"dataset": "d", "workers": "four\nfive"})
    assert "workers" in message


def test_unknown_key_with_newline_is_reported_on_one_line() -> None:
    config_error({"dataset": "d", "a\nb": 1})


def test_name_with_trailing_newline_is_rejected() -> None:
    config_error({"dataset": "d", "name": "job\n"})


def test_strings_and_booleans_are_not_counts() -> None:
    for value in ("4", True):
        with pytest.raises(ConfigError, match="workers"):
            parse_job({"dataset": "d", "workers": value})


def test_non_finite_learning_rate_says_so() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.lr: must be a finite number"):
        parse_job({"dataset": "d", "algorithm": {"lr": float("nan")}})
