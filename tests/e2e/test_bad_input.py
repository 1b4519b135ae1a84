"""Malformed job files and datasets, as a user feeds them to the ``lambdaml`` command.

Every case runs ``lambdaml.cli.main`` in-process and must end with a non-zero exit and exactly
one line on stderr that names the problem (the field, the file and line, or the S3 key).
numpy's RuntimeWarnings are errors here, since each would be one more line on a terminal.
A few cases run as real subprocesses, where a traceback or a warning would show verbatim.
"""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml import cli, codec, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.data import shards, synthetic
from lambdaml.data.sparse import CSRMatrix

pytestmark = pytest.mark.timeout(120)

DEAD_S3 = "http://127.0.0.1:1"  # nothing listens: a case that reached S3 would say "cannot reach s3"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        code = cli.main(argv)
    err = capsys.readouterr().err
    return code, err


def assert_one_line(code: int, err: str, fragments: tuple[str, ...]) -> str:
    lines = err.strip().splitlines()
    assert code != 0
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("error: ") and "Traceback" not in line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


# --- job files: lambdaml train JOB -------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(12)
)

# (file name, content, fragments the one line must contain)
JOB_FILES: list[tuple[str, str, tuple[str, ...]]] = [
    ("fraction.yaml", "dataset: d\nworkers: 1.5\n", ("fraction.yaml", "workers:", "integer")),
    ("epochs.yaml", "dataset: d\nalgorithm: {epochs: 1e100}\n", ("algorithm.epochs:",)),
    ("batch.yaml", "dataset: d\nalgorithm: {batch_size: 99999999999999999999}\n", ("algorithm.batch_size:",)),
    ("hidden.yaml", "dataset: d\nmodel: {hidden: [64, -1]}\n", ("model.hidden.1:", "greater than")),
    ("wide.yaml", "dataset: d\nmodel: {hidden: [100000000000]}\n", ("model.hidden.0:", "less than")),
    ("width.yaml", "dataset: d\nmodel: {width: .nan}\n", ("model.width:", "nan")),
    ("margin.yaml", "dataset: d\nruntime: {margin_s: .inf}\n", ("runtime.margin_s:",)),
    ("stale.yaml", "dataset: d\nsync: {protocol: ssp, staleness: -1}\n", ("sync.staleness:",)),
    ("chanlist.yaml", "dataset: d\nchannel: [s3]\n", ("channel:", "dictionary")),
    ("nodata.yaml", "workers: 2\n", ("nodata.yaml", "dataset:", "required")),
    ("twice.yaml", "dataset: a\nworkers: 2\ndataset: b\n", ("twice.yaml", "line 3", "duplicate key 'dataset'")),
    ("twice.json", '{"dataset": "a", "dataset": "b"}', ("twice.json", "duplicate key 'dataset'")),
    ("deep.json", '{"dataset": "d", "x": ' + "[" * 50_000 + "]" * 50_000 + "}", ("deep.json", "nested too deeply")),
    ("bigint.json", '{"dataset": "d", "workers": ' + "9" * 5000 + "}", ("bigint.json", "more than 4300 digits")),
    ("nan.json", '{"dataset": "d", "algorithm": {"lr": NaN}}', ("algorithm.lr:", "finite")),
    ("cut.json", '{"dataset": "d", "wor', ("cut.json", "not valid JSON", "line 1")),
    ("pyobj.yaml", "dataset: !!python/object/apply:os.system ['true']\n", ("pyobj.yaml", "line 1", "constructor")),
    ("bomb.yaml", BOMB + "dataset: d\nmodel: {hidden: *m}\n", ("model.hidden",)),
    ("binary.yaml", "\x00\x01\x02\x03", ("binary.yaml", "not valid YAML")),
    ("list.yaml", "- dataset: d\n", ("list.yaml", "a job must be a mapping", "list")),
    ("longname.yaml", f"dataset: {'x' * 5000}\n", ("dataset:", "invalid dataset name", "...")),
    ("longkey.json", f'{{"dataset": "d", "{"k" * 5000}": 1}}', ("unknown field", "...")),
    (
        "password.yaml",
        "dataset: d\nchannel: {kind: redis, password: hunter2-secret}\n",
        ("channel:", "'password'", "secret never goes in the job file"),
    ),
    (
        "authpw.yaml",
        "dataset: d\nchannel: {kind: redis, auth: {password: hunter2-secret}}\n",
        ("channel.auth:", "secret never goes"),
    ),
    (
        "authenv.yaml",
        "dataset: d\nchannel: {kind: redis, auth: {secret_env: 'hunter2 secret'}}\n",
        ("channel.auth.secret_env:",),
    ),
    (
        "authtwo.yaml",
        "dataset: d\nchannel: {kind: redis, auth: {secret_env: A, secret_id: b}}\n",
        ("channel.auth:", "exactly one"),
    ),
    (
        "s3auth.yaml",
        "dataset: d\nchannel: {kind: s3, bucket: abc, auth: {secret_env: A}}\n",
        ("channel:", "'auth' applies to redis and memcached"),
    ),
]


@pytest.mark.parametrize(("name", "text", "fragments"), JOB_FILES, ids=[c[0] for c in JOB_FILES])
def test_malformed_job_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, fragments: tuple[str, ...]
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    line = assert_one_line(*run_cli(["train", str(path)], capsys), fragments)
    assert "hunter2" not in line  # a secret typed into the file is never echoed back
    assert len(line) < 600


# --- dataset files: lambdaml data prepare -------------------------------------------------


def npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def cifar(data: Any, labels: Any) -> bytes:
    return pickle.dumps({b"data": data, b"labels": labels}, protocol=3)


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, ("true",))


# (file name, content, extra arguments, fragments); "{path}" in a fragment is the file's path
DATA_FILES: list[tuple[str, str | bytes, list[str], tuple[str, ...]]] = [
    ("cut.svm", "1 1:0.5 2:0.25\n-1 1:0.5 2:\n", [], ("{path}:2:", "'2:'", "index:value")),
    ("nocolon.svm", "1 1:1\n1 1:1\n-1 4\n", [], ("{path}:3:", "'4'")),
    ("nan.svm", "1 1:1\n0 2:nan\n", [], ("{path}:2:", "non-finite", "'nan'")),
    ("f32.svm", "1 1:1e39\n", [], ("{path}:1:", "float32")),
    ("bigindex.svm", "1 99999999999999999999:1\n", [], ("{path}:1:", "too large")),
    ("zero.svm", "1 0:1\n", [], ("{path}:1:", "below 1")),
    ("empty.svm", "", [], ("{path}", "no data rows")),
    ("latin1.svm", b"1 1:0.5 \xff\n", [], ("{path}:1", "byte 0xff is not UTF-8 text")),
    ("narrow.svm", "1 5:1\n", ["--n-features", "3"], ("{path}", "exceeds n_features=3")),
    ("label.svm", "yes 1:1\n", [], ("{path}:1:", "label 'yes'")),
    ("ragged.csv", "1,2,3\n0,2\n", [], ("{path}:2:", "2 columns, expected 3")),
    ("nan.csv", "1,2\n0,nan\n", [], ("{path}:2:", "NaN")),
    ("f32.csv", "1,1e39\n", [], ("{path}:1:", "float32")),
    ("semicolon.csv", "1;2\n", [], ("{path}", "line 1", "header", "comma-separated")),
    ("header.csv", "label,x\n", [], ("{path}", "no data rows")),
    ("onecolumn.csv", "1\n0\n", [], ("{path}", "a label and at least one feature")),
    ("flat.npz", npz(X=np.ones(3), y=np.ones(3)), [], ("{path}", "do not match")),
    ("cut.npz", npz(X=np.ones((3, 2)), y=np.ones(3))[:150], [], ("{path}", "cannot read")),
    ("huge.npz", npz(X=np.full((2, 2), 1e300), y=np.ones(2)), [], ("{path}", "float32")),
    ("norows.npz", npz(X=np.ones((0, 2)), y=np.ones(0)), [], ("{path}", "no data rows")),
    ("objects.npz", npz(X=np.array([[1, None]], dtype=object), y=np.ones(1)), [], ("{path}", "pickle")),
    ("pixels", cifar(np.zeros((2, 100), np.uint8), [0, 1]), ["--format", "cifar10"], ("{path}", "3072 pixels")),
    (
        "evil",
        pickle.dumps({b"data": _Evil(), b"labels": [0]}),
        ["--format", "cifar10"],
        ("{path}", "refusing to load global"),
    ),
    (
        "cutbatch",
        cifar(np.zeros((2, 3072), np.uint8), [0, 1])[:500],
        ["--format", "cifar10"],
        ("{path}", "not a CIFAR-10"),
    ),
    ("absent.svm", None, [], ("{path}", "not found")),  # type: ignore[list-item]
    ("fraction.svm", "1 1:1\n0 1:2\n", ["--test-fraction", "nan"], ("--test-fraction",)),
    ("shards.svm", "1 1:1\n0 1:2\n", ["--shards", "5"], ("training rows cannot fill 5 shards",)),
    ("width.svm", "1 1:1\n", ["--n-features", "3000000000"], ("--n-features",)),
]


@pytest.mark.parametrize(("name", "content", "extra", "fragments"), DATA_FILES, ids=[c[0] for c in DATA_FILES])
def test_malformed_dataset_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    content: str | bytes | None,
    extra: list[str],
    fragments: tuple[str, ...],
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    argv = ["data", "prepare", "bad", "--input", str(path), "--shards", "1", *extra, "--endpoint-url", DEAD_S3]
    if "--shards" in extra:
        argv.remove("1")
        argv.remove("--shards")
    assert_one_line(*run_cli(argv, capsys), tuple(f.replace("{path}", str(path)) for f in fragments))


def test_bad_dataset_name_fails_before_loading_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["data", "prepare", "bad name", "--input", str(tmp_path / "absent.svm"), "--shards", "1"]
    assert_one_line(*run_cli(argv, capsys), ("invalid dataset name 'bad name'",))


# --- datasets in S3: lambdaml train on a damaged dataset -------------------------------------


def _manifest_key(store: Channel, name: str) -> str:
    return keys.dataset_manifest(name, str(shards.current_version(store, name)))


def _shard_key(store: Channel, name: str) -> str:
    return keys.dataset_shard(name, str(shards.current_version(store, name)), 0)


def _set_manifest(store: Channel, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = dict(json.loads(store.get(_manifest_key(store, name))))
    change(manifest)
    store.put(_manifest_key(store, name), json.dumps(manifest).encode())


def _set_shard(store: Channel, name: str, change: Callable[[bytes], bytes], *, vouch: bool = True) -> None:
    """Damage shard 0; ``vouch``: and its manifest's size and hash with it (a forger with the whole
    dataset's rights), so the decoder is what must refuse it."""
    key = _shard_key(store, name)
    damaged = change(store.get(key))
    store.put(key, damaged)
    if vouch:
        _set_manifest(
            store, name, lambda m: m.update(shard_bytes=[len(damaged)], shard_hashes=[shards.content_hash(damaged)])
        )


def _nan_shard(raw: bytes) -> bytes:
    bundle = {k: np.array(v) for k, v in codec.decode_bundle(raw).items()}
    bundle["X"][1, 2] = np.nan
    return codec.encode_bundle(bundle)


def _csr_out_of_range(raw: bytes) -> bytes:
    bundle = {k: np.array(v) for k, v in codec.decode_bundle(raw).items()}
    bundle["indices"][0] = 10_000
    return codec.encode_bundle(bundle)


# (dataset name, sparse?, damage, fragments): every dataset starts as a good one-shard copy
STORED: list[tuple[str, bool, Callable[[Channel, str], None], tuple[str, ...]]] = [
    (
        "s-notjson",
        False,
        lambda s, n: s.put(_manifest_key(s, n), b"{not json"),
        ("manifest.json", "not valid JSON"),
    ),
    (
        "s-types",
        False,
        lambda s, n: _set_manifest(s, n, lambda m: m.update(n_features="28")),
        ("manifest.json", "n_features is '28'"),
    ),
    (
        "s-missing",
        False,
        lambda s, n: _set_manifest(s, n, lambda m: m.pop("shard_rows")),
        ("manifest.json", "shard_rows"),
    ),
    (
        "s-emptyshard",
        False,
        lambda s, n: _set_manifest(s, n, lambda m: m.update(shard_rows=[0])),
        ("manifest.json", "shard 0 is empty"),
    ),
    (
        "s-other",
        False,
        lambda s, n: _set_manifest(s, n, lambda m: m.update(name="elsewhere")),
        ("manifest.json", "names dataset 'elsewhere'"),
    ),
    ("s-zerobytes", False, lambda s, n: _set_shard(s, n, lambda raw: b""), ("shards/00000", "truncated")),
    ("s-half", False, lambda s, n: _set_shard(s, n, lambda raw: raw[: len(raw) // 2]), ("shards/00000", "truncated")),
    (
        "s-width",
        False,
        lambda s, n: _set_manifest(s, n, lambda m: m.update(n_features=5)),
        ("shards/00000", "expected float32", ", 5)"),
    ),
    ("s-gone", False, lambda s, n: s.delete([_shard_key(s, n)]), ("s-gone", "missing", "shards/00000")),
    (
        "s-mixed",
        False,
        lambda s, n: _set_shard(s, n, lambda raw: raw[:-8] + bytes(8), vouch=False),
        ("shards/00000", "not the shard its manifest describes"),
    ),
    ("s-nan", False, lambda s, n: _set_shard(s, n, _nan_shard), ("shards/00000", "NaN or infinite")),
    ("s-csr", True, lambda s, n: _set_shard(s, n, _csr_out_of_range), ("shards/00000", "column index")),
]


@pytest.fixture(scope="module")
def stored(data_store: tuple[StorageSpec, Channel]) -> tuple[StorageSpec, Channel]:
    spec, store = data_store
    X, y, _ = synthetic.higgs_like(60, seed=1)
    for name, sparse, damage, _ in STORED:
        shards.prepare(store, name, CSRMatrix.from_dense(X) if sparse else X, y, shards=1, test_fraction=0)
        damage(store, name)
    return spec, store


@pytest.mark.parametrize(("name", "fragments"), [(c[0], c[3]) for c in STORED], ids=[c[0] for c in STORED])
def test_damaged_dataset_in_s3(
    stored: tuple[StorageSpec, Channel],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    fragments: tuple[str, ...],
) -> None:
    storage, _ = stored
    job = {
        "workers": 1,
        "dataset": name,
        "storage": storage.model_dump(),
        "channel": {"kind": "memory"},
        "algorithm": {"epochs": 1, "batch_size": 20},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert_one_line(*run_cli(["train", str(path), "--results-dir", str(tmp_path)], capsys), fragments)


# --- the same through a real process: nothing else reaches the terminal --------------------


def lambdaml(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_as_a_process_float32_overflow_and_a_hostile_yaml_tag(tmp_path: Path) -> None:
    data = tmp_path / "big.csv"
    data.write_text("1,2\n0,1e39\n")
    result = lambdaml(
        "data", "prepare", "big", "--input", str(data), "--shards", "1", "--endpoint-url", DEAD_S3, cwd=tmp_path
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert f"{data}:2:" in result.stderr and "float32" in result.stderr

    marker = tmp_path / "pwned"
    job = tmp_path / "job.yaml"
    job.write_text(f"dataset: !!python/object/apply:os.system ['touch {marker}']\n")
    result = lambdaml("train", str(job), cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "not valid YAML" in result.stderr and not marker.exists()


# Messages hold what the user wrote (keys, bucket names, URLs) and what servers said; rich used to
# read them as markup: "[/x]" crashed its parser with a traceback, "[blink]HELLO" printed HELLO.
HOSTILE_JOBS: list[tuple[str, str, tuple[str, ...]]] = [
    ("closing.yaml", 'dataset: d\n"[/x]": 1\n', ("[/x]", "unknown field")),
    ("blink.yaml", 'dataset: d\n"[blink]HELLO": 1\n', ("[blink]HELLO", "unknown field")),
    ("emoji.yaml", 'dataset: d\n":x: [bold]": 1\n', (":x: [bold]",)),
    ("bucket.yaml", f"dataset: d\nstorage: {{bucket: '../../etc', endpoint_url: '{DEAD_S3}'}}\n", ("../../etc",)),
    (
        "storage_file.yaml",
        "dataset: d\nstorage: {endpoint_url: 'file:///etc/passwd'}\n",
        (
            "storage.endpoint_url: endpoint must be an http(s) URL like http://127.0.0.1:5000 (got 'file:///etc/passwd')",
        ),
    ),
    (
        "channel_file.yaml",
        "dataset: d\nchannel: {kind: s3, bucket: comm, endpoint_url: 'file:///etc/passwd'}\n",
        ("channel.endpoint_url: endpoint must be an http(s) URL", "'file:///etc/passwd'"),
    ),
    (
        "auth_file.yaml",
        "dataset: d\nchannel: {kind: redis, auth: {secret_env: PW, endpoint_url: 'file:///etc/passwd'}}\n",
        ("channel.auth.endpoint_url: endpoint must be an http(s) URL",),
    ),
    (
        "dynamodb_ftp.yaml",
        "dataset: d\nchannel: {kind: dynamodb, table: comm, endpoint_url: 'ftp://127.0.0.1'}\n",
        ("channel.endpoint_url:", "'ftp://127.0.0.1'"),
    ),
]


@pytest.mark.parametrize(("name", "text", "fragments"), HOSTILE_JOBS, ids=[c[0] for c in HOSTILE_JOBS])
def test_as_a_process_messages_are_printed_literally(
    tmp_path: Path, name: str, text: str, fragments: tuple[str, ...]
) -> None:
    job = tmp_path / name
    job.write_text(text)
    result = lambdaml("train", str(job), "--results-dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "prepare", "d", "--synthetic", "higgs", "--rows", "100", "--shards", "1"],
        ["calibrate", "--channels", "s3", "--quick"],
        ["iaas", "launch", "JOB", "--name", "c"],
    ],
    ids=["data-prepare", "calibrate", "iaas-launch"],
)
def test_as_a_process_an_endpoint_option_that_is_not_http_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("dataset: d\n")
    argv = [str(job) if a == "JOB" else a for a in argv]
    result = lambdaml(*argv, "--endpoint-url", "file:///etc/passwd", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == (
        "error: --endpoint-url: endpoint must be an http(s) URL like http://127.0.0.1:5000 (got 'file:///etc/passwd')\n"
    )


def test_as_a_process_a_bucket_aws_refuses_is_one_literal_line(tmp_path: Path) -> None:
    # Refused by S3's naming rules before any client is built (botocore's own message spans lines
    # and quotes a regex holding "[/:]", once read as a rich closing tag).
    result = lambdaml(
        "data", "prepare", "d", "--synthetic", "higgs", "--rows", "100", "--shards", "1",
        "--bucket", "../../etc", "--endpoint-url", DEAD_S3, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "--bucket: '../../etc' is not an S3 bucket name" in lines[0]
