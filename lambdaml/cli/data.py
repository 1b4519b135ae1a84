"""``lambdaml data prepare/list/rm``: parse the options and say where the data goes; lambdaml.data does the rest."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lambdaml.cli.output import console, datasets_table, plural, print_dataset, print_json
from lambdaml.errors import ConfigError

if TYPE_CHECKING:
    from lambdaml.config import StorageSpec


def _memory_limit(text: str | None) -> int | None:
    """``--memory-limit``: parse_bytes' ``8GB``, ``1.5GiB``, ``1e9``, and the short ``8G``, ``500M`` (decimal)."""
    if text is None:
        return None
    from lambdaml.cli.arguments import parse_bytes

    short = text.strip()[-1:].lower() in ("k", "m", "g", "t")
    try:
        return int(parse_bytes(text + "B" if short else text, "--memory-limit"))
    except ConfigError:
        raise ConfigError(f"--memory-limit: {text!r} is not a positive size (e.g. 8G, 500M, 1.5GiB, 1e9)") from None


def _storage(args: argparse.Namespace) -> StorageSpec:
    """The bucket the dataset goes to: the options', or ``--stack``'s data bucket (and endpoint, if local)."""
    from pydantic import ValidationError

    from lambdaml.api import storage_of
    from lambdaml.config import check_endpoint_url

    endpoint_url = check_endpoint_url(args.endpoint_url, "--endpoint-url")
    try:  # checked before a long load, so a typo fails at once
        return storage_of(stack=args.stack, bucket=args.bucket, endpoint_url=endpoint_url, region=args.region)
    except ValidationError as exc:
        raise ConfigError(
            "; ".join(
                (f"--{str(e['loc'][0]).replace('_', '-')}: " if e["loc"] else "")
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
        ) from None


def cmd_data(args: argparse.Namespace) -> int:
    if args.data_command == "list":
        return data_list(args)
    if args.data_command == "rm":
        return data_rm(args)
    return data_prepare(args)


def data_list(args: argparse.Namespace) -> int:
    from lambdaml.data.versions import datasets
    from lambdaml.storage import open_storage

    storage = _storage(args)
    found = datasets(open_storage(storage))
    if args.output == "json":
        print_json(found)
    elif found:
        console.print(datasets_table(found))
    else:
        console.print(f"no datasets in s3://{storage.bucket}/")
    return 0


def data_rm(args: argparse.Namespace) -> int:
    from lambdaml.data.versions import remove
    from lambdaml.storage import open_storage

    storage = _storage(args)
    removed = remove(open_storage(storage), args.name)
    console.print(f"dataset {args.name} removed from s3://{storage.bucket}/ ({plural(removed, 'object')})")
    return 0


def data_prepare(args: argparse.Namespace) -> int:
    """Load or generate a dataset, cut it into shards and upload them with a manifest."""
    from lambdaml.data.prepare import DatasetSource, check_options, prepare_dataset, split_fraction

    memory_limit = _memory_limit(args.memory_limit)
    source = DatasetSource(
        inputs=tuple(args.input or ()),
        format=args.format,
        test=args.test,
        label_column=args.label_column,
        label=args.label,
        features=args.features,
        sparse=args.sparse,
        n_features=args.n_features,
        synthetic=args.synthetic,
        rows=args.rows,
        builtin=args.builtin,
    )
    # Every argument is checked before a long load and before S3 is contacted: the name and split
    # first, then the storage options, then (in prepare_dataset) the source's.
    test_fraction = split_fraction(args.test_fraction, has_test=args.test is not None)
    check_options(args.name, shards=args.shards, test_fraction=test_fraction, seed=args.seed)
    storage = _storage(args)
    manifest = prepare_dataset(
        storage,
        args.name,
        source,
        shards=args.shards,
        test_fraction=test_fraction,
        seed=args.seed,
        overwrite=args.overwrite,
        memory_limit=memory_limit,
    )
    print_dataset(manifest, storage.bucket)
    return 0
