"""The arguments of the cost model's commands: ``calibrate`` measures, ``advise`` predicts and recommends."""

from __future__ import annotations

import argparse
from typing import Any

from analytic_model.kinds import MODELLED_ONLY, default_channels
from analytic_model.tables import ARCHITECTURES
from lambdaml import catalogue
from lambdaml.cli.arguments import names_in, output_args, plot_arg


def server_address(kind: str) -> str:
    """Where ``calibrate --KIND HOST:PORT`` keeps a running server's address."""
    return f"{kind.replace('-', '_')}_address"


def add_advisor_parsers(commands: argparse._SubParsersAction[Any]) -> None:
    """``calibrate`` and ``advise``."""
    calibrate = commands.add_parser(
        "calibrate", help="measure channels, compute and start-up here (or on a stack) for the cost model"
    )
    calibrate.add_argument("--stack", default=None, help="measure this stack's channels (default: local services)")
    calibrate.add_argument(
        "--from-results",
        metavar="DIR",
        default=None,
        help="refit the target's profile (this machine's, or --stack's) from the finished jobs' result files in DIR",
    )
    calibrate.add_argument(
        "--channels",
        type=names_in("channel", catalogue.shared_channels()),
        default=",".join(default_channels()),
        help="comma-separated kinds (default: %(default)s; direct when named)",
    )
    calibrate.add_argument(
        "--model", default="lr", choices=list(catalogue.MODELS), help="model whose per-sample compute is timed"
    )
    calibrate.add_argument("--features", type=int, default=28, help="its width (default: 28, as Higgs)")
    calibrate.add_argument("--sparse", action="store_true", help="time it on sparse (CSR) rows")
    calibrate.add_argument("--batch-size", type=int, default=100, help="batch size per worker (default: 100)")
    calibrate.add_argument("--endpoint-url", default=None, help="a running S3/DynamoDB endpoint (default: start moto)")
    for kind, info in catalogue.CHANNELS.items():  # a server of each kind that can be started here
        if info.local_server is not None:
            calibrate.add_argument(
                f"--{kind}", dest=server_address(kind), default=None, metavar="HOST:PORT",
                help=f"a running {info.called} (default: start one)",
            )  # fmt: skip
    calibrate.add_argument("--quick", action="store_true", help="fewer repeats (seconds instead of a minute)")
    calibrate.add_argument("--out", default=None, help="profile file (default: ~/.lambdaml/profiles/TARGET.json)")
    output_args(calibrate)

    advise = commands.add_parser("advise", help="predict time and cost on Lambda and EC2, and recommend one")
    advise.add_argument(
        "--model",
        default=None,
        help="lr, svm, softmax, multiclass_svm, kmeans, mlp, mobilenet, resnet18, resnet50 (required, or from --job)",
    )
    advise.add_argument(
        "--dataset-bytes",
        default=None,
        help="bytes of the binary shards workers hold, e.g. 1.3e9, 800MB (default: computed from "
        "--samples x --features as float32 rows, or from --nnz; not the size of a CSV or LIBSVM file)",
    )
    advise.add_argument("--samples", default=None, help="training rows (required, or from --job's manifest)")
    advise.add_argument("--features", default=None, help="features per row (sizes lr, svm, kmeans, mlp; and the data)")
    advise.add_argument("--params", default=None, help="parameter count (overrides the model's)")
    advise.add_argument("--flops-per-sample", default=None, help="training flops per sample (overrides)")
    advise.add_argument("--k", default=None, help="kmeans clusters (default: 8)")
    advise.add_argument(
        "--sparse",
        action="store_true",
        help="sparse rows: CSR shards, a step priced by their non-zeros (--nnz or --density; from --job's manifest)",
    )
    advise.add_argument(
        "--algorithm",
        default=None,
        choices=list(catalogue.ALGORITHMS),
        help="as the job file's algorithm.name (default: ga_sgd)",
    )
    advise.add_argument(
        "--compression",
        default=None,
        choices=list(catalogue.COMPRESSORS),
        help="as algorithm.compression.name (default: none; onebit_adam: onebit)",
    )
    advise.add_argument("--levels", default=None, help="qsgd: quantization levels (default: 16)")
    advise.add_argument("--ratio", default=None, help="topk: share of the entries sent (default: 0.01)")
    advise.add_argument(
        "--no-error-feedback", action="store_true", help="compress without error feedback (error_feedback: false)"
    )
    advise.add_argument("--warmup-steps", default=None, help="onebit_adam: uncompressed steps (default: 100)")
    advise.add_argument(
        "--protocol", default=None, choices=list(catalogue.PROTOCOLS), help="sync.protocol (default: bsp)"
    )
    advise.add_argument("--staleness", default=None, help="ssp: pushes a worker may run ahead (default: 4)")
    advise.add_argument("--optimizer", default=None, help="sgd (default), momentum, adam (checkpoint size)")
    advise.add_argument("--batch-size", default=None, help="batch size per worker (default: 100)")
    advise.add_argument("--local-epochs", default=None, help="ma_sgd/admm: epochs between averagings (default: 1)")
    length = advise.add_mutually_exclusive_group()
    length.add_argument("--epochs", default=None, help="epochs to the target loss (default 10)")
    length.add_argument("--rounds", default=None, help="collective rounds to the target loss, whatever W")
    length.add_argument("--from-result", default=None, metavar="RESULT.json", help="a short measured run's result")
    advise.add_argument("--target-loss", default=None, help="with --from-result: the loss to reach")
    advise.add_argument("--workers", default=None, help="worker counts to try (default: 1,2,5,10,20,50)")
    advise.add_argument(
        "--channels",
        type=names_in("channel", (*catalogue.CHANNELS, *MODELLED_ONLY)),
        default=None,
        help="channels to try (default: those Lambda workers can share that the profile knows; s3express, "
        "S3 Express One Zone, is modelled only and tried only when named)",
    )
    advise.add_argument(
        "--patterns",
        type=names_in("pattern", catalogue.PATTERNS),
        default=None,
        help=f"communication patterns to try (default: {','.join(catalogue.PATTERNS)})",
    )
    advise.add_argument("--memory", default=None, help="Lambda memory sizes (MB) to try (default: 1769,3008,10240)")
    advise.add_argument("--instances", default=None, help="EC2 instance types to try (default: all priced)")
    advise.add_argument("--region", default="us-east-1", help="whose prices (default: %(default)s)")
    advise.add_argument(
        "--arch",
        "--architecture",
        dest="arch",
        type=names_in("architecture", ARCHITECTURES),
        default="x86_64",
        help="Lambda instruction sets to try, e.g. x86_64,arm64: arm64 bills about 20%% less per GB-second "
        "(default: %(default)s)",
    )
    advise.add_argument("--cache-node", default=None, help="ElastiCache node type for a cache channel")
    advise.add_argument(
        "--cache-pricing",
        choices=("node", "serverless", "share"),
        default="node",
        help="how a cache channel is billed: node (per node-hour for its lifetime), serverless (ElastiCache "
        "Serverless: ECPUs and GB-hours stored, with its minimum) or share (only the job's node-seconds of a "
        "stack's cluster that is there anyway) (default: %(default)s)",
    )
    advise.add_argument(
        "--cache-hours",
        default=None,
        help="the cache's lifetime in hours (default: the job's time rounded up to the hour)",
    )
    advise.add_argument(
        "--cache-engine",
        choices=("redis", "valkey"),
        default="redis",
        help="a Redis channel's ElastiCache engine: valkey costs less (default: %(default)s)",
    )
    advise.add_argument("--profile", default=None, help="a profile file or name from 'lambdaml calibrate'")
    plot_arg(advise, "cost against time", "advice.png")
    output_args(advise)
    advise.add_argument("--all", action="store_true", help="print every configuration, not just the summary")
    # What a job file and its dataset say (lambdaml.cli.advice_job); a flag above overrides it.
    advise.add_argument(
        "--job",
        default=None,
        metavar="JOB.yaml",
        help="take the model, algorithm, workers, channel, pattern and memory from a job file, and the "
        "samples, features, classes and shard bytes from its dataset's manifest",
    )
    advise.add_argument("--classes", default=None, help="classes of the labels (softmax, multiclass_svm; default: 2)")
    sparsity = advise.add_mutually_exclusive_group()
    sparsity.add_argument(
        "--nnz",
        default=None,
        help="with --sparse: non-zero features in all training rows (size the data and the compute)",
    )
    sparsity.add_argument(
        "--density", default=None, help="with --sparse: the fraction of features that are non-zero (as --nnz)"
    )
