"""``lambdaml demo``: everything local, from data to result, in about a minute."""

from __future__ import annotations

import argparse
import itertools
from importlib import resources

from lambdaml.cli.output import console, print_dataset, print_result, progress
from lambdaml.cli.train import train


def cmd_demo(args: argparse.Namespace) -> int:
    """Everything local: moto as S3, synthetic data, 4 workers over S3, then the result."""
    import yaml

    from lambdaml.config import parse_job
    from lambdaml.data.prepare import DatasetSource, prepare_dataset
    from lambdaml.local.services import running, start_moto

    progress.print("starting an embedded local S3 (moto) ...")
    with running(start_moto()) as (moto,):
        data = yaml.safe_load(resources.files("lambdaml.examples").joinpath("higgs-lr.yaml").read_text())
        data["workers"] = args.workers
        data["algorithm"]["epochs"] = args.epochs
        data["storage"]["endpoint_url"] = data["channel"]["endpoint_url"] = moto.url
        job = parse_job(data, "demo job")
        source = DatasetSource(synthetic="higgs", rows=args.rows)
        manifest = prepare_dataset(job.storage, job.dataset, source, shards=args.workers, test_fraction=0.2, seed=0)
        print_dataset(manifest, job.storage.bucket)
        from lambdaml.driver import backend_for
        from lambdaml.runtime.start import new_job_id

        result = train(job, backend_for("local", job), job_id=new_job_id(job.name), results_dir="results")
        print_result(result)
        losses = [point.loss for point in result.loss_curve]
        falling = all(b <= a + 1e-9 for a, b in itertools.pairwise(losses))
        accuracy = result.test_accuracy
        scored = f"test accuracy {accuracy:.4f}" if accuracy is not None else "no test rows to score (use more --rows)"
        console.print(
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f} ({'falling' if falling else 'not monotone'}), {scored}"
        )
    for line in NEXT_STEPS:
        console.print(line)
    return 0


# What the README's tour does next, in the order it does it.
NEXT_STEPS = (  # each under 80 columns: a default terminal, and every pipe
    "next, the tour in README.md:",
    "  Lambda, locally:   lambdaml local up, then lambdaml train JOB --stack local",
    "  EC2 baseline:      lambdaml train JOB --backend iaas-local, lambdaml compare",
    "  before deploying:  lambdaml advise (time and cost, FaaS against EC2)",
)
