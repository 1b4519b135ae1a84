"""A numpy model as an ONNX graph, written node by node (no converter package, no pickle).

Input ``X``: float32 rows, as training read them; the graph casts them to float64 and computes
exactly what the model's ``predict`` does (margins, scores or squared distances), so
onnxruntime's labels equal ``TrainedModel.predict`` row for row. Outputs: ``label`` (the
training file's label values, or KMeans' cluster ids), and ``probabilities`` (LR, softmax),
``scores`` (the SVMs) or ``distances`` (KMeans).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaml.errors import ConfigError, DataError

if TYPE_CHECKING:
    from lambdaml.trained.exportable import Exportable

INSTALL_HINT = "pip install onnx"
OPSET = 17
IR_VERSION = 8  # what onnxruntime releases of the last few years all read


def write_onnx(trained: Exportable, path: Path) -> Path:
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ConfigError(f"ONNX export needs the onnx package: {INSTALL_HINT}") from None
    if trained.is_torch:
        raise ConfigError(f"model {trained.name!r} is a torch model: export it as safetensors (to_torch())")
    d = trained.n_features
    params = np.asarray(trained.params, dtype=np.float64)
    nodes: list[Any] = [helper.make_node("Cast", ["X"], ["X64"], to=TensorProto.DOUBLE)]
    constants: dict[str, np.ndarray[Any, Any]] = {}
    name = trained.name
    if name == "kmeans":
        k = params.size // d
        centroids = params.reshape(k, d)
        constants.update(
            centroids_t=centroids.T.copy(),
            centroid_norms=(centroids * centroids).sum(axis=1)[None, :],
            minus_two=np.array(-2.0),
            row_axis=np.array([1], dtype=np.int64),
        )
        nodes += [
            helper.make_node("Mul", ["X64", "X64"], ["squares"]),
            helper.make_node("ReduceSum", ["squares", "row_axis"], ["row_norms"], keepdims=1),
            helper.make_node("MatMul", ["X64", "centroids_t"], ["cross"]),
            helper.make_node("Mul", ["cross", "minus_two"], ["cross2"]),
            helper.make_node("Add", ["row_norms", "cross2"], ["partial"]),
            helper.make_node("Add", ["partial", "centroid_norms"], ["distances"]),
            helper.make_node("ArgMin", ["distances"], ["label"], axis=1, keepdims=0),
        ]
        outputs: list[tuple[str, int, list[str | int]]] = [
            ("label", TensorProto.INT64, ["N"]),
            ("distances", TensorProto.DOUBLE, ["N", k]),
        ]
    else:
        classes = trained.classes_
        constants["classes"] = classes
        label_type = TensorProto.INT64 if classes.dtype == np.int64 else TensorProto.DOUBLE
        if name in ("lr", "svm"):
            constants.update(
                weights=params[:-1].reshape(d, 1),
                bias=params[-1:],
                zero=np.array(0.0),
                column_axis=np.array([1], dtype=np.int64),
            )
            nodes += [
                helper.make_node("MatMul", ["X64", "weights"], ["product"]),
                helper.make_node("Add", ["product", "bias"], ["margin"]),  # N x 1
                helper.make_node("Greater", ["margin", "zero"], ["positive"]),
                helper.make_node("Cast", ["positive"], ["index_2d"], to=TensorProto.INT64),
                helper.make_node("Squeeze", ["index_2d", "column_axis"], ["index"]),
                helper.make_node("Gather", ["classes", "index"], ["label"], axis=0),
            ]
            if name == "lr":
                constants["one"] = np.array(1.0)
                nodes += [
                    helper.make_node("Sigmoid", ["margin"], ["p_positive"]),
                    helper.make_node("Sub", ["one", "p_positive"], ["p_negative"]),
                    helper.make_node("Concat", ["p_negative", "p_positive"], ["probabilities"], axis=1),
                ]
                extra: tuple[str, int, list[str | int]] = ("probabilities", TensorProto.DOUBLE, ["N", 2])
            else:
                nodes.append(helper.make_node("Squeeze", ["margin", "column_axis"], ["scores"]))
                extra = ("scores", TensorProto.DOUBLE, ["N"])
        elif name in ("softmax", "multiclass_svm"):
            c = trained.card.n_classes
            constants.update(weights=params[:-c].reshape(d, c), bias=params[-c:])
            nodes += [
                helper.make_node("MatMul", ["X64", "weights"], ["product"]),
                helper.make_node("Add", ["product", "bias"], ["scores"]),
                helper.make_node("ArgMax", ["scores"], ["index"], axis=1, keepdims=0),
                helper.make_node("Gather", ["classes", "index"], ["label"], axis=0),
            ]
            if name == "softmax":
                nodes.append(helper.make_node("Softmax", ["scores"], ["probabilities"], axis=1))
                extra = ("probabilities", TensorProto.DOUBLE, ["N", c])
            else:
                extra = ("scores", TensorProto.DOUBLE, ["N", c])
        else:
            raise ConfigError(f"model {name!r} has no ONNX export")
        outputs = [("label", label_type, ["N"]), extra]
    graph = helper.make_graph(
        nodes,
        f"lambdaml_{name}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", d])],
        [helper.make_tensor_value_info(out, kind, shape) for out, kind, shape in outputs],
        initializer=[numpy_helper.from_array(np.asarray(value), name=key) for key, value in constants.items()],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="lambdaml",
        doc_string=f"{name} trained by LambdaML job {trained.job_id}",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(model, str(path))
    except OSError as exc:
        raise DataError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


__all__ = ["write_onnx"]
