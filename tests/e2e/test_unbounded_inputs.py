"""--memory-limit holds for any input, not only a regular file's size; text encodings are named.

``data prepare x --input /dev/zero --memory-limit 10M`` once grew to 24 GB before the kernel's
OOM killer took it, and a pipe of 5M valid rows reached 815 MB before refusing a 10 MB limit.
Reading now stops as soon as what was read passes the limit (or a line passes its bound), with
one line and exit 1, also under ``ulimit -v`` at twice the limit. UTF-16 input is named, and a
UTF-8 byte-order mark is read as nothing rather than as part of the first label.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lambdaml.data.formats import load_csv, load_libsvm
from lambdaml.errors import DataError

LIMIT_MB = 200
NOWHERE = "http://127.0.0.1:9"  # storage is never contacted: the input fails first


def prepare_under_ulimit(source: str) -> subprocess.CompletedProcess[str]:
    """``data prepare`` reading ``source``'s output on stdin, in a shell whose address space is twice the limit

    (the producer's own complaint about the closed pipe is not ours, and goes to /dev/null)."""
    command = (
        f"ulimit -v {2 * LIMIT_MB * 1000}; {source} 2>/dev/null | {sys.executable} -m lambdaml data prepare x "
        f"--input /dev/stdin --format libsvm --memory-limit {LIMIT_MB}M --shards 1 --endpoint-url {NOWHERE}"
    )
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300, check=False)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    return lines[0]


def test_dev_zero_is_refused_within_the_limit() -> None:
    line = one_line(prepare_under_ulimit("cat /dev/zero"))
    assert line.startswith("error: /dev/stdin") and ("over the 200.0 MB limit" in line or "a line longer" in line)


def test_an_endless_pipe_of_valid_rows_is_refused_at_the_limit() -> None:
    row = "1 " + " ".join(f"{i}:0.5" for i in range(1, 1001))  # a 10 kB LIBSVM row
    producer = f"{sys.executable} -c 'import sys\nrow = \"{row}\\n\" * 100\nwhile True: sys.stdout.write(row)'"
    line = one_line(prepare_under_ulimit(producer))
    assert "what was read so far takes" in line and f"over the {LIMIT_MB}.0 MB limit" in line


def test_dev_zero_as_a_regular_load_names_the_limit(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"over the 10\.0 MB limit"):
        load_libsvm(Path("/dev/zero"), memory_limit=10_000_000)


def test_utf16_input_is_named(tmp_path: Path) -> None:
    for name, data in (
        ("bom.csv", "1,2,3\n0,4,5\n".encode("utf-16")),
        ("plain.csv", "1,2,3\n0,4,5\n".encode("utf-16-le")),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(DataError, match="UTF-16"):
            load_csv(path)


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_label(tmp_path: Path) -> None:
    svm, csv = tmp_path / "bom.svm", tmp_path / "bom.csv"
    svm.write_bytes(b"\xef\xbb\xbf-1 1:0.5\n1 2:1.5\n")
    csv.write_bytes(b"\xef\xbb\xbf1,2,3\n0,4,5\n")
    X, y = load_libsvm(svm)
    assert y.tolist() == [-1.0, 1.0] and X.shape == (2, 2)
    X, y = load_csv(csv)
    assert np.array_equal(y, [1.0, 0.0])
