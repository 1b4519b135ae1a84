"""``lambdaml predict``, ``evaluate`` and ``export``: use a finished job's model (lambdaml.trained does the work).

The model is found by job id in the data bucket (``--stack``, or ``--bucket``/``--endpoint-url``),
as the other job commands find a job. Rows come from a file in any format ``data prepare`` reads,
local or ``s3://``, or for ``evaluate`` from a prepared dataset's test split.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaml.cli.output import console, new_table, plural, print_json
from lambdaml.errors import ConfigError, DataError

if TYPE_CHECKING:
    from lambdaml.arrays import Array
    from lambdaml.config import StorageSpec
    from lambdaml.trained import TrainedModel
    from lambdaml.trained.metrics import Evaluation

#: Rows predicted and written at a time: bounds the memory of scores and output rows.
PREDICT_BATCH_ROWS = 65_536
OUTPUT_SUFFIXES = (".csv", ".parquet")


def _storage(args: argparse.Namespace) -> StorageSpec:
    from lambdaml.cli.data import _storage as data_storage

    return data_storage(args)


def _model(args: argparse.Namespace) -> TrainedModel:
    from lambdaml.trained import load_model

    return load_model(args.job_id, storage=_storage(args))


def _source(args: argparse.Namespace, path: str, model: TrainedModel) -> Any:
    from lambdaml.data.prepare import DatasetSource

    return DatasetSource(
        inputs=(path,),
        format=args.format,
        label_column=args.label_column,
        n_features=model.n_features if _is_libsvm(path, args.format) else None,
        sparse=model.card.data_format == "csr" and _is_libsvm(path, args.format),
        label=args.label,
        features=args.features,
    )


def _is_libsvm(path: str, fmt: str | None) -> bool:
    from lambdaml.data.prepare import file_format

    return file_format(path, fmt) == "libsvm"


def _rows(args: argparse.Namespace, path: str, model: TrainedModel) -> tuple[Any, Array]:
    """Every row of a data file (local or s3://) and its labels, as ``data prepare`` reads it."""
    from lambdaml.cli.data import _memory_limit
    from lambdaml.data.prepare import load_source
    from lambdaml.data.remote import local_files

    with local_files([path], _storage(args)) as (local,):
        X, y, _ = load_source(_source(args, local, model), memory_limit=_memory_limit(args.memory_limit))
    return X, y


# --- predict ------------------------------------------------------------------------


def cmd_predict(args: argparse.Namespace) -> int:
    """Each input row's predicted label (and class probabilities where the model has them)."""
    if args.batch_rows < 1:
        raise ConfigError("--batch-rows must be at least 1")
    model = _model(args)
    out = Path(args.output) if args.output else None
    if out is not None and out.suffix.lower() not in OUTPUT_SUFFIXES:
        raise ConfigError(f"--output {args.output}: write predictions to a .csv or .parquet file")
    header = ["prediction", *_probability_columns(model)]
    with _input_batches(args, model) as batches:
        rows = _write(out, header, _prediction_batches(model, batches))
    if out is not None:
        console.print(f"{rows} predictions of job {model.job_id} ({model.name}) -> {out}")
    return 0


@contextmanager
def _input_batches(args: argparse.Namespace, model: TrainedModel) -> Iterator[Iterator[Any]]:
    """The rows to predict, ``--batch-rows`` at a time: a Parquet table is streamed a record batch at a time
    (its label column, if any, skipped); other formats are read as data prepare reads them."""
    from lambdaml import keys
    from lambdaml.data.prepare import file_format

    path = args.input
    is_file = keys.is_s3_uri(path) or Path(path).exists()
    if is_file and file_format(path, args.format) == "parquet":
        from lambdaml.data.formats import iter_parquet_features
        from lambdaml.data.remote import local_files

        with local_files([path], _storage(args)) as (local,):
            yield _rebatched(iter_parquet_features(local, args.label, args.features), args.batch_rows)
        return
    X, _ = _labelled_rows(args, path, model)
    yield (X[start : start + args.batch_rows] for start in range(0, X.shape[0], args.batch_rows))


def _rebatched(parts: Iterator[Array], rows: int) -> Iterator[Array]:
    """Record batches cut into pieces of at most ``rows`` rows."""
    for part in parts:
        for start in range(0, len(part), rows):
            yield part[start : start + rows]


def _probability_columns(model: TrainedModel) -> list[str]:
    if not model.supervised or model.name in ("svm", "multiclass_svm"):
        return []
    return [f"probability_{c}" for c in model.classes_]


def _prediction_batches(model: TrainedModel, batches: Iterator[Any]) -> Iterator[list[Array]]:
    with_probabilities = bool(_probability_columns(model))
    for part in batches:
        columns = [model.predict(part)]
        if with_probabilities:
            probabilities = model.predict_proba(part)
            columns += [probabilities[:, i] for i in range(probabilities.shape[1])]
        yield columns


def _write(out: Path | None, header: list[str], batches: Iterator[list[Array]]) -> int:
    """Write batches of columns as CSV (stdout without a file) or Parquet; return the rows written.

    A file is written beside its name and renamed when whole, so a failure leaves no half file.
    """
    if out is None:
        return _write_csv(sys.stdout, header, batches)
    partial = out.with_name(f".{out.name}.partial")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".parquet":
            rows = _write_parquet(partial, header, batches)
        else:
            with partial.open("w", newline="") as handle:
                rows = _write_csv(handle, header, batches)
        partial.replace(out)
    except OSError as exc:
        raise DataError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return rows


def _write_csv(handle: Any, header: list[str], batches: Iterator[list[Array]]) -> int:
    rows = 0
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(header)
    for columns in batches:
        writer.writerows(zip(*(c.tolist() for c in columns), strict=True))
        rows += len(columns[0])
    return rows


def _write_parquet(out: Path, header: list[str], batches: Iterator[list[Array]]) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("--output .parquet needs pyarrow: pip install 'lambdaml[data]'") from None
    rows = 0
    writer: Any = None
    try:
        for columns in batches:
            table = pa.table(dict(zip(header, columns, strict=True)))
            if writer is None:
                writer = pq.ParquetWriter(str(out), table.schema)
            writer.write_table(table)
            rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows


# --- evaluate -----------------------------------------------------------------------


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Accuracy, loss, ROC-AUC and confusion (binary) or per-class figures (multiclass) on a test set."""
    from lambdaml.trained.metrics import evaluate

    model = _model(args)
    X, y = _labelled_rows(args, args.test, model)
    report = evaluate(model, X, y)
    report["test"] = args.test
    if args.output == "json":
        print_json(report)
    else:
        print_evaluation(report)
    return 0


def _labelled_rows(args: argparse.Namespace, test: str, model: TrainedModel) -> tuple[Any, Array]:
    """A data file's rows, or a prepared dataset's test split with its labels as the file named them."""
    from lambdaml import keys

    if keys.is_s3_uri(test) or Path(test).exists():
        return _rows(args, test, model)
    if args.format is not None:
        raise ConfigError(f"{test}: no such file (--format applies to a file)")
    from lambdaml.data.shards import load_test, read_manifest
    from lambdaml.storage import open_storage

    try:
        keys.check_name(test, "dataset name")
    except ConfigError:
        raise DataError(f"{test}: no such file, and not a dataset name") from None
    store = open_storage(_storage(args))
    try:
        manifest = read_manifest(store, test)
    except DataError as exc:
        raise DataError(f"{test}: no such file, and {exc}") from None
    split = load_test(store, manifest)
    if split is None:
        raise DataError(f"dataset {test!r} has no test split (prepare it with --test FILE or --test-fraction)")
    X, y = split
    values = np.asarray(manifest.label_values, dtype=np.float64) if manifest.label_values else None
    return X, (values[y.astype(np.int64)] if values is not None and model.supervised else y)


def print_evaluation(report: Evaluation) -> None:
    head = f"job {report['job_id']} ({report['model']}) on {report['test']}: {plural(report['rows'], 'row')}"
    if "accuracy" not in report:
        console.print(f"{head}\nmean squared distance to the nearest centroid {report['mean_squared_distance']:.6g}")
        return
    auc = report.get("roc_auc")
    console.print(
        f"{head}\naccuracy {report['accuracy']:.4f}  {report['loss_name']} {report['loss']:.5f}"
        + (f"  ROC-AUC {auc:.4f}" if auc is not None else "")
    )
    classes = [str(c) for c in report["classes"]]
    if "per_class" in report:
        table = new_table("per class", ["class", "precision", "recall", "f1", "support"])
        for row in report["per_class"]:
            table.add_row(
                str(row["class"]), f"{row['precision']:.4f}", f"{row['recall']:.4f}", f"{row['f1']:.4f}",
                str(row["support"]),
            )  # fmt: skip
    else:
        table = new_table("confusion (rows: true, columns: predicted)", ["", *classes])
        for label, counts in zip(classes, report["confusion"], strict=True):
            table.add_row(label, *(str(n) for n in counts))
    console.print(table)


# --- export -------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    """Write a job's model as ONNX, safetensors or NPZ."""
    model = _model(args)
    path = model.export(args.out, args.format)
    console.print(f"job {model.job_id} ({model.name}) -> {path} ({args.format})")
    return 0


def add_parsers(commands: Any, storage_args: Any, output_args: Any, columns: Any) -> None:
    """The three commands' arguments (called by lambdaml.cli.parser, which passes its helpers in)."""
    from lambdaml import catalogue
    from lambdaml.trained.model import EXPORT_FORMATS

    def model_command(name: str, text: str) -> argparse.ArgumentParser:
        command: argparse.ArgumentParser = commands.add_parser(name, help=text)
        command.add_argument("job_id", help="the job whose model to use, as train printed it")
        return command

    def input_options(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--format", choices=catalogue.DATASET_FORMATS, default=None, help="default: from the file suffix"
        )
        command.add_argument("--label-column", choices=["first", "last"], default="first", help="CSV label column")
        command.add_argument(
            "--memory-limit",
            metavar="SIZE",
            default=None,
            help="refuse a text or NPZ file needing more memory than this (8G, 500M; default: half the RAM)",
        )
        command.add_argument("--label", default=None, metavar="COLUMN", help="Parquet: the label column")
        command.add_argument(
            "--features",
            default=None,
            metavar="COL,COL",
            help="Parquet: the feature columns, as prepared",
        )

    predict = model_command("predict", "predict labels (or clusters) of a data file's rows with a job's model")
    predict.add_argument(
        "--input",
        required=True,
        metavar="FILE|DATASET",
        help="rows in a format data prepare reads (local or s3://), or a dataset name (its test split)",
    )
    predict.add_argument(
        "--output", default=None, metavar="FILE", help="predictions.csv or .parquet (default: CSV on stdout)"
    )
    predict.add_argument(
        "--batch-rows", type=int, default=PREDICT_BATCH_ROWS, help="rows predicted and written at a time"
    )
    input_options(predict)
    storage_args(predict)

    evaluate = model_command("evaluate", "score a job's model on a test file or a prepared dataset's test split")
    evaluate.add_argument(
        "--test", required=True, metavar="FILE|DATASET", help="labelled rows (a file, local or s3://) or a dataset name"
    )
    input_options(evaluate)
    storage_args(evaluate)
    output_args(evaluate)

    export = model_command("export", "write a job's model as ONNX, safetensors (torch models) or NPZ")
    export.add_argument("--format", required=True, choices=list(EXPORT_FORMATS), help="the file format")
    export.add_argument("--out", required=True, metavar="PATH", help="the file to write")
    storage_args(export)
