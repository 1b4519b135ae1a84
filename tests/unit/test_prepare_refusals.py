"""data prepare refuses, in one line, a seed numpy cannot take and a dataset with no features.

``data prepare --seed -1`` was a ValueError traceback from numpy; an NPZ of 0 columns and a
LIBSVM file of labels only prepared with exit 0, as datasets no model can learn from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lambdaml import cli
from lambdaml.channels.memory import MemoryChannel
from lambdaml.data.prepare import DatasetSource, prepare_dataset
from lambdaml.errors import DataError


def test_a_negative_or_huge_seed_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d.csv"
    data.write_text("1,2\n0,3\n")
    for seed in ("-1", str(2**32)):
        argv = ["data", "prepare", "x", "--input", str(data), "--shards", "1", "--seed", seed]
        assert cli.main([*argv, "--endpoint-url", "http://127.0.0.1:9"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: --seed must be between 0 and 4294967295, not {seed}"]


@pytest.mark.parametrize("kind", ["npz", "libsvm"])
def test_a_dataset_with_no_features_is_refused(tmp_path: Path, kind: str) -> None:
    if kind == "npz":
        path = tmp_path / "empty.npz"
        np.savez(path, X=np.zeros((4, 0), dtype=np.float32), y=np.array([0.0, 1.0, 0.0, 1.0]))
    else:
        path = tmp_path / "labels.svm"
        path.write_text("1\n0\n1\n0\n")
    store = MemoryChannel()
    with pytest.raises(DataError, match="has no features: each row is only a label"):
        prepare_dataset(store, "nothing", DatasetSource(inputs=(str(path),)), shards=1)
    assert store.list("") == []
