"""Property-based tests: whatever bytes or text arrive, the codec and the loaders answer with
a value or with the project's own error, never with anything else.

Hypothesis generates arbitrary input and, more usefully, *forged* input: headers and bundle
tables with correct checksums around absurd shapes, dtypes and lengths, so the checks behind
the checksum are reached. Example counts are kept moderate for the suite's time budget.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lambdaml import codec, keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.config import parse_job, read_job_file
from lambdaml.data import formats, shards
from lambdaml.data.sparse import CSRMatrix
from lambdaml.errors import CodecError, ConfigError, DataError
from lambdaml.storage import put_json

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WIRE_DTYPES = ["<f4", "<f8", "<f2", "i1", "u1", "<i4", "<i8", "<u4", "<u8", "?"]


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """One file rewritten by every example (a function-scoped tmp_path would be shared anyway)."""
    with tempfile.TemporaryDirectory(prefix="lambdaml-prop-") as folder:
        yield Path(folder)


# --- the codec ----------------------------------------------------------------------


def forge_tensor(code: int, dims: list[int], payload: bytes) -> bytes:
    """A tensor header with a correct checksum around whatever code, shape and payload."""
    shape = struct.pack(f"<{len(dims)}Q", *dims)
    head = codec._HEADER.pack(codec.MAGIC, codec.VERSION, code, len(dims), 0, len(payload), 0, 0)
    crc = codec.checksum(head, shape, payload)
    return codec._HEADER.pack(codec.MAGIC, codec.VERSION, code, len(dims), 0, len(payload), crc, 0) + shape + payload


def forge_bundle(entries: list[tuple[bytes, bytes]], count: int | None = None) -> bytes:
    """A bundle whose entry table checksum is right, whatever the entries hold."""
    parts, table = [], []
    for name, tensor in entries:
        entry = codec._ENTRY.pack(len(name), len(tensor)) + name
        table.append(entry)
        parts.append(entry + b"\0" * codec._pad8(len(name)) + tensor + b"\0" * codec._pad8(len(tensor)))
    count = len(entries) if count is None else count
    return codec._CONTAINER_HEADER.pack(codec.BUNDLE_MAGIC, codec.VERSION, count, codec.checksum(*table)) + b"".join(
        parts
    )


def decodes_or_refuses(decode: Callable[[bytes], Any], data: bytes) -> Any:
    try:
        return decode(data)
    except CodecError as exc:
        assert "\n" not in str(exc)
        return None


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from([b"", codec.MAGIC, codec.BUNDLE_MAGIC]))
def test_decode_of_arbitrary_bytes_is_a_value_or_a_codec_error(data: bytes, magic: bytes) -> None:
    raw = magic + data
    array = decodes_or_refuses(codec.decode, raw)
    if array is not None:  # it really was a tensor: encoding it again gives the same bytes
        assert codec.encode(array) == raw
    bundle = decodes_or_refuses(codec.decode_bundle, raw)
    if bundle is not None:
        assert codec.encode_bundle(bundle) == raw


@SETTINGS
@given(
    st.integers(0, 255),
    st.lists(st.one_of(st.integers(0, 4), st.integers(0, 2**64 - 1)), max_size=10),
    st.binary(max_size=96),
)
@example(code=1, dims=[0, 16897, 11678554, 11685063], payload=b"")  # numpy: "array is too big"
@example(code=7, dims=[2**63, 2], payload=b"")
def test_forged_tensor_headers_are_refused_or_exact(code: int, dims: list[int], payload: bytes) -> None:
    array = decodes_or_refuses(codec.decode, forge_tensor(code, dims, payload))
    if array is not None:
        assert list(array.shape) == dims and array.nbytes == len(payload)
        assert array.tobytes() == payload


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=12),
            st.one_of(
                st.binary(max_size=40),
                st.builds(
                    forge_tensor, st.integers(0, 11), st.lists(st.integers(0, 3), max_size=3), st.binary(max_size=24)
                ),
            ),
        ),
        max_size=4,
    ),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    st.integers(0, 64),
)
def test_forged_bundles_are_refused_or_exact(entries: list[tuple[bytes, bytes]], count: int | None, cut: int) -> None:
    raw = forge_bundle(entries, count)
    bundle = decodes_or_refuses(codec.decode_bundle, raw)
    if bundle is not None:
        assert codec.encode_bundle(bundle) == raw
    decodes_or_refuses(codec.decode_bundle, raw[: max(len(raw) - cut, 0)])


@SETTINGS
@given(
    hnp.arrays(
        st.sampled_from(WIRE_DTYPES).map(np.dtype),
        hnp.array_shapes(min_dims=0, max_dims=codec.MAX_NDIM, min_side=0, max_side=3),
    ),
    st.integers(0, 2**31),
    st.integers(0, 255),
)
def test_round_trip_and_any_single_byte_change_is_caught(array: np.ndarray, where: int, xor: int) -> None:
    raw = codec.encode(array)
    back = codec.decode(raw)
    assert back.dtype == array.dtype and back.shape == array.shape and back.tobytes() == array.tobytes()
    mutated = bytearray(raw)
    mutated[where % len(raw)] ^= xor or 1
    with pytest.raises(CodecError):
        codec.decode(bytes(mutated))


# --- the dataset loaders --------------------------------------------------------------

LIBSVM_ALPHABET = "0123456789 :.-+eEnaif#\t\n\r"
CSV_ALPHABET = '0123456789,.-+eEnaif \t\n\r"x'


def loads_or_refuses(load: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """Run a loader; it returns finite float32 rows and labels or raises a one-line DataError."""
    try:
        X, y, *_ = load()
    except DataError as exc:
        assert "\n" not in str(exc)
        return None
    assert y.dtype == np.float32 and y.ndim == 1 and len(y) >= 1
    values = X.data if isinstance(X, CSRMatrix) else X
    assert values.dtype == np.float32 and len(X) == len(y)
    assert np.isfinite(values).all() and np.isfinite(y).all()
    return X, y


@settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    st.one_of(st.text(LIBSVM_ALPHABET, max_size=200), st.text(max_size=80)),
    st.booleans(),
    st.sampled_from([None, 1, 5]),
)
@example(text="1 1:1e39\n", sparse=False, width=None)
@example(text="1 1:0.5 2:\n", sparse=True, width=None)
def test_libsvm_loader_never_crashes(scratch: Path, text: str, sparse: bool, width: int | None) -> None:
    path = scratch / "data.svm"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    loaded = loads_or_refuses(lambda: formats.load_libsvm(path, width, sparse=sparse))
    if loaded is not None and width is not None:
        assert loaded[0].shape[1] == width


@settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(CSV_ALPHABET, max_size=200), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))))
@example(text="1,1e39\n")
@example(text="a,b\n")
def test_csv_loader_never_crashes(scratch: Path, text: str) -> None:
    path = scratch / "data.csv"
    path.write_text(text, encoding="utf-8")
    for column in ("first", "last"):
        loaded = loads_or_refuses(lambda c=column: formats.load_csv(path, c))  # type: ignore[misc]
        if loaded is not None:
            assert loaded[0].shape[1] >= 1


def _valid_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, X=np.arange(12, dtype=np.float64).reshape(3, 4), y=np.array([0, 1, 0]))
    return buffer.getvalue()


def _valid_cifar_batch() -> bytes:
    batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 2]}
    return pickle.dumps(batch, protocol=2)


def _mutations(valid: bytes) -> st.SearchStrategy[bytes]:
    """A valid file cut short, with bytes overwritten, or with junk appended."""
    cut = st.integers(0, len(valid)).map(lambda n: valid[:n])
    overwritten = st.tuples(st.integers(0, len(valid) - 1), st.binary(min_size=1, max_size=8)).map(
        lambda t: valid[: t[0]] + t[1] + valid[t[0] + len(t[1]) :]
    )
    return st.one_of(cut, overwritten, st.binary(max_size=16).map(lambda b: valid + b), st.binary(max_size=200))


@settings(FEW, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_mutations(_valid_npz()))
def test_npz_loader_never_crashes(scratch: Path, data: bytes) -> None:
    path = scratch / "data.npz"
    path.write_bytes(data)
    loads_or_refuses(lambda: formats.load_npz(path))


@settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_mutations(_valid_cifar_batch()))
def test_cifar10_loader_never_crashes(scratch: Path, data: bytes) -> None:
    path = scratch / "data_batch_1"
    path.write_bytes(data)
    loads_or_refuses(lambda: formats.load_cifar10_batches([path]))


def test_npz_mutations_include_a_broken_zip() -> None:
    """The mutation strategy really reaches the zip layer (not only "file not found")."""
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(_valid_npz()[:40]))


# --- what comes back from storage: manifests, shards, job files ---------------------------

JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)
MANIFEST_FIELDS = [
    "name",
    "n_features",
    "shard_rows",
    "test_rows",
    "created",
    "version",
    "n_classes",
    "sample_shape",
    "format",
]


@st.composite
def manifests(draw: st.DrawFn) -> Any:
    """Mostly a real manifest with a few fields replaced by anything; sometimes anything at all."""
    good: dict[str, Any] = {
        "name": "d",
        "n_features": 4,
        "shard_rows": [3, 2],
        "test_rows": 1,
        "created": 0.0,
        "version": 1,
        "n_classes": 2,
        "sample_shape": None,
        "format": "dense",
    }
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON_VALUES)
    for name in draw(st.lists(st.sampled_from([*MANIFEST_FIELDS, "extra"]), max_size=3)):
        if draw(st.booleans()):
            good[name] = draw(JSON_VALUES)
        else:
            good.pop(name, None)
    return good


@SETTINGS
@given(manifests())
def test_manifest_reader_refuses_anything_malformed(manifest: Any) -> None:
    store = MemoryChannel()
    put_json(store, "datasets/d/manifest.json", manifest)
    try:
        read = shards.read_manifest(store, "d")
    except DataError as exc:
        assert "\n" not in str(exc)
        return
    assert read.n_features >= 1 and read.shards >= 1 and all(rows >= 1 for rows in read.shard_rows)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["indptr", "indices", "data", "shape", "y", "X"]),
        hnp.arrays(
            st.sampled_from(["<f4", "<i8", "<i4", "<f8"]).map(np.dtype),
            hnp.array_shapes(min_dims=1, max_dims=2, max_side=5),
            elements={"min_value": -3, "max_value": 8},
        ),
    ),
    st.sampled_from(["dense", "csr"]),
)
def test_shard_loader_refuses_anything_malformed(arrays: dict[str, np.ndarray], fmt: str) -> None:
    store = MemoryChannel()
    bundle = codec.encode_bundle(arrays)
    manifest = shards.Manifest(
        name="d",
        n_features=3,
        shard_rows=[4],
        test_rows=0,
        created=0.0,
        dataset_version="v1",
        shard_bytes=[len(bundle)],
        shard_hashes=[shards.content_hash(bundle)],  # vouched for: the decoder is what must refuse it
        format=fmt,
    )
    store.put(keys.dataset_shard("d", "v1", 0), bundle)
    try:
        X, y = shards.load_worker_data(store, manifest, 0, 1)
    except DataError as exc:
        assert "\n" not in str(exc)
        return
    assert X.shape == (4, 3) and y.shape == (4,)


@settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=120), st.text("{}[]:,\"' -\n0123456789.eE&*!abdtnsw", max_size=120)), st.booleans())
@example(text="dataset: d\ndataset: e\n", as_json=False)
@example(text='{"dataset": "d", "dataset": "e"}', as_json=True)
@example(text="[" * 5000, as_json=True)
def test_job_file_reader_never_crashes(scratch: Path, text: str, as_json: bool) -> None:
    path = scratch / ("job.json" if as_json else "job.yaml")
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        parse_job(read_job_file(path), str(path))
    except ConfigError as exc:
        assert "\n" not in str(exc)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["dataset", "workers", "model", "algorithm", "sync", "channel", "runtime", "name"]), JSON_VALUES
    )
)
def test_job_validation_of_any_mapping_is_a_spec_or_one_line(data: dict[str, Any]) -> None:
    try:
        job = parse_job(data, "job")
    except ConfigError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 4000
        return
    assert json.loads(job.to_json())["dataset"] == data["dataset"]
