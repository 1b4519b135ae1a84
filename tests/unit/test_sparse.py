"""CSRMatrix against dense numpy, linear models on CSR, CSR shards, and the synthetic RCV1."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lambdaml import codec, keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.data import shards
from lambdaml.data.sparse import CSRMatrix, require_dense
from lambdaml.data.synthetic import RCV1_FEATURES, rcv1_like
from lambdaml.errors import ConfigError, DataError
from lambdaml.models.linear import LinearSVM, LogisticRegression
from lambdaml.runtime.reports import WorkerReport
from tests.helpers import first_attempt, vouched_shard


def random_dense(n: int = 30, d: int = 12, density: float = 0.3, seed: int = 0) -> np.ndarray:
    """A float32 matrix with zero rows (first and last) and empty columns, as real sparse data has."""
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, d)) * (rng.random((n, d)) < density)).astype(np.float32)
    X[0] = 0.0
    X[-1] = 0.0
    X[:, 3] = 0.0
    return X


@pytest.fixture
def store() -> MemoryChannel:
    return MemoryChannel()


# --- the matrix ---------------------------------------------------------------------


def test_from_dense_round_trip_and_dtypes() -> None:
    X = random_dense()
    A = CSRMatrix.from_dense(X)
    assert A.shape == X.shape and len(A) == 30 and A.ndim == 2
    assert A.nnz == np.count_nonzero(X)
    assert (A.indptr.dtype, A.indices.dtype, A.data.dtype) == (np.int64, np.int32, np.float32)
    np.testing.assert_array_equal(A.toarray(), X)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matvec_and_transpose_matvec_equal_dense(seed: int) -> None:
    X = random_dense(seed=seed)
    A = CSRMatrix.from_dense(X)
    rng = np.random.default_rng(seed + 10)
    w, r = rng.normal(size=12), rng.normal(size=30)
    np.testing.assert_allclose(A @ w, X @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(A.T @ r, X.T @ r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r @ A, r @ X, rtol=1e-12, atol=1e-12)  # numpy defers to the CSR operand
    assert (A @ w)[0] == 0.0 and (A @ w)[-1] == 0.0  # empty rows do not borrow a neighbour's sum
    assert (A.T @ r)[3] == 0.0
    assert (A.T @ r).shape == (12,) and (A @ w).dtype == np.float64
    # several columns at once (multi-output models)
    W, R = rng.normal(size=(12, 3)), rng.normal(size=(30, 2))
    np.testing.assert_allclose(A @ W, X @ W, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(A.T @ R, X.T @ R, rtol=1e-12, atol=1e-12)


def test_matvec_shape_mismatch_is_an_error() -> None:
    A = CSRMatrix.from_dense(random_dense())
    with pytest.raises(ValueError, match="cannot multiply"):
        A @ np.ones(5)
    with pytest.raises(ValueError, match="cannot multiply"):
        A.T @ np.ones(5)


def test_row_selection_matches_dense() -> None:
    X = random_dense()
    A = CSRMatrix.from_dense(X)
    for rows in ([5, 2, 2, 29, 0], np.array([7]), np.arange(30)[::-1], [-1, -30]):
        B = A[np.asarray(rows)]
        assert isinstance(B, CSRMatrix)
        np.testing.assert_array_equal(B.toarray(), X[np.asarray(rows)])
        B.validate()
    np.testing.assert_array_equal(A[3:11].toarray(), X[3:11])
    np.testing.assert_array_equal(A[1:20:4].toarray(), X[1:20:4])
    mask = np.arange(30) % 3 == 0
    np.testing.assert_array_equal(A[mask].toarray(), X[mask])
    with pytest.raises(IndexError):
        A[np.array([30])]


@pytest.mark.parametrize("empty", [np.array([], dtype=np.int64), np.array([]), slice(4, 4)])
def test_empty_row_selection(empty: object) -> None:
    A = CSRMatrix.from_dense(random_dense())
    B = A[empty]  # type: ignore[index]
    assert B.shape == (0, 12) and len(B) == 0 and B.nnz == 0
    np.testing.assert_array_equal(B @ np.ones(12), np.zeros(0))
    np.testing.assert_array_equal(B.T @ np.zeros(0), np.zeros(12))


def test_require_dense_passes_arrays_and_refuses_csr() -> None:
    X = random_dense()
    assert require_dense(X, "KMeans") is X
    with pytest.raises(ConfigError, match="KMeans needs dense features, but the dataset is sparse"):
        require_dense(CSRMatrix.from_dense(X), "KMeans")


def test_bundle_round_trip_through_the_codec() -> None:
    X = random_dense(seed=4)
    A = CSRMatrix.from_dense(X)
    raw = codec.encode_bundle(A.to_bundle())
    B = CSRMatrix.from_bundle(codec.decode_bundle(raw), shape=X.shape)
    np.testing.assert_array_equal(B.toarray(), X)
    np.testing.assert_array_equal(B.indptr, A.indptr)
    with pytest.raises(DataError, match=r"has shape \(30, 12\), expected \(30, 13\)"):
        CSRMatrix.from_bundle(codec.decode_bundle(raw), shape=(30, 13))


def test_from_coo_sums_or_keeps_the_last_duplicate() -> None:
    rows, cols, vals = np.array([1, 0, 1, 1]), np.array([2, 0, 2, 0]), np.array([1.0, 2.0, 5.0, 3.0])
    np.testing.assert_array_equal(CSRMatrix.from_coo(rows, cols, vals, (2, 3)).toarray(), [[2, 0, 0], [3, 0, 6]])
    last = CSRMatrix.from_coo(rows, cols, vals, (2, 3), duplicates="last")
    np.testing.assert_array_equal(last.toarray(), [[2, 0, 0], [3, 0, 5]])
    np.testing.assert_array_equal(last.indices, [0, 0, 2])  # sorted within each row
    with pytest.raises(DataError, match="outside the shape"):
        CSRMatrix.from_coo(rows, cols, vals, (2, 2))


def test_vstack_equals_dense_concatenation() -> None:
    X1, X2 = random_dense(n=7, seed=1), random_dense(n=5, seed=2)
    stacked = CSRMatrix.vstack([CSRMatrix.from_dense(X1), CSRMatrix.from_dense(X2)])
    stacked.validate()
    np.testing.assert_array_equal(stacked.toarray(), np.concatenate([X1, X2]))
    with pytest.raises(DataError, match="widths"):
        CSRMatrix.vstack([CSRMatrix.from_dense(X1), CSRMatrix.from_dense(X2[:, :5])])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda b: b.update(indptr=b["indptr"][:-1]), "indptr has"),
        (lambda b: b.update(indptr=b["indptr"][::-1].copy()), "indptr starts at"),
        (lambda b: b.update(indptr=np.array([0, 3, 2, 5] + [5] * 27, dtype=np.int64)), "not monotone"),
        (lambda b: b.update(indices=np.where(b["indices"] == b["indices"].max(), 12, b["indices"])), "outside"),
        (lambda b: b.update(data=b["data"][:-1]), "there are"),
        (lambda b: b.update(indices=b["indices"].astype(np.int64)), "expected a 1-D int32"),
        (lambda b: b.pop("indices"), "no 'indices' array"),
    ],
)
def test_invalid_arrays_are_a_data_error(change: object, words: str) -> None:
    bundle = dict(CSRMatrix.from_dense(random_dense()).to_bundle())
    bundle.pop("shape")
    change(bundle)  # type: ignore[operator]
    with pytest.raises(DataError, match=words):
        CSRMatrix.from_bundle(bundle, shape=(30, 12), what="shard")


# --- linear models on CSR -----------------------------------------------------------


@pytest.mark.parametrize("model", [LogisticRegression(12, l2=0.1), LinearSVM(12, l2=0.1)])
def test_models_give_the_same_loss_and_gradient_on_csr_and_dense(model: LogisticRegression) -> None:
    X = random_dense(n=40, seed=6)
    A = CSRMatrix.from_dense(X)
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, size=40).astype(np.float32)
    params = rng.normal(size=13)
    loss_d, grad_d = model.loss_grad_sum(params, X, y)
    loss_s, grad_s = model.loss_grad_sum(params, A, y)
    assert loss_s == pytest.approx(loss_d, rel=1e-12)
    np.testing.assert_allclose(grad_s, grad_d, rtol=1e-12, atol=1e-12)
    assert np.abs(grad_d[:-1]).max() > 0
    np.testing.assert_array_equal(model.predict(params, A), model.predict(params, X))
    rows = np.array([3, 9, 9, 17])
    loss_b, grad_b = model.loss_grad_sum(params, A[rows], y[rows])
    loss_r, grad_r = model.loss_grad_sum(params, X[rows], y[rows])
    assert loss_b == pytest.approx(loss_r, rel=1e-12)
    np.testing.assert_allclose(grad_b, grad_r, rtol=1e-12)
    assert model.accuracy(params, A, y) == model.accuracy(params, X, y)


def test_models_on_an_empty_csr_batch() -> None:
    A = CSRMatrix.from_dense(random_dense())[np.array([], dtype=np.int64)]
    for model in (LogisticRegression(12), LinearSVM(12)):
        loss, grad = model.loss_grad_sum(np.ones(13), A, np.zeros(0, dtype=np.float32))
        assert loss == 0.0
        np.testing.assert_array_equal(grad, np.zeros(13))


# --- CSR shards ---------------------------------------------------------------------


def test_csr_shards_round_trip(store: MemoryChannel) -> None:
    X = random_dense(n=61, d=9, seed=8)
    y = (np.arange(61) % 2).astype(np.float32)
    manifest = shards.prepare(store, "sparse", CSRMatrix.from_dense(X), y, shards=4, test_fraction=0.2, seed=3)
    assert manifest.format == "csr" and manifest.n_features == 9 and manifest.n_classes == 2
    assert shards.read_manifest(store, "sparse") == manifest
    raw = codec.decode_bundle(store.get(keys.dataset_shard("sparse", manifest.dataset_version, 0)))
    assert set(raw) == {"indptr", "indices", "data", "shape", "y"}
    # the same split as a dense dataset with the same seed
    dense = shards.prepare(store, "dense", X, y, shards=4, test_fraction=0.2, seed=3)
    assert dense.format == "dense" and dense.shard_rows == manifest.shard_rows
    for workers in (1, 2, 4):  # one shard per worker, and several stacked
        for rank in range(workers):
            Xs, ys = shards.load_worker_data(store, manifest, rank, workers)
            Xd, yd = shards.load_worker_data(store, dense, rank, workers)
            assert isinstance(Xs, CSRMatrix) and isinstance(Xd, np.ndarray)
            np.testing.assert_array_equal(Xs.toarray(), Xd)
            np.testing.assert_array_equal(ys, yd)
    test = shards.load_test(store, manifest)
    assert test is not None and isinstance(test[0], CSRMatrix) and len(test[0]) == manifest.test_rows == 12


@pytest.mark.parametrize("where", ["indices", "indptr"])
def test_corrupt_csr_shard_is_a_data_error(store: MemoryChannel, where: str) -> None:
    """A shard whose arrays pass the checksum but break CSR invariants (a buggy writer) is refused."""
    X, y = random_dense(n=20), np.zeros(20, dtype=np.float32)
    manifest = shards.prepare(store, "bad", CSRMatrix.from_dense(X), y, shards=2, test_fraction=0.0)
    key = keys.dataset_shard("bad", manifest.dataset_version, 0)
    bundle = dict(codec.decode_bundle(store.get(key)))
    if where == "indices":
        bundle["indices"] = bundle["indices"] + np.int32(100)
    else:
        bundle["indptr"] = bundle["indptr"][::-1].copy()
    manifest = vouched_shard(store, manifest, 0, codec.encode_bundle(bundle))
    with pytest.raises(DataError) as info:
        shards.load_worker_data(store, manifest, 0, 2)
    assert key in str(info.value)
    shards.load_worker_data(store, manifest, 1, 2)  # the other shard still loads


def test_flipped_byte_in_a_csr_shard_is_a_data_error(store: MemoryChannel) -> None:
    X, y = random_dense(n=20), np.zeros(20, dtype=np.float32)
    manifest = shards.prepare(store, "flip", CSRMatrix.from_dense(X), y, shards=2, test_fraction=0.0)
    key = keys.dataset_shard("flip", manifest.dataset_version, 1)
    raw = bytearray(store.get(key))
    raw[-3] ^= 0x10
    store.put(key, bytes(raw))
    with pytest.raises(DataError, match="not the shard its manifest describes"):
        shards.load_worker_data(store, manifest, 1, 2)
    with pytest.raises(DataError, match="checksum"):  # and where the manifest vouches for it, the codec catches it
        shards.load_worker_data(store, vouched_shard(store, manifest, 1, bytes(raw)), 1, 2)


def test_csr_shard_with_the_wrong_width_is_a_data_error(store: MemoryChannel) -> None:
    X, y = random_dense(n=20), np.zeros(20, dtype=np.float32)
    manifest = shards.prepare(store, "wide", CSRMatrix.from_dense(X), y, shards=2, test_fraction=0.0)
    bundle = codec.encode_bundle({**CSRMatrix.from_dense(X[:10, :5]).to_bundle(), "y": y[:10]})
    manifest = vouched_shard(store, manifest, 0, bundle)
    with pytest.raises(DataError, match=r"expected \(10, 12\)"):
        shards.load_worker_data(store, manifest, 0, 2)


# --- synthetic RCV1 -----------------------------------------------------------------


def test_rcv1_like_shape_and_statistics() -> None:
    X, y, w_true = rcv1_like(2000, seed=2)
    assert X.shape == (2000, RCV1_FEATURES) == (2000, 47_236)
    X.validate()
    per_row = np.diff(X.indptr)
    assert 60 < per_row.mean() < 80 and per_row.min() >= 1
    assert np.all(X.data > 0)
    np.testing.assert_allclose(np.sqrt(np.bincount(X.row_ids(), weights=X.data.astype(np.float64) ** 2)), 1, rtol=1e-5)
    assert set(np.unique(y).tolist()) == {0.0, 1.0} and 0.4 < y.mean() < 0.6
    assert w_true.shape == (47_237,) and 0 < np.count_nonzero(w_true[:-1]) < 0.1 * 47_236
    truth = (X @ w_true[:-1] + w_true[-1] > 0) == (y > 0)
    assert 0.85 < truth.mean() < 1.0  # learnable, with some label noise
    again = rcv1_like(2000, seed=2)
    np.testing.assert_array_equal(again[0].data, X.data)
    assert not np.array_equal(rcv1_like(2000, seed=3)[1], y)


@pytest.mark.parametrize("model_type", [LogisticRegression, LinearSVM])
def test_training_on_rcv1_like_beats_chance(model_type: type[LogisticRegression]) -> None:
    X, y, _ = rcv1_like(5000, seed=1)
    train, test = np.arange(4000), np.arange(4000, 5000)
    model = model_type(X.shape[1])
    params = model.init_params(0)
    rng = np.random.default_rng(0)
    before = model.mean_loss(params, X[train], y[train])
    for _ in range(5):
        order = rng.permutation(train)
        for start in range(0, len(order), 50):
            rows = order[start : start + 50]
            _, grad = model.loss_grad_sum(params, X[rows], y[rows])
            params -= 2.0 * grad / len(rows)
    assert model.mean_loss(params, X[train], y[train]) < before - 0.1
    assert model.accuracy(params, X[test], y[test]) > 0.65


def train_two_workers(store: MemoryChannel, dataset: str, model_name: str) -> tuple[list[float], np.ndarray]:
    """Run two in-process workers over a memory channel; rank 0's losses and the stored model."""
    from lambdaml.config import parse_job
    from lambdaml.runtime.worker import run_worker

    job = parse_job(
        {
            "name": "csr",
            "workers": 2,
            "dataset": dataset,
            "channel": {"kind": "memory"},
            "model": {"name": model_name, "l2": 1e-4},
            "algorithm": {"name": "ga_sgd", "epochs": 2, "batch_size": 40, "lr": 2.0},
        },
        "job",
    )
    channel = MemoryChannel()
    reports: dict[int, WorkerReport] = {}
    attempt = first_attempt(store, job, f"job-{dataset}")

    def work(rank: int) -> None:
        report = run_worker(job, attempt, rank, channel=channel, store=store)
        assert isinstance(report, WorkerReport)  # no deadline: it runs to the end
        reports[rank] = report

    threads = [threading.Thread(target=work, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert set(reports) == {0, 1}, "a worker failed"
    return list(reports[0].losses), codec.decode_bundle(store.get(keys.job_model(f"job-{dataset}")))["params"]


@pytest.mark.parametrize("model_name", ["lr", "svm"])
def test_csr_dataset_trains_through_the_worker_like_its_dense_twin(store: MemoryChannel, model_name: str) -> None:
    """A CSR dataset gives the dense dataset's losses and model through the real worker loop."""
    X, y, _ = rcv1_like(600, features=2000, seed=4)
    shards.prepare(store, "sparse", X, y, shards=2, seed=1)
    shards.prepare(store, "dense", X.toarray(), y, shards=2, seed=1)
    sparse_losses, sparse_params = train_two_workers(store, "sparse", model_name)
    dense_losses, dense_params = train_two_workers(store, "dense", model_name)
    np.testing.assert_allclose(sparse_losses, dense_losses, rtol=1e-9)
    np.testing.assert_allclose(sparse_params, dense_params, rtol=1e-7, atol=1e-10)
    assert sparse_losses[-1] < sparse_losses[0]
