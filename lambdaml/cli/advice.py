"""The cost model from the command line: ``lambdaml calibrate`` measures, ``lambdaml advise`` predicts.

Options arrive as text and are parsed here (``_number``, ``_names``), each error naming its option.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lambdaml.cli.output import _print_advice, _print_profile, console, print_json, progress
from lambdaml.cli.parser import split_names
from lambdaml.errors import ConfigError

if TYPE_CHECKING:  # the model loads with the command that uses it
    from analytic_model.cache_billing import CacheBilling


def _names(text: str, what: str) -> list[str]:
    names = split_names(text)
    if not names:
        raise ConfigError(f"--{what} names nothing")
    return names


def _number(text: str | None, what: str, *, integer: bool = False) -> float:
    """A positive number from an option (``11e6`` counts as whole); one line naming the option otherwise."""
    kind = "a whole number" if integer else "a number"
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"--{what} must be {kind}, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--{what} must be positive, got {text!r}")
    if integer and value != int(value):
        raise ConfigError(f"--{what} must be {kind}, got {text!r}")
    return int(value) if integer else value


def profile_path(name: str) -> Path:
    """A profile given by path, or by the name ``lambdaml calibrate`` saved it under."""
    from lambdaml import settings

    path = Path(name)
    if path.is_file() or path.suffix == ".json" or "/" in name:
        return path
    return settings.home() / "profiles" / f"{name}.json"


def _refit(args: argparse.Namespace) -> int:
    """``calibrate --from-results DIR``: the target's profile refit from its finished jobs."""
    from lambdaml.calibrate.refit import refit_from_results

    done = refit_from_results(Path(args.from_results), stack=args.stack, out=Path(args.out) if args.out else None)
    factors = done.factors
    channels = ", ".join(f"{kind} rounds {f:.2f}x" for kind, f in factors.channels.items())
    console.print(
        f"refit from {len(done.used)} finished jobs: compute {factors.compute:.2f}x, "
        f"{channels + ', ' if channels else ''}start-up and the rest {factors.rest:.2f}x the figures' times"
    )
    for skipped in done.skipped:
        progress.print(f"  skipped {skipped}")
    console.print(
        f"median time error on these jobs: {done.error_before:.0%} before, {done.error_after:.0%} after; "
        f"profile written to {done.path}"
    )
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from analytic_model.profile import save_profile
    from lambdaml import calibrate as cal
    from lambdaml.cli.advice_arguments import server_address
    from lambdaml.config import check_endpoint_url
    from lambdaml.models import MODELS

    if args.from_results is not None:
        return _refit(args)
    check_endpoint_url(args.endpoint_url, "--endpoint-url")
    kinds = args.channels  # names the parser checked
    MODELS.get(args.model)  # a model whose package is missing (torch) fails here, before any measuring
    if args.features < 1 or args.batch_size < 2:
        raise ConfigError("--features must be at least 1 and --batch-size at least 2")
    probe = cal.ComputeProbe(
        args.model, args.features, args.sparse, args.batch_size, rows=max(4000, 4 * args.batch_size)
    )
    effort = cal.Effort.quick() if args.quick else cal.Effort()

    def step(what: str) -> None:
        progress.print(f"  measuring {what} ...")

    target = f"stack:{args.stack}" if args.stack else "local"
    if args.stack:
        specs, storage, local, stack = cal.stack_target(args.stack, kinds)
        step("the stack's function start-up")
        first, warm, invoke = cal.measure_stack_startup(stack, effort.repeats)
        # On AWS the functions' CPUs are not this machine's: keep the shipped compute defaults there.
        probes = [probe] if local else []
        measured = cal.calibrate(
            specs, probes, storage=storage, effort=effort, target=target,
            shared_cores=cal.cores() if local else None, startup=(first, invoke), warm_start_s=warm,
            timed_from_here=not local, on_step=step,
        )  # fmt: skip
    else:
        # A direct channel meets through a Redis: --redis's, where given.
        addresses = {kind: getattr(args, server_address(kind), None) for kind in (*kinds, "redis")}
        with cal.local_channels(kinds, endpoint_url=args.endpoint_url, addresses=addresses) as (specs, storage):
            measured = cal.calibrate(
                specs, [probe], storage=storage, effort=effort, target=target, shared_cores=cal.cores(), on_step=step
            )
    out = Path(args.out) if args.out else profile_path(args.stack or "local")
    path = save_profile(measured, out)
    if args.output == "json":
        print_json({**measured.to_json(), "profile": str(path)})
        return 0
    _print_profile(measured.to_json())
    console.print(f"profile: {path}")
    console.print(f"use it with: lambdaml advise ... --profile {path}")
    return 0


#: What ``lambdaml advise`` assumes for an option neither the command line nor a job gives.
ADVISE_DEFAULTS = {
    "features": "0",
    "k": "8",
    "algorithm": "ga_sgd",
    "optimizer": "sgd",
    "batch_size": "100",
    "local_epochs": "1",
    "classes": "2",
    "levels": "16",
    "ratio": "0.01",
    "warmup_steps": "100",
    "protocol": "bsp",
    "staleness": "4",
    "workers": "1,2,5,10,20,50",
    "memory": "1769,3008,10240",
}


def advise_options(args: argparse.Namespace) -> None:
    """Fill unset options from ``--job`` (and its dataset's manifest), then from ``ADVISE_DEFAULTS``."""
    from lambdaml import catalogue

    if args.job:
        from lambdaml.cli.advice_job import apply_job

        apply_job(args)
    for name, value in ADVISE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.patterns is None:
        args.patterns = list(catalogue.PATTERNS)
    for name in ("model", "samples"):
        if getattr(args, name) is None:
            raise ConfigError(f"lambdaml advise: --{name} is required (or --job JOB.yaml, which gives it)")


def nnz_of(args: argparse.Namespace, samples: int, features: int) -> int | None:
    """The training rows' non-zeros from ``--nnz`` or ``--density`` (None: neither given)."""
    if (args.nnz is not None or args.density is not None) and not args.sparse:
        raise ConfigError("--nnz and --density go with --sparse; sparse data needs one of them (or --dataset-bytes)")
    nnz: int | None = None
    if args.nnz is not None:
        nnz = int(_number(args.nnz, "nnz", integer=True))
    elif args.density is not None:
        density = _number(args.density, "density")
        if density > 1:
            raise ConfigError(f"--density is a fraction of the features, at most 1, got {args.density!r}")
        nnz = round(density * samples * features)
    return nnz


def dataset_bytes_of(args: argparse.Namespace, samples: int, features: int) -> float:
    """``--dataset-bytes`` as given (the binary shards' size), or the shards' size computed from the data's shape."""
    from analytic_model.shard_size import binary_dataset_bytes
    from lambdaml.cli.arguments import parse_bytes

    nnz = nnz_of(args, samples, features)  # with --dataset-bytes, the non-zeros price the compute alone
    if args.dataset_bytes is not None:
        return parse_bytes(args.dataset_bytes, "--dataset-bytes")
    if features < 1:
        raise ConfigError(f"give --features (float32 values a row) or --dataset-bytes to size {args.model}'s data")
    if (nnz is not None) != bool(args.sparse):
        raise ConfigError("--nnz and --density go with --sparse; sparse data needs one of them (or --dataset-bytes)")
    return float(binary_dataset_bytes(samples, features, nnz=nnz))


def _workload_from(args: argparse.Namespace) -> Any:
    from analytic_model import Workload
    from analytic_model.advisor import epochs_to_target

    advise_options(args)
    epochs = 10.0
    if args.from_result:
        if args.target_loss is None:
            raise ConfigError("--from-result needs --target-loss")
        from lambdaml.runtime.reports import read_result_file

        curve = read_result_file(args.from_result).loss_curve  # bounded and typed: its loss curve is numbers
        try:
            target = float(args.target_loss)
        except ValueError:
            raise ConfigError(f"--target-loss must be a number, got {args.target_loss!r}") from None
        epochs = epochs_to_target({"loss_curve": [{"epoch": p.epoch, "loss": p.loss} for p in curve]}, target)
    elif args.target_loss is not None:
        raise ConfigError("--target-loss goes with --from-result")
    elif args.epochs is not None:
        epochs = _number(args.epochs, "epochs")
    features = 0 if args.features == "0" else int(_number(args.features, "features", integer=True))
    samples = int(_number(args.samples, "samples", integer=True))
    nnz = nnz_of(args, samples, features)
    return Workload(
        model=args.model,
        dataset_bytes=dataset_bytes_of(args, samples, features),
        samples=samples,
        features=features,
        params=int(_number(args.params, "params", integer=True)) if args.params is not None else None,
        flops_per_sample=_number(args.flops_per_sample, "flops-per-sample") if args.flops_per_sample else None,
        k=int(_number(args.k, "k", integer=True)),
        algorithm=args.algorithm,
        batch_size=int(_number(args.batch_size, "batch-size", integer=True)),
        epochs=epochs,
        rounds=_number(args.rounds, "rounds") if args.rounds is not None else None,
        local_epochs=int(_number(args.local_epochs, "local-epochs", integer=True)),
        optimizer=args.optimizer,
        sparse=args.sparse,
        nnz_per_row=None if nnz is None else nnz / samples,
        classes=int(_number(args.classes, "classes", integer=True)),
        compression=args.compression,
        levels=int(_number(args.levels, "levels", integer=True)),
        ratio=_number(args.ratio, "ratio"),
        error_feedback=False if args.no_error_feedback else None,
        warmup_steps=int(_number(args.warmup_steps, "warmup-steps", integer=True)),
        protocol=args.protocol,
        staleness=_whole(args.staleness, "staleness"),
    )


def _whole(text: str, what: str) -> int:
    """A whole number of at least zero from an option (SSP's staleness may be 0)."""
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--{what} must be a whole number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ConfigError(f"--{what} must be a whole number of at least 0, got {text!r}")
    return int(value)


def _cache_billing(args: argparse.Namespace) -> CacheBilling:
    """How a cache channel is billed, from --cache-pricing, --cache-hours and --cache-engine."""
    from analytic_model.cache_billing import CacheBilling

    hours = _number(args.cache_hours, "cache-hours") if args.cache_hours is not None else None
    return CacheBilling(pricing=args.cache_pricing, hours=hours, engine=args.cache_engine)


def cmd_advise(args: argparse.Namespace) -> int:
    from analytic_model import advise, load_profile

    workload = _workload_from(args)
    profile = load_profile(profile_path(args.profile)) if args.profile else None
    advice = advise(
        workload,
        profile,
        workers=[int(_number(w, "workers", integer=True)) for w in _names(args.workers, "workers")],
        channels=args.channels,
        patterns=args.patterns,
        memory_mb=[int(_number(m, "memory", integer=True)) for m in _names(args.memory, "memory")],
        instances=_names(args.instances, "instances") if args.instances else None,
        region=args.region,
        cache_node=args.cache_node,
        architecture=args.arch,
        cache=_cache_billing(args),
    )
    plot = advice.plot(args.plot) if args.plot else None
    if args.output == "json":
        sys.stdout.write(advice.to_json() + "\n")  # the advice's own JSON, with its own key order
        return 0
    _print_advice(advice, every=args.all)
    if plot is not None:
        console.print(f"plot: {plot}")
    return 0
