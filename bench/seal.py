"""What binding a value to its key, and authenticating it, costs next to encoding it.

Run: ``.venv/bin/python bench/seal.py``. Every value a worker puts on a channel is encoded
(``codec.encode``: one copy and a CRC-32) and then sealed under its key (``lambdaml.seal``):
bound (a SHA-256 of the key only), or with a MAC (HMAC-SHA256 over the key and the value,
under the job's secret). Reading opens the seal (the tag is checked, the value copied out)
and decodes. The reference is the codec on the same vector, measured in the same run.

Prints, per vector size d (float64), the median time of encode, decode, seal and open in
both modes, and the ratios (seal + open) / (encode + decode); writes
bench/results/seal.csv and bench/results/seal.png.
"""

from __future__ import annotations

import numpy as np
from common import RESULTS, median_ms, report

from lambdaml import codec, keys
from lambdaml.seal import Sealer, new_secret

SIZES = [10_000, 100_000, 1_000_000, 10_000_000]
KEY = keys.comm_key("bench-job", 123, "sr", rank=3, chunk=7, attempt=1)


def main() -> None:
    rng = np.random.default_rng(0)
    bound, mac = Sealer(), Sealer(new_secret())
    header = ["d", "encode ms", "decode ms", "bound ms", "MAC ms", "bound / codec", "MAC / codec"]
    rows: list[list[str]] = []
    ratios: dict[str, list[float]] = {"bound": [], "MAC": []}
    for d in SIZES:
        x = rng.standard_normal(d)
        value = codec.encode(x)
        repeats = 200 if d <= 100_000 else 15
        encode = median_ms(lambda x=x: codec.encode(x), repeats)  # type: ignore[misc]
        decode = median_ms(lambda v=value: codec.decode(v), repeats)  # type: ignore[misc]
        codec_ms = encode + decode
        cost: dict[str, float] = {}
        for name, sealer in (("bound", bound), ("MAC", mac)):
            sealed = sealer.seal(KEY, value)
            assert sealer.open(KEY, sealed) == value
            seal_ms = median_ms(lambda s=sealer, v=value: s.seal(KEY, v), repeats)  # type: ignore[misc]
            open_ms = median_ms(lambda s=sealer, v=sealed: s.open(KEY, v), repeats)  # type: ignore[misc]
            cost[name] = seal_ms + open_ms
            ratios[name].append(cost[name] / codec_ms)
        rows.append(
            [
                f"{d:.0e}",
                f"{encode:.3f}",
                f"{decode:.3f}",
                f"{cost['bound']:.3f}",
                f"{cost['MAC']:.3f}",
                f"{cost['bound'] / codec_ms:.2f}",
                f"{cost['MAC'] / codec_ms:.2f}",
            ]
        )
    report("seal", header, rows)
    _plot(ratios)


def _plot(ratios: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    for name, values in ratios.items():
        axes.plot(SIZES, values, marker="o", label=f"{name} seal + open")
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="encode + decode")
    axes.set_xscale("log")
    axes.set_xlabel("values per vector (float64)")
    axes.set_ylabel("time / codec time")
    axes.set_title("Binding and authenticating a value, against encoding it")
    axes.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "seal.png", dpi=120)


if __name__ == "__main__":
    main()
