"""What the divergence check costs next to the work a worker does anyway on the same vector.

Run: ``.venv/bin/python bench/finite_check.py``. Every vector a worker sends is first checked
for NaN and infinity (``lambdaml.comm.base.all_finite``: one sum, and an exact look only when
the sum is not finite). The reference is ``codec.encode`` of the same vector, which every
send does (one copy and a CRC-32). Prints, per vector size d, the median time of each over
repeated runs and the ratio check / encode; writes bench/results/finite_check.csv.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from common import median_ms

from lambdaml import codec
from lambdaml.comm.base import all_finite

SIZES = [10_000, 100_000, 1_000_000, 10_000_000]
RESULTS = Path(__file__).resolve().parent / "results" / "finite_check.csv"


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'d':>10} {'dtype':>8} {'check ms':>9} {'encode ms':>10} {'ratio':>6}")
    for d in SIZES:
        for dtype in (np.float64, np.float32):
            x = rng.standard_normal(d).astype(dtype)
            repeats = 200 if d <= 100_000 else 20
            check = median_ms(lambda x=x: all_finite(x), repeats)  # type: ignore[misc]
            encode = median_ms(lambda x=x: codec.encode(x), repeats)  # type: ignore[misc]
            rows.append({"d": d, "dtype": np.dtype(dtype).name, "check_ms": check, "encode_ms": encode})
            print(f"{d:>10} {np.dtype(dtype).name:>8} {check:>9.3f} {encode:>10.3f} {check / encode:>6.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
