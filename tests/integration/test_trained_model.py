"""A finished job's model, used: ``lambdaml.load_model`` and ``TrainedModel`` on models real jobs trained.

Each model is trained once by a 2-worker job over an S3 channel on moto: LR (labels -1/+1) and
the SVM on breast cancer, softmax, the Crammer-Singer SVM, KMeans and a torch MLP on digits (10
classes), and LR on sparse rows. Every way of loading gives the same model; its accuracy on the
test split is the job's own; scikit-learn's estimator, onnxruntime's graph and the torch module
give its predictions; and a model that cannot be right (a job that did not succeed, a damaged
bundle, a foreign or newer card) or an input it cannot take is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lambdaml
from lambdaml import keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec, parse_job
from lambdaml.data import shards
from lambdaml.data.sparse import CSRMatrix
from lambdaml.driver import run_job
from lambdaml.errors import ConfigError, DataError, LambdaMLError
from lambdaml.models.card import MODEL_FORMAT, bundle_hash
from lambdaml.runtime.records import FAILED, SUCCEEDED, claim_job, set_status
from lambdaml.runtime.reports import JobResult
from lambdaml.storage import get_json, put_json
from lambdaml.trained import TrainedModel, load_model
from tests.helpers import Services, channel_spec

pytestmark = pytest.mark.timeout(300)

sklearn = pytest.importorskip("sklearn")
pytest.importorskip("onnxruntime")

WORKERS = 2
CANCER, DIGITS, SPARSE = "tm-cancer", "tm-digits", "tm-sparse"
# Measured test accuracy at these settings: LR 0.944, SVM 0.958, sparse LR 0.965 (breast cancer);
# softmax 0.953, multiclass SVM 0.958, MLP 0.955 (digits). The floors only say the job learned.
JOBS: dict[str, tuple[str, dict[str, Any], dict[str, Any], float]] = {
    "lr": (CANCER, {"name": "lr", "l2": 1e-4}, {"lr": 0.5, "batch_size": 64, "epochs": 3}, 0.9),
    "svm": (CANCER, {"name": "svm", "l2": 1e-3}, {"lr": 0.2, "batch_size": 64, "epochs": 3}, 0.9),
    "softmax": (DIGITS, {"name": "softmax", "l2": 1e-4}, {"lr": 0.5, "batch_size": 128, "epochs": 3}, 0.9),
    "multiclass_svm": (
        DIGITS,
        {"name": "multiclass_svm", "l2": 1e-4},
        {"lr": 0.3, "batch_size": 128, "epochs": 3},
        0.9,
    ),
    "kmeans": (DIGITS, {"name": "kmeans", "k": 10}, {"name": "kmeans", "epochs": 3}, 0.0),
    "mlp": (DIGITS, {"name": "mlp", "hidden": [16]}, {"lr": 0.5, "batch_size": 64, "epochs": 3}, 0.9),
    "sparse_lr": (SPARSE, {"name": "lr", "l2": 1e-4}, {"lr": 0.5, "batch_size": 64, "epochs": 2}, 0.9),
}
LINEAR = ["lr", "svm", "softmax", "multiclass_svm", "kmeans"]


# --- data and jobs, each made once for the module ----------------------------------


@pytest.fixture(scope="module")
def datasets(data_store: tuple[StorageSpec, Channel]) -> dict[str, shards.Manifest]:
    builtin = pytest.importorskip("lambdaml.data.builtin")
    _, store = data_store
    X, y, _ = builtin.load_builtin("breast_cancer")
    cancer = shards.prepare(store, CANCER, X, 2 * y - 1, shards=WORKERS, test_fraction=0.25, seed=1)
    X, y, shape = builtin.load_builtin("digits")
    std = X.std(axis=0)  # standardized pixels: SGD learns in a few rounds (constant pixels stay 0)
    X = ((X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)
    digits = shards.prepare(store, DIGITS, X, y, shards=WORKERS, test_fraction=0.2, seed=0, sample_shape=shape)
    # Breast cancer again, as CSR rows (the small standardized values dropped) and its labels 0/1.
    X, y, _ = builtin.load_builtin("breast_cancer")
    X[np.abs(X) < 0.5] = 0.0
    sparse = shards.prepare(store, SPARSE, CSRMatrix.from_dense(X), y, shards=WORKERS, test_fraction=0.25, seed=2)
    assert cancer.label_values == [-1.0, 1.0] and digits.n_classes == 10 and sparse.format == "csr"
    return {CANCER: cancer, DIGITS: digits, SPARSE: sparse}


def job_data(storage: StorageSpec, services: Services, kind: str) -> dict[str, Any]:
    dataset, model, algorithm, _ = JOBS[kind]
    return {
        "name": f"tm-{kind.replace('_', '-')}",
        "workers": WORKERS,
        "dataset": dataset,
        "storage": storage.model_dump(),
        "channel": channel_spec("s3", services).model_dump(),
        "model": model,
        "algorithm": {"name": "ga_sgd", "seed": 7, **algorithm},
        "sync": {"timeout_s": 120},
    }


@pytest.fixture(scope="module")
def jobs(
    data_store: tuple[StorageSpec, Channel], services: Services, datasets: dict[str, shards.Manifest]
) -> Callable[[str], JobResult]:
    """Each job trained on first use: ``jobs("lr")`` through the public ``lambdaml.train``, the rest by run_job."""
    storage, _ = data_store
    done: dict[str, JobResult] = {}

    def get(kind: str) -> JobResult:
        if kind not in done:
            data = job_data(storage, services, kind)
            if kind == "lr":
                result = lambdaml.train(data, job_id="tm-lr-api")
            else:
                result = run_job(parse_job(data), results_dir=None)
            done[kind] = result  # trained once, even where the checks below fail
        result = done[kind]
        assert result.status == SUCCEEDED and result.ranks_agree
        if result.test_accuracy is not None:
            assert result.test_accuracy >= JOBS[kind][3], (kind, result.test_accuracy)
        return result

    return get


def split_of(store: Channel, manifest: shards.Manifest) -> tuple[Any, np.ndarray]:
    """The dataset's test rows and their labels as the training file wrote them."""
    test = shards.load_test(store, manifest)
    assert test is not None
    X, classes = test
    values = np.asarray(manifest.label_values if manifest.label_values else range(manifest.n_classes))
    return X, values[np.asarray(classes).astype(np.int64)]


def dense_test(store: Channel, manifest: shards.Manifest) -> tuple[np.ndarray, np.ndarray]:
    X, y = split_of(store, manifest)
    return np.asarray(X.toarray() if isinstance(X, CSRMatrix) else X, dtype=np.float64), y


@pytest.fixture(scope="module")
def loaded(data_store: tuple[StorageSpec, Channel], jobs: Callable[[str], JobResult]) -> Callable[[str], TrainedModel]:
    storage, _ = data_store
    cache: dict[str, TrainedModel] = {}

    def get(kind: str) -> TrainedModel:
        if kind not in cache:
            cache[kind] = load_model(jobs(kind).job_id, storage=storage)
        return cache[kind]

    return get


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert isinstance(exc.value, LambdaMLError) and message and "\n" not in message, message
    return message


# --- loading -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", LINEAR)
def test_every_way_of_loading_gives_the_same_model(
    kind: str, data_store: tuple[StorageSpec, Channel], jobs: Callable[[str], JobResult]
) -> None:
    storage, store = data_store
    result = jobs(kind)
    by_id = load_model(result.job_id, storage=storage)
    by_result = load_model(result)  # the result knows its own bucket
    assert result.model_uri == f"s3://{storage.bucket}/jobs/{result.job_id}/model"
    # The URI names its bucket: the given storage lends only its endpoint.
    by_uri = lambdaml.load_model(result.model_uri, storage=storage.model_copy(update={"bucket": "another-bucket"}))
    by_store = lambdaml.load_model(result.job_id, storage=store)
    for other in (by_result, by_uri, by_store):
        assert other.card == by_id.card
        np.testing.assert_array_equal(other.params, by_id.params)
    assert by_id.name == JOBS[kind][1]["name"] and by_id.job_id == result.job_id
    assert by_id.spec["model"]["name"] == by_id.name and by_id.spec["dataset"] == JOBS[kind][0]
    metrics = by_id.metrics
    assert metrics["test_accuracy"] == result.test_accuracy and metrics["test_loss"] == result.test_loss
    assert len(metrics["loss_curve"]) == JOBS[kind][2]["epochs"]


@pytest.mark.parametrize("kind", [*LINEAR, "mlp", "sparse_lr"])
def test_score_and_loss_on_the_test_split_are_the_jobs_own(
    kind: str,
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    jobs: Callable[[str], JobResult],
    loaded: Callable[[str], TrainedModel],
) -> None:
    _, store = data_store
    manifest = datasets[JOBS[kind][0]]
    result, model = jobs(kind), loaded(kind)
    X, y = split_of(store, manifest)
    assert model.n_features == manifest.n_features
    if model.supervised:
        classes = np.asarray(manifest.label_values or range(manifest.n_classes))
        np.testing.assert_array_equal(model.classes_, classes)
        assert model.classes_.dtype == np.int64  # integral labels come back as integers
        assert model.score(X, y) == result.test_accuracy
        assert model.mean_loss(X, y) == pytest.approx(result.test_loss, rel=1e-9)
        assert set(np.unique(model.predict(X))) <= set(classes.tolist())
    else:  # KMeans: minus the summed squared distance; its mean is the job's test loss
        assert result.test_accuracy is None and result.test_loss is not None
        assert -model.score(X) / len(X) == pytest.approx(result.test_loss, rel=1e-9)
        assert model.mean_loss(X, None) == pytest.approx(result.test_loss, rel=1e-9)
        with pytest.raises(ConfigError) as refused:
            _ = model.classes_
        assert "clustering" in one_line(refused)


# --- scikit-learn and ONNX ---------------------------------------------------------


@pytest.mark.parametrize("kind", [*LINEAR, "sparse_lr"])
def test_to_sklearn_predicts_as_the_model_does(
    kind: str,
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    loaded: Callable[[str], TrainedModel],
) -> None:
    _, store = data_store
    model = loaded(kind)
    X, y = dense_test(store, datasets[JOBS[kind][0]])
    estimator = model.to_sklearn()
    predicted = model.predict(X)
    np.testing.assert_array_equal(estimator.predict(X), predicted)
    if kind == "kmeans":
        assert isinstance(estimator, sklearn.cluster.KMeans)
        assert len(np.unique(predicted)) > 1
        return
    np.testing.assert_array_equal(estimator.classes_, model.classes_)
    assert estimator.score(X, y) == pytest.approx(model.score(X, y), abs=1e-12)
    np.testing.assert_allclose(estimator.decision_function(X), model.decision_function(X), rtol=0, atol=1e-9)
    if kind in ("lr", "sparse_lr", "softmax"):
        assert isinstance(estimator, sklearn.linear_model.LogisticRegression)
        np.testing.assert_allclose(estimator.predict_proba(X), model.predict_proba(X), rtol=0, atol=1e-9)
    else:
        assert isinstance(estimator, sklearn.svm.LinearSVC)
        with pytest.raises(ConfigError) as refused:
            model.predict_proba(X)
        assert "gives no probabilities" in one_line(refused)


def test_sparse_model_takes_sparse_rows_in_sklearn_too(
    data_store: tuple[StorageSpec, Channel], datasets: dict[str, shards.Manifest], loaded: Callable[[str], TrainedModel]
) -> None:
    scipy_sparse = pytest.importorskip("scipy.sparse")
    _, store = data_store
    model = loaded("sparse_lr")
    assert model.card.data_format == "csr"
    X, y = split_of(store, datasets[SPARSE])
    csr = scipy_sparse.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)
    predicted = model.predict(X)
    np.testing.assert_array_equal(model.predict(csr), predicted)
    np.testing.assert_array_equal(model.predict(csr.toarray()), predicted)
    np.testing.assert_array_equal(model.to_sklearn().predict(csr), predicted)
    assert model.score(csr, y) == jobs_accuracy(model)


def jobs_accuracy(model: TrainedModel) -> float | None:
    assert model.result is not None
    return model.result.test_accuracy


@pytest.mark.parametrize("kind", [*LINEAR, "sparse_lr"])
def test_onnx_graph_gives_the_models_labels_and_scores(
    kind: str,
    tmp_path: Path,
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    loaded: Callable[[str], TrainedModel],
) -> None:
    ort = pytest.importorskip("onnxruntime")
    _, store = data_store
    model = loaded(kind)
    X, _ = dense_test(store, datasets[JOBS[kind][0]])
    path = model.export(tmp_path / f"{kind}.onnx", "onnx")
    assert path == tmp_path / f"{kind}.onnx" and path.stat().st_size > 0
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["X"]
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, {"X": X.astype(np.float32)}), strict=True))
    np.testing.assert_array_equal(outputs["label"], model.predict(X))
    if kind in ("lr", "sparse_lr", "softmax"):
        np.testing.assert_allclose(outputs["probabilities"], model.predict_proba(X), rtol=0, atol=1e-5)
    elif kind == "kmeans":
        centroids = model.to_sklearn().cluster_centers_
        squared = ((X[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        np.testing.assert_allclose(outputs["distances"], squared, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(outputs["scores"], model.decision_function(X), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["lr", "svm", "softmax", "multiclass_svm", "kmeans"])
def test_decision_function_shape(
    kind: str,
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    loaded: Callable[[str], TrainedModel],
) -> None:
    _, store = data_store
    model = loaded(kind)
    X, _ = dense_test(store, datasets[JOBS[kind][0]])
    if kind == "kmeans":
        with pytest.raises(ConfigError) as refused:
            model.decision_function(X)
        assert "has no decision function" in one_line(refused)
        return
    scores = model.decision_function(X)
    if kind in ("lr", "svm"):  # binary: a margin per row, positive for classes_[1]
        assert scores.shape == (len(X),)
        np.testing.assert_array_equal(model.predict(X), np.where(scores > 0, model.classes_[1], model.classes_[0]))
    else:
        assert scores.shape == (len(X), 10)
        np.testing.assert_array_equal(model.predict(X), model.classes_[scores.argmax(axis=1)])
    if kind in ("lr", "softmax"):
        proba = model.predict_proba(X)
        assert proba.shape == (len(X), len(model.classes_))
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(model.classes_[proba.argmax(axis=1)], model.predict(X))


@pytest.mark.parametrize("kind", [*LINEAR, "mlp"])
def test_npz_export_round_trips_without_pickle(
    kind: str, tmp_path: Path, loaded: Callable[[str], TrainedModel]
) -> None:
    model = loaded(kind)
    path = model.export(tmp_path / "model.npz", "npz")
    assert path == tmp_path / "model.npz" and path.is_file()
    with np.load(path, allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["params"], model.params)
        assert saved["params"].dtype == model.params.dtype
        assert int(saved["n_features"]) == model.n_features
        if model.supervised:
            np.testing.assert_array_equal(saved["classes"], model.classes_)
        else:
            assert "classes" not in saved.files


def test_npz_export_writes_the_path_it_is_given(tmp_path: Path, loaded: Callable[[str], TrainedModel]) -> None:
    """numpy's savez appends ".npz" to a bare name; the export writes (and returns) exactly the path asked for."""
    path = loaded("lr").export(tmp_path / "weights", "npz")
    assert path == tmp_path / "weights" and path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights"]
    with np.load(path, allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["params"], loaded("lr").params)


def test_numpy_models_refuse_torch_exports(tmp_path: Path, loaded: Callable[[str], TrainedModel]) -> None:
    model = loaded("softmax")
    assert model.export_format == "onnx"
    with pytest.raises(ConfigError) as refused:
        model.export(tmp_path / "m.safetensors", "safetensors")
    assert "is a numpy model" in one_line(refused)
    with pytest.raises(ConfigError) as refused:
        model.export(tmp_path / "m.pt", "pickle")
    assert "unknown export format 'pickle'" in one_line(refused)
    assert list(tmp_path.iterdir()) == []


# --- torch -------------------------------------------------------------------------


def test_mlp_predicts_through_its_torch_module(
    tmp_path: Path,
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    loaded: Callable[[str], TrainedModel],
) -> None:
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from lambdaml.models.torch_models import MLP

    _, store = data_store
    model = loaded("mlp")
    assert model.is_torch and model.export_format == "safetensors"
    X, y = dense_test(store, datasets[DIGITS])
    predicted = model.predict(X)
    assert len(np.unique(predicted)) > 5

    def argmax_labels(module: Any) -> np.ndarray:
        with torch.no_grad():
            logits = module(torch.from_numpy(X.astype(np.float32)))
        return np.asarray(model.classes_[logits.argmax(dim=1).numpy()])

    module = model.to_torch()
    assert not module.training
    np.testing.assert_array_equal(argmax_labels(module), predicted)
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(model.classes_[proba.argmax(axis=1)], predicted)

    # The weights as safetensors, into a fresh module of the same architecture: no pickle anywhere.
    path = model.export(tmp_path / "mlp.safetensors", "safetensors")
    assert path == tmp_path / "mlp.safetensors"
    tensors = safetensors_torch.load_file(str(path))
    fresh = MLP(model.n_features, n_classes=10, hidden=[16]).module
    assert set(tensors) == set(fresh.state_dict())
    assert not np.array_equal(argmax_labels(fresh.eval()), predicted)  # untrained: it predicts otherwise
    fresh.load_state_dict(tensors)
    np.testing.assert_array_equal(argmax_labels(fresh.eval()), predicted)

    with pytest.raises(ConfigError) as refused:
        model.to_onnx(tmp_path / "mlp.onnx")
    assert "torch model" in one_line(refused) and "safetensors" in str(refused.value)
    assert not (tmp_path / "mlp.onnx").exists()
    with pytest.raises(ConfigError) as refused:
        model.to_sklearn()
    assert "no scikit-learn counterpart" in one_line(refused)
    assert model.score(X, y) == jobs_accuracy(model)


def test_changing_the_torch_module_leaves_the_model_alone(
    data_store: tuple[StorageSpec, Channel], datasets: dict[str, shards.Manifest], loaded: Callable[[str], TrainedModel]
) -> None:
    """to_torch gives the caller a module of their own: fine-tuning it changes neither the model nor a later copy."""
    torch = pytest.importorskip("torch")
    _, store = data_store
    model = loaded("mlp")
    X, _ = dense_test(store, datasets[DIGITS])
    before = model.predict(X)
    params = model.params.copy()
    mine = model.to_torch()
    with torch.no_grad():
        for p in mine.parameters():
            p.zero_()
    np.testing.assert_array_equal(model.params, params)
    np.testing.assert_array_equal(model.predict(X), before)
    assert all(bool((p == 0).all()) for p in mine.parameters())  # predict did not reset the caller's module
    again = model.to_torch()
    assert again is not mine and any(bool((p != 0).any()) for p in again.parameters())


# --- inputs ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["lr", "softmax", "kmeans", "mlp"])
def test_numpy_sparse_and_dataframe_inputs_predict_alike(
    kind: str,
    data_store: tuple[StorageSpec, Channel],
    datasets: dict[str, shards.Manifest],
    loaded: Callable[[str], TrainedModel],
) -> None:
    scipy_sparse = pytest.importorskip("scipy.sparse")
    pd = pytest.importorskip("pandas")
    _, store = data_store
    model = loaded(kind)
    X, y = dense_test(store, datasets[JOBS[kind][0]])
    X[np.abs(X) < 0.5] = 0.0  # some zeros, so the sparse matrix is sparse
    expected = model.predict(X)
    csr = scipy_sparse.csr_matrix(X)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    for given in (X.astype(np.float32), csr, csr.tocoo(), frame, X.tolist()):
        np.testing.assert_array_equal(model.predict(given), expected)
    if model.supervised:
        assert model.score(frame, pd.Series(y)) == model.score(X, y) == model.score(csr, list(y))


def test_a_scipy_matrix_given_is_not_changed(loaded: Callable[[str], TrainedModel]) -> None:
    """Duplicate entries add up in prediction, and the caller's matrix keeps its own layout."""
    scipy_sparse = pytest.importorskip("scipy.sparse")
    model = loaded("lr")
    d = model.n_features
    # Row 0 holds column 3 twice (1 + 2) and its columns out of order; row 1 is the same row summed.
    csr = scipy_sparse.csr_matrix(
        (np.array([1.0, 5.0, 2.0, 3.0, 5.0]), np.array([3, 0, 3, 3, 0]), np.array([0, 3, 5])), shape=(2, d)
    )
    indices, data = csr.indices.copy(), csr.data.copy()
    assert not csr.has_canonical_format
    labels = model.predict(csr)
    assert labels[0] == labels[1]
    np.testing.assert_allclose(model.decision_function(csr)[0], model.decision_function(csr)[1], rtol=1e-12)
    np.testing.assert_array_equal(csr.indices, indices)
    np.testing.assert_array_equal(csr.data, data)


# --- refusals: inputs --------------------------------------------------------------


def test_wrong_width_string_columns_and_unknown_labels_are_refused(
    data_store: tuple[StorageSpec, Channel], datasets: dict[str, shards.Manifest], loaded: Callable[[str], TrainedModel]
) -> None:
    pd = pytest.importorskip("pandas")
    scipy_sparse = pytest.importorskip("scipy.sparse")
    _, store = data_store
    model = loaded("lr")
    X, y = dense_test(store, datasets[CANCER])
    infinite = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    infinite.loc[2, "f7"] = np.inf
    cases: list[tuple[Any, str]] = [
        (X[:, :-1], "the input has 29 features; the model was trained on 30"),
        (np.hstack([X, X[:, :1]]), "the input has 31 features; the model was trained on 30"),
        (pd.DataFrame(X[:, :-1]), "the input has 29 features; the model was trained on 30"),
        (scipy_sparse.csr_matrix(X[:, :20]), "the input has 20 features; the model was trained on 30"),
        (X[0], "the input has shape (30,)"),
        (pd.DataFrame(X).assign(tumour="malignant"), "column 'tumour' is "),
        (
            np.where(np.arange(30) == 4, np.nan, X),
            "the input holds NaN, infinite or beyond-float32 values (first at row 0, column 4)",
        ),
        (infinite, "the input holds NaN, infinite or beyond-float32 values (first at row 2, column 'f7')"),
        (X * 1e39, "beyond-float32"),
        ([["a"] * 30], "the input is not numeric rows"),
    ]
    for given, message in cases:
        with pytest.raises(DataError) as refused:
            model.predict(given)
        assert message in one_line(refused)
        if "tumour" in message:
            assert "not numeric: encode it as numbers or drop it" in str(refused.value)
    # The file's labels were -1/+1: class ids 0/1 are not among them.
    with pytest.raises(DataError) as refused:
        model.score(X, (y > 0).astype(int))
    assert "label 0 is not one of the model's classes (-1, 1)" in one_line(refused)
    with pytest.raises(DataError) as refused:
        loaded("softmax").score(dense_test(store, datasets[DIGITS])[0][:3], [1, 2, 10])
    assert "label 10 is not one of the model's classes" in one_line(refused)
    with pytest.raises(DataError) as refused:
        model.score(X, y[:, None])
    assert "one label per row" in one_line(refused)
    # One label, or one too many, is refused: a single label would broadcast into a wrong score.
    for labels in ([1], y[:-1], np.append(y, 1)):
        for measure in (model.score, model.mean_loss):
            with pytest.raises(DataError) as refused:
                measure(X, labels)
            assert (
                one_line(refused)
                == f"{len(labels)} label{'s' * (len(labels) > 1)} for {len(X)} rows: give one label per row"
            )


# --- refusals: models that cannot be right -----------------------------------------


def copy_model(
    store: Channel,
    source: str,
    target: str,
    *,
    card: dict[str, Any] | None = None,
    bundle: bytes | None = None,
    with_card: bool = True,
    state: str | None = SUCCEEDED,
) -> None:
    """Put ``source``'s model and card (for job ``target``) under a new job id, changed as given.

    The source job is never touched, so the other tests keep its good model.
    """
    written = get_json(store, keys.job_model_card(source))
    written["job_id"] = target
    store.put(keys.job_model(target), store.get(keys.job_model(source)) if bundle is None else bundle)
    if with_card:
        put_json(store, keys.job_model_card(target), {**written, **(card or {})})
    if state is not None:
        set_status(store, target, 1, state)


def test_copied_model_loads_as_a_control(
    data_store: tuple[StorageSpec, Channel], jobs: Callable[[str], JobResult], loaded: Callable[[str], TrainedModel]
) -> None:
    """The copy the refusals below change is itself a good model: what they refuse is each change."""
    storage, store = data_store
    copy_model(store, jobs("svm").job_id, "tm-copy")
    copy = load_model("tm-copy", storage=storage)
    np.testing.assert_array_equal(copy.params, loaded("svm").params)
    assert copy.job_id == "tm-copy" and copy.result is None and copy.metrics == {}


def test_model_of_a_job_that_did_not_succeed_is_refused(
    data_store: tuple[StorageSpec, Channel], datasets: dict[str, shards.Manifest], jobs: Callable[[str], JobResult]
) -> None:
    storage, store = data_store
    source = jobs("svm").job_id
    job = parse_job({**jobs("svm").spec, "name": "tm-claimed"})
    # A claimed job that is still running, then fails: its model (a good one, copied) is not used.
    claim_job(store, job, "tm-failed", datasets[CANCER].dataset_version)
    copy_model(store, source, "tm-failed", state=None)
    with pytest.raises(DataError) as refused:
        load_model("tm-failed", storage=storage)
    assert one_line(refused) == "job tm-failed is running, not succeeded: it has no model to use"
    set_status(store, "tm-failed", 1, FAILED, reason="error", error="worker 1 crashed")
    with pytest.raises(DataError) as refused:
        load_model(f"s3://{storage.bucket}/jobs/tm-failed/model", storage=storage)
    assert one_line(refused) == "job tm-failed is failed, not succeeded: it has no model to use"
    with pytest.raises(DataError) as refused:
        load_model("tm-never-ran", storage=storage)
    assert one_line(refused).startswith("no job 'tm-never-ran' in ")


def test_damaged_or_foreign_models_are_refused(
    data_store: tuple[StorageSpec, Channel], jobs: Callable[[str], JobResult]
) -> None:
    storage, store = data_store
    lr, softmax = jobs("lr").job_id, jobs("softmax").job_id
    # The bundle replaced by other bytes: its hash is not the card's.
    copy_model(store, lr, "tm-damaged", bundle=b"other bytes")
    with pytest.raises(DataError) as refused:
        load_model("tm-damaged", storage=storage)
    assert "the model bundle of job tm-damaged (jobs/tm-damaged/model) fails its checksum" in one_line(refused)
    # A bundle one byte longer than the card's: the same refusal.
    copy_model(store, lr, "tm-longer", bundle=store.get(keys.job_model(lr)) + b"\0")
    with pytest.raises(DataError) as refused:
        load_model("tm-longer", storage=storage)
    assert "fails its checksum" in one_line(refused)
    # A card from a newer LambdaML.
    copy_model(store, lr, "tm-newer", card={"format": MODEL_FORMAT + 1})
    with pytest.raises(DataError) as refused:
        load_model("tm-newer", storage=storage)
    assert (
        one_line(refused) == f"jobs/tm-newer/model.json is model format {MODEL_FORMAT + 1}, newer than this LambdaML "
        f"reads ({MODEL_FORMAT}); upgrade lambdaml to use it"
    )
    # A card that describes another job's model.
    copy_model(store, lr, "tm-foreign", card={"job_id": lr})
    with pytest.raises(DataError) as refused:
        load_model("tm-foreign", storage=storage)
    assert one_line(refused) == f"jobs/tm-foreign/model.json describes the model of job '{lr}', not 'tm-foreign'"
    # No card (a model from before cards), and no bundle (deleted).
    copy_model(store, lr, "tm-no-card", with_card=False)
    with pytest.raises(DataError) as refused:
        load_model("tm-no-card", storage=storage)
    assert "job tm-no-card has no model card (jobs/tm-no-card/model.json)" in one_line(refused)
    copy_model(store, lr, "tm-no-bundle")
    store.delete([keys.job_model("tm-no-bundle")])
    with pytest.raises(DataError) as refused:
        load_model("tm-no-bundle", storage=storage)
    assert "job tm-no-bundle has no model bundle (jobs/tm-no-bundle/model)" in one_line(refused)
    # A card that is not JSON, and a malformed one.
    copy_model(store, lr, "tm-not-json")
    store.put(keys.job_model_card("tm-not-json"), b"{not json")
    with pytest.raises(DataError) as refused:
        load_model("tm-not-json", storage=storage)
    assert "jobs/tm-not-json/model.json" in one_line(refused)
    copy_model(store, lr, "tm-malformed", card={"n_features": "thirty"})
    with pytest.raises(DataError) as refused:
        load_model("tm-malformed", storage=storage)
    assert "jobs/tm-malformed/model.json is not a valid model card" in one_line(refused)
    # Another model's bundle under a card vouching for it (a forger's): its size is not the card's model's.
    softmax_bundle = store.get(keys.job_model(softmax))
    copy_model(store, lr, "tm-forged", bundle=softmax_bundle, card={"bundle_sha256": bundle_hash(softmax_bundle)})
    with pytest.raises(DataError) as refused:
        load_model("tm-forged", storage=storage)
    assert "model of job tm-forged has (650,) parameters; its card says 31" in one_line(refused)


def test_uris_that_are_not_a_jobs_model_are_refused(data_store: tuple[StorageSpec, Channel]) -> None:
    storage, store = data_store
    for uri, message in [
        (f"s3://{storage.bucket}/jobs/x/result.json", "is not a job's model (s3://BUCKET/jobs/JOB_ID/model)"),
        (f"s3://{storage.bucket}/datasets/tm-cancer", "is not a job's model"),
        ("s3://B/jobs/x/model", "is not an S3 object: write s3://BUCKET/KEY"),
    ]:
        with pytest.raises(ConfigError) as refused:
            load_model(uri, storage=storage)
        assert message in one_line(refused)
    with pytest.raises(ConfigError) as refused:
        load_model(f"s3://{storage.bucket}/jobs/x/model", storage=store)
    assert "give storage as a StorageSpec" in one_line(refused)
    with pytest.raises(ConfigError) as refused:
        load_model("../etc", storage=storage)
    assert "invalid job id" in one_line(refused)
