"""Peak memory of reading a Parquet table, against the float32 matrix it becomes.

Run: ``.venv/bin/python bench/parquet_memory.py [--rows N] [--group-rows N]``. It writes a
table of ``--rows`` rows x 28 float64 features and an integer label (Higgs' shape) in row
groups of ``--group-rows`` (64k: 31 groups at the default 2M rows), and the same rows as an
NPZ archive. Each loader then reads its file in a fresh subprocess, which reports its peak
resident memory (/proc's VmHWM) before and after the load:

- ``load_parquet``: what ``data prepare --input table.parquet`` runs, batch by batch into a
  preallocated float32 matrix;
- ``load_parquet``, one row group: the table's first row group alone, as a file of its own:
  what the reader costs beyond its matrix when it has one group to read (its runtime and one
  group in flight);
- ``load_npz``: the same rows from NPZ (float64 read whole, then converted);
- ``pyarrow read_table``: the whole table read at once, then converted (what the loader avoids).

The reference is the float32 matrix and labels every loader ends with (rows x 29 x 4 bytes);
*load* is the load's peak above the process's own before it, *beyond* what it holds beyond
that matrix, and *ratio* load over matrix. Writes ``bench/results/parquet_memory.csv``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import report

MIB = 1024 * 1024
FEATURES = 28

# Each child: import what it needs, note its peak, load, note its peak again.
CHILD = """
import sys
import numpy as np
import pyarrow.parquet as pq
from lambdaml.data.formats import load_npz, load_parquet

def hwm():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))

kind, path = sys.argv[1], sys.argv[2]
before = hwm()
if kind == "load_parquet":
    X, y, _ = load_parquet(path)
elif kind == "load_npz":
    X, y, _ = load_npz(path)
else:
    table = pq.read_table(path)
    y = table.column("label").to_numpy().astype(np.float32)
    X = np.column_stack([table.column(f"f{i}").to_numpy() for i in range(28)]).astype(np.float32)
    del table
print(before, hwm(), X.shape[0], float(X[-1, -1]))
"""


def write_parquet(path: Path, X: np.ndarray, y: np.ndarray, group_rows: int) -> int:
    """The rows as a Parquet table, written a row group at a time; returns its row groups."""
    schema = pa.schema([("label", pa.int64()), *((f"f{i}", pa.float64()) for i in range(FEATURES))])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, len(y), group_rows):
            stop = min(start + group_rows, len(y))
            columns = {"label": y[start:stop], **{f"f{i}": X[start:stop, i] for i in range(FEATURES)}}
            writer.write_table(pa.table(columns, schema=schema), row_group_size=group_rows)
    return int(pq.ParquetFile(path).num_row_groups)


def measure(kind: str, path: Path) -> tuple[float, float]:
    """(peak MiB before the load, peak MiB after it) of a fresh process that loads ``path``."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(path)], check=True, capture_output=True, text=True, timeout=600
    )
    before, after, _, _ = done.stdout.split()
    return float(before), float(after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the table (default: %(default)s)")
    parser.add_argument("--group-rows", type=int, default=65_536, help="rows per row group (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.rows, FEATURES))
    y = rng.integers(0, 2, args.rows)
    with tempfile.TemporaryDirectory(prefix="parquet-memory-") as tmp:
        parquet, one_group, npz = Path(tmp) / "table.parquet", Path(tmp) / "group.parquet", Path(tmp) / "table.npz"
        groups = write_parquet(parquet, X, y, args.group_rows)
        write_parquet(one_group, X[: args.group_rows], y[: args.group_rows], args.group_rows)
        np.savez(npz, X=X, y=y)
        del X, y
        group_mib = args.group_rows * (FEATURES + 1) * 8 / MIB
        print(
            f"{args.rows} rows x {FEATURES} float64 features + label: {groups} row groups of {args.group_rows} rows "
            f"({group_mib:.1f} MiB each in Arrow); Parquet {parquet.stat().st_size / MIB:.0f} MiB, "
            f"NPZ {npz.stat().st_size / MIB:.0f} MiB\n"
        )
        rows = []
        for kind, reader, path, n in (
            ("load_parquet", "load_parquet", parquet, args.rows),
            ("load_parquet, one row group", "load_parquet", one_group, min(args.rows, args.group_rows)),
            ("load_npz", "load_npz", npz, args.rows),
            ("pyarrow read_table", "read_table", parquet, args.rows),
        ):
            before, after = measure(reader, path)
            matrix = n * (FEATURES + 1) * 4 / MIB
            load = after - before
            rows.append(
                [
                    kind,
                    str(n),
                    f"{after:.0f}",
                    f"{load:.0f}",
                    f"{matrix:.0f}",
                    f"{load - matrix:.0f}",
                    f"{load / matrix:.2f}",
                ]
            )
    report(
        "parquet_memory",
        ["reader", "rows", "peak RSS MiB", "load MiB", "float32 MiB", "beyond MiB", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
