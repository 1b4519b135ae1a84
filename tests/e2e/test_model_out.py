"""From a user's own files to a model they can use, through the command line as a user types it.

scikit-learn's breast-cancer and digits sets are written as LIBSVM train and test files (a
seeded 75/25 split, standardized on the train split), the way the LIBSVM collection ships
``a9a`` and ``a9a.t``. Then ``data prepare --test``, ``train`` with 4 workers, and ``evaluate``,
``predict`` and ``export``: evaluate's accuracy is within 2 points of scikit-learn's own
LogisticRegression on the same files, and predict's labels equal ``load_model().predict``,
``to_sklearn().predict`` and onnxruntime's, row for row.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from lambdaml.config import StorageSpec
from lambdaml.storage import open_storage
from lambdaml.trained import load_model
from tests.helpers import Services, unique_name

sklearn_datasets = pytest.importorskip("sklearn.datasets")
ort = pytest.importorskip("onnxruntime")
WORKERS = 4


def lambdaml(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lambdaml", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def ok(*args: str) -> str:
    done = lambdaml(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def write_split(folder: Path, name: str, X: np.ndarray, y: np.ndarray) -> tuple[Path, Path]:
    """A seeded 75/25 split as LIBSVM train and test files, standardized on the train rows."""
    from sklearn.datasets import dump_svmlight_file
    from sklearn.model_selection import train_test_split

    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    mean, std = X_train.mean(axis=0), X_train.std(axis=0)
    std[std == 0] = 1.0
    train, test = folder / f"{name}.train", folder / f"{name}.t"
    dump_svmlight_file((X_train - mean) / std, y_train, str(train), zero_based=False)
    dump_svmlight_file((X_test - mean) / std, y_test, str(test), zero_based=False)
    return train, test


def read_libsvm(path: Path, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=n_features)
    return np.asarray(X.toarray(), dtype=np.float32), y


def job_file(
    folder: Path, storage: StorageSpec, services: Services, dataset: str, model: dict[str, Any], **algo: Any
) -> Path:
    job = {
        "name": dataset,
        "workers": WORKERS,
        "dataset": dataset,
        "storage": storage.model_dump(),
        "channel": {"kind": "redis", "port": services.redis_port},
        "model": model,
        "algorithm": {"seed": 1, **algo},
        "sync": {"timeout_s": 60},
    }
    path = folder / f"{dataset}-{model['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def storage_flags(storage: StorageSpec) -> list[str]:
    return ["--bucket", storage.bucket, "--endpoint-url", str(storage.endpoint_url)]


def train(job: Path) -> str:
    out = json.loads(ok("train", str(job), "--json", "--results-dir", str(job.parent / "results")))
    return str(out["job_id"])


def predictions(path: Path) -> np.ndarray:
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    return np.array([float(row["prediction"]) for row in rows])


@pytest.fixture(scope="module")
def storage(services: Services) -> StorageSpec:
    spec = StorageSpec(bucket=unique_name("data"), endpoint_url=services.moto_url)
    open_storage(spec).ensure()
    return spec


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-out")


def prepared(folder: Path, storage: StorageSpec, name: str, X: np.ndarray, y: np.ndarray) -> tuple[Path, Path]:
    train_file, test_file = write_split(folder, name, X, y)
    ok("data", "prepare", name, "--input", str(train_file), "--test", str(test_file), "--shards", str(WORKERS),
       *storage_flags(storage))  # fmt: skip
    return train_file, test_file


def check_model_out(
    folder: Path, storage: StorageSpec, job_id: str, test_file: Path, n_features: int, *, reference: float | None
) -> dict[str, Any]:
    """evaluate, predict and export agree with each other, with scikit-learn and with onnxruntime."""
    report = json.loads(ok("evaluate", job_id, "--test", str(test_file), "--json", *storage_flags(storage)))
    X_test, y_test = read_libsvm(test_file, n_features)
    assert report["rows"] == len(y_test)
    if reference is not None:
        assert report["accuracy"] >= reference - 0.02, (report["accuracy"], reference)

    out = folder / f"{job_id}.csv"
    ok("predict", job_id, "--input", str(test_file), "--output", str(out), *storage_flags(storage))
    predicted = predictions(out)
    model = load_model(job_id, storage=storage)
    assert np.array_equal(predicted, model.predict(X_test))
    assert np.array_equal(predicted, model.to_sklearn().predict(X_test.astype(np.float64)))
    onnx_path = folder / f"{job_id}.onnx"
    ok("export", job_id, "--format", "onnx", "--out", str(onnx_path), *storage_flags(storage))
    labels = ort.InferenceSession(str(onnx_path)).run(["label"], {"X": X_test})[0]
    assert np.array_equal(predicted, labels)
    if model.supervised:
        assert report["accuracy"] == pytest.approx(np.mean(predicted == y_test))
    return report


@pytest.fixture(scope="module")
def breast_cancer(folder: Path, storage: StorageSpec, services: Services) -> tuple[str, Path, float]:
    """The breast-cancer LR job: its id, its test file, and scikit-learn's accuracy on the same files."""
    from sklearn.linear_model import LogisticRegression

    data = sklearn_datasets.load_breast_cancer()
    train_file, test_file = prepared(folder, storage, "breast-cancer", data.data, np.where(data.target > 0, 1, -1))
    X_train, y_train = read_libsvm(train_file, 30)
    X_test, y_test = read_libsvm(test_file, 30)
    reference = LogisticRegression(max_iter=1000).fit(X_train, y_train).score(X_test, y_test)
    job_id = train(job_file(folder, storage, services, "breast-cancer", {"name": "lr", "l2": 1e-3},
                            lr=0.5, batch_size=16, epochs=10))  # fmt: skip
    return job_id, test_file, reference


def test_breast_cancer_lr_from_libsvm_files(
    folder: Path, storage: StorageSpec, breast_cancer: tuple[str, Path, float]
) -> None:
    job_id, test_file, reference = breast_cancer
    report = check_model_out(folder, storage, job_id, test_file, 30, reference=reference)
    X_test, y_test = read_libsvm(test_file, 30)
    assert report["classes"] == [-1, 1]
    assert 0.9 <= report["roc_auc"] <= 1.0
    assert sum(map(sum, report["confusion"])) == len(y_test)
    model = load_model(job_id, storage=storage)
    proba = model.predict_proba(X_test)
    assert np.abs(model.to_sklearn().predict_proba(X_test.astype(np.float64)) - proba).max() < 1e-9
    # The dataset's own test split (the same file, prepared) scores the same
    again = json.loads(ok("evaluate", job_id, "--test", "breast-cancer", "--json", *storage_flags(storage)))
    assert again["accuracy"] == report["accuracy"] and again["rows"] == report["rows"]


def copy_job(
    store: Any, job_id: str, new_id: str, *, bundle: bytes | None = None, card: dict[str, Any] | None = None
) -> None:
    """A succeeded job's records and model under another id, the bundle or card replaced if given."""
    from lambdaml import keys

    for key in (keys.job_status(job_id), keys.job_result(job_id), keys.job_model_card(job_id), keys.job_model(job_id)):
        store.put(key.replace(job_id, new_id), store.get(key))
    if bundle is not None:
        store.put(keys.job_model(new_id), bundle)
    card = {**json.loads(store.get(keys.job_model_card(job_id))), "job_id": new_id, **(card or {})}
    store.put(keys.job_model_card(new_id), json.dumps(card).encode())


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from lambdaml.cli import main

    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_model_that_cannot_be_right_is_refused_in_one_line(
    folder: Path, storage: StorageSpec, breast_cancer: tuple[str, Path, float], capsys: pytest.CaptureFixture[str]
) -> None:
    from lambdaml import keys
    from lambdaml.runtime.records import FAILED, set_status

    job_id, test_file, _ = breast_cancer
    store = open_storage(storage)
    bundle = store.get(keys.job_model(job_id))
    copy_job(store, job_id, f"{job_id}-x1", bundle=bundle[:-8] + b"\xff" * 8)
    copy_job(store, job_id, f"{job_id}-x2", card={"format": 2})
    copy_job(store, job_id, f"{job_id}-x3")
    set_status(store, f"{job_id}-x3", 2, FAILED, error="worker 1 died")
    wide = folder / "wide.csv"
    wide.write_text("\n".join(",".join(["1"] * 32) for _ in range(3)) + "\n")  # a label and 31 features
    foreign = folder / "foreign-labels.t"
    foreign.write_text(test_file.read_text().replace("-1 ", "2 ", 1))
    out = folder / "never.csv"
    cases = [
        (["evaluate", "no-such-job", "--test", str(test_file)], "no job 'no-such-job'"),
        (["evaluate", f"{job_id}-x3", "--test", str(test_file)], "is failed, not succeeded"),
        (["evaluate", f"{job_id}-x1", "--test", str(test_file)], "fails its checksum"),
        (["export", f"{job_id}-x2", "--format", "onnx", "--out", str(folder / "x.onnx")], "newer than this LambdaML"),
        (["predict", job_id, "--input", str(wide), "--output", str(out)], "31 features; the model was trained on 30"),
        (["evaluate", job_id, "--test", str(foreign)], "label 2 is not one of the model's classes (-1, 1)"),
        (["export", job_id, "--format", "safetensors", "--out", str(folder / "x.st")], "is a numpy model"),
        (["predict", job_id, "--input", str(test_file), "--output", str(folder / "x.txt")], ".csv or .parquet"),
    ]
    for argv, fragment in cases:
        code, err = run_cli([*argv, *storage_flags(storage)], capsys)
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and fragment in lines[0], (argv, err)
        assert "Traceback" not in err
    assert not out.exists() and not list(folder.glob(".*.partial")) and not (folder / "x.onnx").exists()


def test_digits_softmax_and_kmeans_from_libsvm_files(folder: Path, storage: StorageSpec, services: Services) -> None:
    from sklearn.linear_model import LogisticRegression

    data = sklearn_datasets.load_digits()
    train_file, test_file = prepared(folder, storage, "digits", data.data, data.target)
    X_train, y_train = read_libsvm(train_file, 64)
    X_test, y_test = read_libsvm(test_file, 64)
    reference = LogisticRegression(max_iter=2000).fit(X_train, y_train).score(X_test, y_test)

    softmax = train(job_file(folder, storage, services, "digits", {"name": "softmax", "l2": 1e-4},
                             lr=0.5, batch_size=16, epochs=10))  # fmt: skip
    report = check_model_out(folder, storage, softmax, test_file, 64, reference=reference)
    assert [row["class"] for row in report["per_class"]] == list(range(10))
    table = ok("evaluate", softmax, "--test", str(test_file), *storage_flags(storage))
    assert "per class" in table and "accuracy" in table

    kmeans = train(job_file(folder, storage, services, "digits", {"name": "kmeans", "k": 10},
                            name="kmeans", epochs=5))  # fmt: skip
    check_model_out(folder, storage, kmeans, test_file, 64, reference=None)


def test_predict_streams_a_parquet_table_into_parquet(
    folder: Path, storage: StorageSpec, breast_cancer: tuple[str, Path, float]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    job_id, test_file, _ = breast_cancer
    X_test, y_test = read_libsvm(test_file, 30)
    table = pa.table({f"f{j}": X_test[:, j] for j in range(30)})
    unlabelled, labelled = folder / "rows.parquet", folder / "labelled.parquet"
    pq.write_table(table, unlabelled, row_group_size=40)  # 143 rows in 4 row groups
    pq.write_table(table.append_column("label", pa.array(y_test)), labelled, row_group_size=40)
    expected = load_model(job_id, storage=storage).predict(X_test)
    for source in (unlabelled, labelled):
        out = folder / f"{source.stem}-predictions.parquet"
        said = ok("predict", job_id, "--input", str(source), "--output", str(out), "--batch-rows", "25",
                  *storage_flags(storage))  # fmt: skip
        assert f"{len(y_test)} predictions" in said
        written = pq.read_table(out)
        assert written.column_names == ["prediction", "probability_-1", "probability_1"]
        assert np.array_equal(written.column("prediction").to_numpy(), expected)
