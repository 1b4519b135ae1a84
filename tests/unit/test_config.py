"""Job files: load YAML and JSON, and reject every mistake with one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lambdaml.config import (
    JobSpec,
    StorageSpec,
    check_endpoint_url,
    load_job,
    parse_job,
    read_job_file,
)
from lambdaml.config.job_file import _StrictLoader
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


# --- numbers as people write them (YAML 1.2 core-schema floats) ----------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-3", 1e-3), ("3E-4", 3e-4), ("1e5", 1e5), ("-2.5e+3", -2.5e3), ("2.5e3", 2.5e3), ("-.5", -0.5)],
)
def test_exponent_floats_load_as_floats(tmp_path: Path, text: str, value: float) -> None:
    data = read_job_file(write(tmp_path, f"dataset: d\nmodel: {{l2: {text}}}\n"))
    assert data["model"]["l2"] == value and type(data["model"]["l2"]) is float
    assert yaml.load(f"x: {text}", Loader=_StrictLoader) == {"x": value}


@pytest.mark.parametrize(("text", "value"), [("1e-3", 1e-3), ("3E-4", 3e-4), ("1e2", 100.0)])
def test_a_learning_rate_in_exponent_form_is_a_float(tmp_path: Path, text: str, value: float) -> None:
    job = load_job(write(tmp_path, f"dataset: d\nalgorithm: {{lr: {text}}}\nmodel: {{l2: 1e5}}\n"))
    assert job.algorithm.lr == value and isinstance(job.algorithm.lr, float)
    assert job.model.l2 == 100_000.0 and isinstance(job.model.l2, float)


def test_an_exponent_float_is_still_no_count(tmp_path: Path) -> None:
    # 1e2 is the float 100.0; strict mode keeps an int field an int, as it refused the string before.
    message = yaml_error(tmp_path, "dataset: d\nalgorithm: {epochs: 1e2}\n")
    assert "algorithm.epochs: Input should be a valid integer (got 100.0)" in message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("'1e-3'", "1e-3"),  # quoted: a string, as always
        ("09", "09"),  # no dot, no exponent: not a new float, a string as before
        ("1_0e3", "1_0e3"),  # YAML 1.2 has no underscores in numbers
        ("1e", "1e"),
        ("e5", "e5"),
        ("1_000", 1000),  # PyYAML's YAML 1.1 int, as before: kept, so files that load today still do
        ("10", 10),
        ("0.5", 0.5),
    ],
)
def test_nothing_else_about_parsing_changes(text: str, value: object) -> None:
    loaded = yaml.load(f"x: {text}", Loader=_StrictLoader)["x"]
    assert loaded == value and type(loaded) is type(value)


def test_non_finite_floats_keep_their_meaning(tmp_path: Path) -> None:
    assert "algorithm.lr: must be a finite number" in yaml_error(tmp_path, "dataset: d\nalgorithm: {lr: .inf}\n")
    assert "algorithm.lr:" in yaml_error(tmp_path, "dataset: d\nalgorithm: {lr: -.inf}\n")


def test_the_float_resolver_is_the_job_loaders_own() -> None:
    assert yaml.safe_load("a: 1e-3") == {"a": "1e-3"}  # PyYAML's SafeLoader is unchanged
    assert yaml.load("a: 1e-3", Loader=yaml.SafeLoader) == {"a": "1e-3"}
    assert _StrictLoader.yaml_implicit_resolvers is not yaml.SafeLoader.yaml_implicit_resolvers
    for first, resolvers in _StrictLoader.yaml_implicit_resolvers.items():
        assert resolvers is not yaml.SafeLoader.yaml_implicit_resolvers.get(first)


def test_json_numbers_are_unaffected(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, '{"dataset": "d", "algorithm": {"lr": 1e-3, "epochs": 3}}', "job.json"))
    assert job.algorithm.lr == 1e-3 and job.algorithm.epochs == 3
    assert "algorithm.epochs:" in config_error(json.loads('{"dataset": "d", "algorithm": {"epochs": 1e2}}'))


# --- endpoints: http(s) only, one line ------------------------------------------------

BAD_ENDPOINTS = [
    "file:///etc/passwd",
    "ftp://127.0.0.1:21",
    "127.0.0.1:5000",  # no scheme
    "http://",  # no host
    "http:///bucket",
    "http://127.0.0.1 :5000",  # whitespace
    " http://127.0.0.1:5000",
    "http://127.0.0.1:5000\n",
    "http://127.0.0.1:99999",  # no such port
    "http://[::1",
    "http://127.0.0.1:5000/?x=1",
    "",
]


def _with_endpoint(where: str, url: str) -> dict[str, Any]:
    if where == "storage":
        return {"dataset": "d", "storage": {"endpoint_url": url}}
    if where == "channel":
        return {"dataset": "d", "channel": {"kind": "s3", "bucket": "comm", "endpoint_url": url}}
    return {"dataset": "d", "channel": {"kind": "redis", "auth": {"secret_env": "PW", "endpoint_url": url}}}


@pytest.mark.parametrize("url", BAD_ENDPOINTS)
@pytest.mark.parametrize("where", ["storage", "channel", "channel.auth"])
def test_an_endpoint_that_is_not_http_is_one_line(where: str, url: str) -> None:
    message = config_error(_with_endpoint(where, url))
    assert f"{where}.endpoint_url: endpoint must be an http(s) URL like http://127.0.0.1:5000" in message
    if where != "channel.auth":  # under auth nothing given is echoed
        shown = url.split("?")[0].split("#")[0] + " (query left out)" if "?" in url or "#" in url else url
        assert message.endswith(f"(got {shown!r})")  # a query may hold a token: never echoed
        assert "x=1" not in message


def test_the_endpoint_message_in_full() -> None:
    assert config_error(_with_endpoint("storage", "file:///etc/passwd")) == (
        "job.yaml: storage.endpoint_url: endpoint must be an http(s) URL like http://127.0.0.1:5000 "
        "(got 'file:///etc/passwd')"
    )


@pytest.mark.parametrize("where", ["storage", "channel", "channel.auth"])
def test_credentials_in_an_endpoint_are_refused_without_echoing_them(where: str) -> None:
    message = config_error(_with_endpoint(where, "http://admin:hunter2@127.0.0.1:5000"))
    assert f"{where}: endpoint_url: an endpoint URL never carries credentials" in message
    assert "hunter2" not in message


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:5000", "https://s3.us-east-1.amazonaws.com", "http://localhost:4566/", "http://[::1]:5000"],
)
def test_good_endpoints_pass_unchanged(url: str) -> None:
    for where in ("storage", "channel", "channel.auth"):
        job = parse_job(_with_endpoint(where, url))
        spec = {"storage": job.storage, "channel": job.channel, "channel.auth": job.channel.auth}[where]
        assert spec is not None and spec.endpoint_url == url


def test_an_endpoint_option_is_checked_to_one_line() -> None:
    assert check_endpoint_url(None, "--endpoint-url") is None
    assert check_endpoint_url("http://127.0.0.1:5000", "--endpoint-url") == "http://127.0.0.1:5000"
    with pytest.raises(ConfigError, match=r"^--endpoint-url: endpoint must be an http\(s\) URL .*'file:///etc/passwd'"):
        check_endpoint_url("file:///etc/passwd", "--endpoint-url")
    with pytest.raises(ConfigError, match="never carries credentials") as info:
        check_endpoint_url("http://a:hunter2@h", "--endpoint-url")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("url", ["http://moto_server:5000", "http://-x.example", "http://a..b", "http://[zz]:1"])
def test_a_host_botocore_refuses_is_refused_here(url: str) -> None:
    assert "storage.endpoint_url: endpoint must be an http(s) URL" in config_error(_with_endpoint("storage", url))


@settings(max_examples=80, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "file", "ftp", ""]),
    host=st.one_of(
        st.from_regex(r"\A[a-z0-9][a-z0-9.-]{0,12}\Z"),  # mostly plausible, with "-" and "." in odd places
        st.sampled_from(["127.0.0.1", "[::1]", "[fe80::1%25eth0]", "localhost", "a_b", "[zz]", "user:pw@h"]),
        st.text(alphabet="ab1.-_[]:@ %", max_size=12),
    ),
    port=st.one_of(st.none(), st.integers(-1, 70000), st.text(alphabet="0a", max_size=3)),
    path=st.text(alphabet="/a?#@ ", max_size=4),
)
def test_every_endpoint_accepted_is_one_botocore_takes(scheme: str, host: str, port: object, path: str) -> None:
    from lambdaml import aws

    url = f"{scheme}://{host}{'' if port is None else f':{port}'}{path}"
    try:
        spec = StorageSpec(endpoint_url=url)
    except ValidationError:
        return  # refused in one line
    assert spec.endpoint_url == url
    aws.client("s3", endpoint_url=url)  # botocore raises ValueError on an endpoint it cannot use
