"""What the codec's checksum costs: CRC-32C (format 2) against zlib's CRC-32 (format 1).

Run: ``.venv/bin/python bench/checksum.py``. Every value is checksummed once when it is
encoded and once when it is decoded, so the checksum is most of the codec's per-byte CPU
after its one copy. For float64 vectors of d values, prints the median time of each
checksum over the encoded value, and of ``encode`` + ``decode`` (format 2), with the ratios
CRC-32C / CRC-32 and the codec time format 1 would take (its encode + decode with the
CRC-32C passes replaced by CRC-32 passes) against format 2's, all from the same run;
writes bench/results/checksum.csv.
"""

from __future__ import annotations

import numpy as np
from common import median_ms, report

from lambdaml import codec

SIZES = [10_000, 100_000, 1_000_000, 10_000_000]


def main() -> None:
    rng = np.random.default_rng(0)
    header = ["d", "CRC-32 ms", "CRC-32C ms", "CRC-32C / CRC-32", "codec ms", "codec / format 1's"]
    rows: list[list[str]] = []
    for d in SIZES:
        value = codec.encode(rng.standard_normal(d))
        view = memoryview(value)
        repeats = 200 if d <= 100_000 else 15
        old = median_ms(lambda v=view: codec.checksum(v, version=1), repeats)  # type: ignore[misc]
        new = median_ms(lambda v=view: codec.checksum(v), repeats)  # type: ignore[misc]
        x = codec.decode(value)
        both = median_ms(lambda x=x: codec.decode(codec.encode(x)), repeats)  # type: ignore[misc]
        format_1 = both - 2 * new + 2 * old  # the same passes, each checksum a CRC-32 instead
        ratios = f"{new / old:.2f}", f"{both:.3f}", f"{both / format_1:.2f}"
        rows.append([f"{d:.0e}", f"{old:.3f}", f"{new:.3f}", *ratios])
    report("checksum", header, rows)


if __name__ == "__main__":
    main()
