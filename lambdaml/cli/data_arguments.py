"""The arguments of ``lambdaml data``: ``prepare``, ``list`` and ``rm``."""

from __future__ import annotations

import argparse
from typing import Any

from lambdaml import catalogue
from lambdaml.cli.arguments import columns, output_args, storage_args


def add_data_parsers(commands: argparse._SubParsersAction[Any]) -> None:
    """``data`` and its subcommands."""
    data_commands = commands.add_parser("data", help="datasets")
    data = data_commands.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    prepare = data.add_parser("prepare", help="split a dataset into binary shards in S3")
    prepare.add_argument("name", help="dataset name")
    source = prepare.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--input", nargs="+", metavar="FILE", help="dataset file or s3://BUCKET/KEY (several for CIFAR-10 batches)"
    )
    source.add_argument("--synthetic", choices=catalogue.SYNTHETIC_DATASETS, help="generate a synthetic dataset")
    source.add_argument("--builtin", choices=catalogue.BUILTIN_DATASETS, help="a small dataset shipped in a package")
    prepare.add_argument(
        "--format", choices=catalogue.DATASET_FORMATS, default=None, help="default: from the file suffix"
    )
    prepare.add_argument(
        "--test",
        metavar="FILE",
        default=None,
        help="a test file (or s3://...) in --input's format, read with the train set's features and labels",
    )
    prepare.add_argument("--label-column", choices=["first", "last"], default="first", help="CSV label column")
    prepare.add_argument("--label", metavar="COLUMN", default=None, help="Parquet label column (default: 'label')")
    prepare.add_argument(
        "--features",
        type=columns,
        metavar="COL,COL...",
        default=None,
        help="Parquet feature columns (default: every other column of numbers)",
    )
    prepare.add_argument("--sparse", action="store_true", help="keep LIBSVM data sparse (CSR shards)")
    prepare.add_argument("--n-features", type=int, default=None, help="LIBSVM width / synthetic rcv1 columns")
    prepare.add_argument(
        "--memory-limit",
        metavar="SIZE",
        default=None,
        help="refuse an --input dataset needing more memory than this (8G, 500M, 1e9; default: half the RAM)",
    )
    prepare.add_argument("--rows", type=int, default=100_000, help="rows of a synthetic dataset")
    prepare.add_argument("--shards", type=int, required=True, help="number of shards (a multiple of the workers)")
    prepare.add_argument(
        "--test-fraction",
        type=float,
        default=None,
        help="share of a single --input's rows held out for testing (default: 0.2; none with --test)",
    )
    prepare.add_argument("--seed", type=int, default=0, help="seed of the shuffle and of synthetic data (default: 0)")
    prepare.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset (running jobs keep their version)"
    )
    storage_args(prepare)
    listing = data.add_parser("list", help="the datasets in a bucket: versions, rows, shards, size")
    storage_args(listing)
    output_args(listing)
    rm = data.add_parser("rm", help="delete a dataset: every version and its pointer")
    rm.add_argument("name", help="dataset name")
    storage_args(rm)
