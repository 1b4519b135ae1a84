"""Parquet input: a label column and numeric features, read batch by batch with pyarrow.

What is read (defaults, named columns, several row groups, integer and boolean columns) and
what is refused in one line naming the column: strings, lists, nulls, non-finite values,
unknown names, a truncated or damaged file, a table past the memory limit, and pyarrow
missing. pyarrow stays out of the modules workers import.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lambdaml.data.formats import ParquetColumns, load_parquet, parquet_columns
from lambdaml.data.prepare import DatasetSource, load_source
from lambdaml.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def table(path: Path, columns: dict[str, Any], **options: Any) -> Path:
    pq.write_table(pa.table(columns), path, **options)
    return path


def refused(path: Path, words: str, **options: Any) -> str:
    with pytest.raises(DataError) as caught:
        load_parquet(path, **options)
    message = str(caught.value)
    assert words in message and "\n" not in message, message
    return message


def test_default_label_and_features_in_file_order(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"a": [1.5, 2.5], "label": [1, 0], "n": [3, 4], "ok": [True, False]})
    X, y, columns = load_parquet(path)
    assert columns == ParquetColumns("label", ("a", "n", "ok"))
    assert X.dtype == np.float32 and y.dtype == np.float32
    np.testing.assert_array_equal(X, [[1.5, 3, 1], [2.5, 4, 0]])
    np.testing.assert_array_equal(y, [1, 0])


def test_named_label_and_features_in_the_order_given(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"a": [1.0, 2], "b": [3, 4], "c": [5, 6], "y": [0, 1]})
    X, y, columns = load_parquet(path, "y", ["c", "a"])
    assert columns == ParquetColumns("y", ("c", "a"))
    np.testing.assert_array_equal(X, [[5, 1], [6, 2]])
    np.testing.assert_array_equal(y, [0, 1])


def test_columns_that_are_not_numbers_are_left_out_by_default_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1], "city": ["x", "y"], "a": [1.0, 2], "tags": [[1], [2]]})
    with caplog.at_level(logging.WARNING):
        X, _, columns = load_parquet(path)
    assert columns.features == ("a",) and X.shape == (2, 1)
    assert "left out of the features, not numbers: 'city' (strings), 'tags' (lists)" in caplog.text


def test_many_row_groups_read_as_one_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = 70_000  # more than a batch, in row groups of 9,000: batches never span them
    data = {"label": rng.integers(0, 3, rows), **{f"f{i}": rng.standard_normal(rows) for i in range(5)}}
    data["i"] = rng.integers(-1000, 1000, rows, dtype=np.int32)
    path = table(tmp_path / "t.parquet", data, row_group_size=9_000)
    assert pq.ParquetFile(path).num_row_groups == 8
    X, y, _ = load_parquet(path)
    expected = np.column_stack([data[f"f{i}"] for i in range(5)] + [data["i"]]).astype(np.float32)
    np.testing.assert_array_equal(X, expected)
    np.testing.assert_array_equal(y, data["label"].astype(np.float32))


def test_prepare_reads_parquet_by_suffix_and_format(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1, 0], "a": [1.0, 2, 3]})
    X, y, shape = load_source(DatasetSource(inputs=(str(path),)))
    assert X.shape == (3, 1) and shape is None
    other = table(tmp_path / "t.data", {"target": [0, 1, 0], "a": [1.0, 2, 3], "b": [4, 5, 6]})
    X, y, _ = load_source(DatasetSource(inputs=(str(other),), format="parquet", label="target", features=("b",)))
    np.testing.assert_array_equal(X, [[4], [5], [6]])
    np.testing.assert_array_equal(y, [0, 1, 0])


# --- refused in one line, naming the column and what to do --------------------------------


def test_a_string_column_named_as_a_feature(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1], "city": ["x", "y"]})
    refused(
        path,
        "column 'city' holds strings: encode it as numbers, or leave it out of --features",
        features=["city"],
    )


def test_a_list_column_named_as_a_feature(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1], "v": [[1.0, 2.0], [3.0]]})
    refused(
        path, "column 'v' holds lists: spread it into columns of numbers, or leave it out of --features", features=["v"]
    )


def test_a_string_label(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": ["cat", "dog"], "a": [1.0, 2]})
    refused(path, "label column 'label' holds strings; labels must be numbers")


def test_a_timestamp_feature(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1], "t": pa.array([1, 2], pa.timestamp("s"))})
    refused(path, "column 't' holds timestamp[ms] values: cast it to numbers", features=["t"])


@pytest.mark.parametrize("column", ["a", "label"])
def test_a_null_names_its_column_and_row(tmp_path: Path, column: str) -> None:
    values: dict[str, list[Any]] = {"label": [0, 1, 1, 0] * 3, "a": [1.0, 2, 3, 4] * 3}
    values[column][9] = None
    path = table(tmp_path / "t.parquet", values, row_group_size=4)
    refused(path, f"column {column!r} has a null (missing value) at row index 9: fill or drop the missing values")


@pytest.mark.parametrize(("value", "where"), [(float("nan"), "row index 1"), (1e300, "row index 1")])
def test_a_non_finite_value(tmp_path: Path, value: float, where: str) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1], "a": [1.0, value]})
    refused(path, f"column 'a' has a NaN or infinite value (or one beyond float32's range) at {where}")


def test_unknown_label_and_feature_columns(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"y": [0, 1], "a": [1.0, 2]})
    refused(path, "no column named 'label'; name the label column with --label (columns: 'y', 'a')")
    refused(path, "no column 'target' for --label (columns: 'y', 'a')", label="target")
    refused(path, "no column 'b' for --features (columns: 'y', 'a')", label="y", features=["a", "b"])
    refused(path, "--features names the label column 'y'", label="y", features=["y"])
    refused(table(tmp_path / "u.parquet", {"label": [0], "s": ["x"]}), "no column of numbers besides the label 'label'")


def test_a_truncated_file(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1] * 500, "a": np.arange(1000.0)})
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    message = refused(path, "cannot read")
    assert message.startswith(f"cannot read {str(path)!r} as Parquet: ")


def test_a_damaged_page(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0, 1] * 500, "a": np.arange(1000.0)}, compression="none")
    raw = bytearray(path.read_bytes())
    raw[8:400] = b"\xff" * 392  # the first pages' headers, with the footer intact
    path.write_bytes(bytes(raw))
    refused(path, "as Parquet: ")


def test_not_a_parquet_file_and_a_missing_one(tmp_path: Path) -> None:
    (tmp_path / "t.parquet").write_text("label,a\n0,1\n")
    refused(tmp_path / "t.parquet", "as Parquet: Parquet magic bytes not found")
    refused(tmp_path / "absent.parquet", "not found")


def test_past_the_memory_limit_before_allocating(tmp_path: Path) -> None:
    path = table(tmp_path / "t.parquet", {"label": np.zeros(10_000), "a": np.ones(10_000), "b": np.ones(10_000)})
    refused(path, "10000 rows x 2 features as float32", memory_limit=100_000)
    X, _, _ = load_parquet(path, memory_limit=10**7)
    assert X.shape == (10_000, 2)


def test_without_pyarrow_it_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = table(tmp_path / "t.parquet", {"label": [0], "a": [1.0]})
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import fails as if it were not installed
    refused(path, "reading Parquet needs pyarrow: pip install 'lambdaml[data]'")
    with pytest.raises(DataError, match="pip install 'lambdaml\\[data\\]'"):
        parquet_columns(path)


def test_workers_and_prepare_do_not_import_pyarrow() -> None:
    code = (
        "import sys, lambdaml.data.prepare, lambdaml.data.formats, lambdaml.runtime.worker, lambdaml.cli; "
        "assert 'pyarrow' not in sys.modules, 'pyarrow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
