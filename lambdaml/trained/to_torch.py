"""Torch models out as their ``nn.Module`` and safetensors weights; any model's flat parameters as NPZ.

safetensors holds named tensors and nothing executable, so loading it runs no code (unlike a
pickled ``torch.save``). ``to_torch`` rebuilds the job's architecture and loads the weights.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaml.errors import ConfigError, DataError

if TYPE_CHECKING:
    from lambdaml.arrays import Array
    from lambdaml.trained.exportable import Exportable


def to_torch(trained: Exportable) -> Any:
    """The job's ``nn.Module`` with the trained weights, in eval mode: the caller's own copy.

    A copy, because the model predicts through its module and loads its parameters into it on
    each call: a shared module would lose the caller's fine-tuning to the next ``predict``.
    """
    if not trained.is_torch:
        raise ConfigError(f"model {trained.name!r} is a numpy model: use to_sklearn() or to_onnx()")
    import torch
    from torch.nn.utils import vector_to_parameters

    module = copy.deepcopy(trained.model.module)  # type: ignore[attr-defined]
    vector_to_parameters(torch.tensor(trained.params, dtype=torch.float32), module.parameters())
    return module.eval()


def write_safetensors(trained: Exportable, path: Path) -> Path:
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise ConfigError("safetensors export needs: pip install safetensors") from None
    module = to_torch(trained)
    tensors = {name: tensor.detach().contiguous() for name, tensor in module.state_dict().items()}
    metadata = {"lambdaml.model": trained.name, "lambdaml.job_id": trained.job_id}
    return _written(path, lambda: save_file(tensors, str(path), metadata=metadata))


def write_npz(trained: Exportable, path: Path) -> Path:
    """The flat parameter vector and what it is: ``params``, ``n_features``, ``classes`` (numpy's own format)."""
    params, n_features = np.asarray(trained.params), np.array(trained.n_features)
    classes = trained.classes_ if trained.supervised else None
    # Through an open file: given a name, np.savez would write NAME.npz instead of the path asked for.
    return _written(path, lambda: _savez(path, params, n_features, classes))


def _savez(path: Path, params: Array, n_features: Array, classes: Array | None) -> None:
    with path.open("wb") as out:
        if classes is None:
            np.savez(out, params=params, n_features=n_features)
        else:
            np.savez(out, params=params, n_features=n_features, classes=classes)


def _written(path: Path, write: Any) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write()
    except OSError as exc:
        raise DataError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


__all__ = ["to_torch", "write_npz", "write_safetensors"]
