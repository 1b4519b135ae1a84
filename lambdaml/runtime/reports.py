"""Typed records of a run: each rank's report and the job's result, to and from their JSON files.

A rank writes its ``WorkerReport`` to ``jobs/<id>/aNNNN/reports/pNNNNN.json``; the job's
``JobResult`` goes to ``jobs/<id>/result.json`` and ``results/<id>.json``. ``to_json`` writes a
record in its file's shape and ``from_json`` reads one back, refusing a malformed record in one
``CodecError`` line. A field's metadata says how it maps: ``OPTIONAL`` is a part not every run
has (None, and left out of the JSON), ``FLAT`` writes a nested record's fields into its
parent's object. A field with a default may be missing when read: results written by earlier
versions lack what was added since, and keys no record knows (a removed figure) are ignored.

Two parts stay JSON objects, checked only to be objects: the job's spec (its job file, read with
``parse_job``; an older result's spec need not parse today) and its cost (``lambdaml.cost.JobCost``:
Lambda and channel, or EC2; an older result's may lack a part).
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, Self, Union, get_args, get_origin, get_type_hints, is_typeddict

from lambdaml.cost import Invocation, JobCost
from lambdaml.errors import CodecError, ConfigError, brief

OPTIONAL = {"optional": True}  # a part a record may lack: None, and then left out of its JSON
FLAT = {"flat": True}


def json_name(name: str) -> dict[str, str]:
    """Metadata for a field stored under another name (``async`` is a Python keyword)."""
    return {"json": name}


def _key(f: Any) -> str:
    return str(f.metadata.get("json", f.name))


@cache
def _hints(cls: type) -> dict[str, object]:
    """The type of each of a record's fields (a class, or a form such as ``float | None``)."""
    return get_type_hints(cls)


def _record_type(hint: Any) -> type:
    """The record class of a field typed ``R`` or ``R | None``."""
    return next(arg for arg in (hint, *get_args(hint)) if isinstance(arg, type) and is_dataclass(arg))


@cache
def _keys(cls: type) -> frozenset[str]:
    """The JSON keys a record's object holds, its flat parts' included."""
    hints = _hints(cls)
    return frozenset().union(
        *(_keys(_record_type(hints[f.name])) if f.metadata.get("flat") else {_key(f)} for f in fields(cls))
    )


def _write(record: Any) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if value is None and f.metadata.get("optional"):
            continue
        if f.metadata.get("flat"):
            out.update(_write(value))
        else:
            out[_key(f)] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _write(value)
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value  # a string, number, bool, None, or a JSON object (spec, cost)


def _read(cls: type, data: Any, what: str, path: str) -> Any:
    if not isinstance(data, dict):
        raise CodecError(f"{what}: {path or 'the record'} must be an object, got {brief(data)}")
    hints, values = _hints(cls), {}
    for f in fields(cls):
        if f.metadata.get("flat"):
            part = _record_type(hints[f.name])
            if not f.metadata.get("optional") or _keys(part) & data.keys():
                values[f.name] = _read(part, data, what, path)
        elif _key(f) in data:
            values[f.name] = _value(hints[f.name], data[_key(f)], what, _join(path, _key(f)))
        elif f.default is MISSING and f.default_factory is MISSING:
            raise CodecError(f"{what}: {_join(path, _key(f))} is missing")
    return cls(**values)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _value(hint: Any, value: Any, what: str, path: str) -> Any:
    """A JSON value checked against a field's type: a record, a tuple, an object, a string, a number."""
    if get_origin(hint) in (Union, types.UnionType):
        if value is None:
            return None
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    origin = get_origin(hint)
    if origin is tuple:
        items = _checked(list, "a list", value, what, path)
        return tuple(_value(get_args(hint)[0], item, what, f"{path}[{i}]") for i, item in enumerate(items))
    if origin is dict or is_typeddict(hint):  # a section kept as its JSON (a result's cost)
        return _checked(dict, "an object", value, what, path)
    if isinstance(hint, type) and is_dataclass(hint):
        return _read(hint, value, what, path)
    return _scalar(hint, value, what, path)


def _checked(kind: type, named: str, value: Any, what: str, path: str) -> Any:
    if not isinstance(value, kind):
        raise CodecError(f"{what}: {path} must be {named}, got {brief(value)}")
    return value


_SCALARS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def _scalar(hint: type, value: Any, what: str, path: str) -> Any:
    """A string, a bool, or a number as its field's type holds it (a whole float read as an int)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if hint is int and (isinstance(value, int) or value.is_integer()):
            return int(value)
        if hint is float and (isinstance(value, float) or value.bit_length() < 1024):  # beyond: no float
            return float(value)
    if hint in (str, bool) and isinstance(value, hint):
        return value
    raise CodecError(f"{what}: {path} must be {_SCALARS[hint]}, got {brief(value)}")


class Record:
    """A frozen dataclass with its JSON form."""

    def to_json(self) -> dict[str, Any]:
        return _write(self)

    @classmethod
    def from_json(cls, data: Any, what: str = "record") -> Self:
        """The record in ``data`` (a JSON object); ``what`` names it in the error if it is malformed."""
        record: Self = _read(cls, data, what, "")
        return record


# --- the parts --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Times(Record):
    """A rank's time in seconds: loading its shard, computing, communicating (waiting aside), waiting on others."""

    load_s: float
    compute_s: float
    communicate_s: float
    wait_s: float
    total_s: float


@dataclass(frozen=True, kw_only=True)
class PerRound(Record):
    """Traffic per communication round (one collective or ring exchange), for comparisons."""

    rounds: int
    bytes_sent_per_round: float
    bytes_received_per_round: float
    requests_per_round: float


_LINK_COUNTS = ("links_direct", "links_dropped", "rounds_fallback", "bytes_sent_links", "bytes_received_links")


@dataclass(frozen=True, kw_only=True)
class Traffic(Record):
    """A rank's requests and bytes on its channel; torch.distributed counts only the three it has."""

    puts: float | None = field(default=None, metadata=OPTIONAL)
    gets: float | None = field(default=None, metadata=OPTIONAL)
    lists: float | None = field(default=None, metadata=OPTIONAL)
    deletes: float | None = field(default=None, metadata=OPTIONAL)
    requests: float
    bytes_sent: float
    bytes_received: float
    wait_s: float | None = field(default=None, metadata=OPTIONAL)  # in bounded waits for the other ranks' values
    # A direct job's links: the peers this rank linked to, those whose link went down, the rounds
    # in which any of its values went through the store, and the bytes its links carried.
    links_direct: float | None = field(default=None, metadata=OPTIONAL)
    links_dropped: float | None = field(default=None, metadata=OPTIONAL)
    rounds_fallback: float | None = field(default=None, metadata=OPTIONAL)
    bytes_sent_links: float | None = field(default=None, metadata=OPTIONAL)
    bytes_received_links: float | None = field(default=None, metadata=OPTIONAL)
    per_round: PerRound | None = field(default=None, metadata=OPTIONAL | FLAT)  # once a round has been made

    @classmethod
    def measured(cls, counts: Mapping[str, float], rounds: int) -> Traffic:
        """The figures a communicator counted (``Communicator.stats``) over ``rounds`` rounds."""
        sent, received, requests = (counts.get(name, 0.0) for name in ("bytes_sent", "bytes_received", "requests"))
        per_round = None
        if rounds > 0:
            per_round = PerRound(
                rounds=rounds,
                bytes_sent_per_round=sent / rounds,
                bytes_received_per_round=received / rounds,
                requests_per_round=requests / rounds,
            )
        return cls(
            **{name: counts.get(name) for name in ("puts", "gets", "lists", "deletes", "wait_s", *_LINK_COUNTS)},
            requests=requests,
            bytes_sent=sent,
            bytes_received=received,
            per_round=per_round,
        )

    def counts(self) -> dict[str, float]:
        """The figures this rank counted (per-round figures aside), by name."""
        return {
            f.name: value
            for f in fields(self)
            if f.name != "per_round" and (value := getattr(self, f.name)) is not None
        }


@dataclass(frozen=True, kw_only=True)
class Memory(Record):
    """Peak resident memory (MB) after the invocation's first epoch and at its end: flat means no leak."""

    peak_rss_after_first_epoch_mb: float
    peak_rss_mb: float


@dataclass(frozen=True, kw_only=True)
class AsyncStats(Record):
    """An ASP/SSP rank's update log: the version it saw, its pushes, the updates it applied, their staleness."""

    version: int
    pushes: int
    applied: int
    staleness_mean: float
    staleness_max: int
    ssp_wait_s: float  # waiting for the slowest worker under SSP's bound

    @classmethod
    def of(cls, stats: Mapping[str, float]) -> AsyncStats:
        """From the protocol's figures (``SyncProtocol.stats``)."""
        return cls(
            version=int(stats["version"]),
            pushes=int(stats["pushes"]),
            applied=int(stats["applied"]),
            staleness_mean=stats["staleness_mean"],
            staleness_max=int(stats["staleness_max"]),
            ssp_wait_s=stats["ssp_wait_s"],
        )


@dataclass(frozen=True, kw_only=True)
class Accuracy(Record):
    """A classifier's test accuracy, the classes it chose among, and what always answering the most
    common class scores (None where the labels are not class numbers)."""

    test_accuracy: float
    classes: int
    majority_accuracy: float | None


# --- a rank's report ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkerReport(Record):
    """What a rank that finished reports; rank 0 adds where the model is and how it scores on the test set."""

    rank: int
    status: str = "done"
    losses: tuple[float, ...]
    epoch_elapsed_s: tuple[float, ...]  # when each epoch ended, since the run began
    model_checksum: str
    rows: int
    steps_per_epoch: int
    invocations: int
    memory: Memory
    async_stats: AsyncStats | None = field(default=None, metadata=OPTIONAL | json_name("async"))
    model_uri: str | None = field(default=None, metadata=OPTIONAL)
    test_loss: float | None = field(default=None, metadata=OPTIONAL)
    accuracy: Accuracy | None = field(default=None, metadata=OPTIONAL | FLAT)  # a supervised model's
    times: Times
    channel: Traffic
    # On Lambda: one entry per invocation.
    billed: tuple[Invocation, ...] | None = field(default=None, metadata=OPTIONAL)
    # The collective its rounds ran (``sync.pattern``, or what ``auto`` chose) and the cost
    # model's prediction of one round of it; None on torch.distributed, or for a channel no
    # profile knows.
    pattern: str | None = field(default=None, metadata=OPTIONAL)
    predicted_round_s: float | None = field(default=None, metadata=OPTIONAL)
    # Under auto, where the model could not tell patterns apart: each one's round in the first
    # rounds (its slowest rank's median), which ``pattern`` was kept by (``lambdaml.comm.trial``).
    trial_round_s: dict[str, float] | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True, kw_only=True)
class Continuation(Record):
    """A rank that checkpointed before its deadline: a new invocation goes on from ``epoch``, ``step``."""

    rank: int
    status: str = "continued"
    epoch: int
    step: int


# --- the job's result --------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WorkerRow(Record):
    """One rank in the result: its rows, times and traffic, and the parts its run has."""

    rank: int
    rows: int
    times: Times = field(metadata=FLAT)
    channel: Traffic
    async_stats: AsyncStats | None = field(default=None, metadata=OPTIONAL | json_name("async"))
    billed: tuple[Invocation, ...] | None = field(default=None, metadata=OPTIONAL)
    epoch_elapsed_s: tuple[float, ...] | None = field(default=None, metadata=OPTIONAL)
    memory: Memory | None = field(default=None, metadata=OPTIONAL)

    @classmethod
    def of(cls, report: WorkerReport) -> WorkerRow:
        """The parts of a rank's report that the result keeps: every field of a row is one of the report's."""
        return cls(**{f.name: getattr(report, f.name) for f in fields(cls)})


@dataclass(frozen=True, kw_only=True)
class DatasetInfo(Record):
    """The dataset version a job trained on."""

    name: str
    version: str | None = None  # written by every version since datasets were versioned
    train_rows: int
    test_rows: int
    classes: int | None = None


@dataclass(frozen=True, kw_only=True)
class LossPoint(Record):
    """The global training loss after an epoch, and when rank 0 ended it."""

    epoch: int
    loss: float
    elapsed_s: float


@dataclass(frozen=True, kw_only=True)
class PredictedRun(Record):
    """What the cost model predicted for a job before it started, and from which profile."""

    configuration: str  # the prediction's label: platform, workers, channel or instance, memory
    profile: str  # the figures it used: a calibrated profile's path, or the shipped AWS defaults
    time_s: float
    time_low_s: float
    time_high_s: float
    cost: float
    cost_low: float
    cost_high: float
    # What the configuration was chosen for (``train --deadline`` / ``--budget``); None: as the job gave it.
    chosen_for: str | None = field(default=None, metadata=OPTIONAL)
    # The cost model's workload of the job (``analytic_model.Workload``'s fields): what a refit
    # predicts the job from again (``lambdaml calibrate --from-results``).
    workload: dict[str, Any] | None = field(default=None, metadata=OPTIONAL)


@dataclass(frozen=True, kw_only=True)
class JobResult(Record):
    """A finished job: where its model is, its loss curve and test scores, each rank's breakdown, its cost."""

    job_id: str
    attempt: int = 1
    status: str = "succeeded"
    backend: str = "lambda"  # results from before backends were named came from Lambda
    started_at: str
    finished_at: str
    wall_time_s: float  # this attempt's
    spec: dict[str, Any]  # the job's JSON, as in its job file
    dataset: DatasetInfo
    model_uri: str
    ranks_agree: bool
    loss_curve: tuple[LossPoint, ...]
    test_accuracy: float | None = None
    # What the accuracy is of: the classes it chose among, and what always guessing the most
    # common class would score.
    classes: int | None = None
    majority_accuracy: float | None = None
    test_loss: float | None = None
    workers: tuple[WorkerRow, ...]
    cost: JobCost  # lambdaml.cost's pricing: Lambda and channel, or EC2
    invocations: tuple[int, ...] | None = field(default=None, metadata=OPTIONAL)  # on Lambda: per rank
    pattern: str | None = field(default=None, metadata=OPTIONAL)  # as rank 0's report says
    predicted_round_s: float | None = field(default=None, metadata=OPTIONAL)
    trial_round_s: dict[str, float] | None = field(default=None, metadata=OPTIONAL)  # as rank 0's report says
    # A resumed job's wall time over all its attempts, this one's included.
    attempts_wall_time_s: float | None = field(default=None, metadata=OPTIONAL)
    # The cost model's prediction the job ran under; where none could be made, why not (a result
    # written before predictions were recorded has neither: "no prediction").
    prediction: PredictedRun | None = field(default=None, metadata=OPTIONAL)
    unpredicted: str | None = field(default=None, metadata=OPTIONAL)
    # Where save_result wrote the record (the file itself does not say).
    result_path: str | None = field(default=None, metadata=OPTIONAL)


def total_traffic(workers: Iterable[WorkerRow]) -> dict[str, float]:
    """Every rank's channel figures summed (per-round figures aside): what the channel's requests cost."""
    total: dict[str, float] = {}
    for worker in workers:
        for name, value in worker.channel.counts().items():
            total[name] = total.get(name, 0.0) + value
    return total


def billed(workers: Iterable[WorkerRow]) -> list[Invocation]:
    """Every rank's billed Lambda invocations."""
    return [invocation for worker in workers for invocation in worker.billed or ()]


#: Bounds on a result file read back as input (``compare``, ``advise --from-result``): a real
#: result is kilobytes to a few megabytes deep in a handful of levels.
MAX_RESULT_FILE_BYTES = 64 * 2**20
MAX_RESULT_DEPTH = 64
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether ``text``'s arrays and objects nest deeper than ``limit``: a scan of its brackets
    outside strings, cheap and bounded, before ``json.loads`` recurses into a bomb."""
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        depth += 1 if char in "[{" else -1
        if depth > limit:
            return True
    return False


def read_result_file(path: str | Path) -> JobResult:
    """A result file read as untrusted input: bounded in size and nesting, then checked as a
    ``JobResult``; anything else is a one-line ConfigError naming the file."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RESULT_FILE_BYTES:
            raise ConfigError(
                f"{path}: {size:,} bytes is too large for a result file (at most {MAX_RESULT_FILE_BYTES:,})"
            )
        with path.open("rb") as file:  # read no more than the bound, whatever the file (a pipe, a device)
            raw = file.read(MAX_RESULT_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such result file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the result file ({exc.strerror or exc})") from None
    if len(raw) > MAX_RESULT_FILE_BYTES:
        raise ConfigError(f"{path}: too large for a result file (more than {MAX_RESULT_FILE_BYTES:,} bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a JSON result file (not UTF-8 text)") from None
    if json_depth_exceeds(text, MAX_RESULT_DEPTH):
        raise ConfigError(f"{path}: not a LambdaML result (JSON nested deeper than {MAX_RESULT_DEPTH} levels)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not a JSON result file (line {exc.lineno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # an integer of more than 4,300 digits
        raise ConfigError(f"{path}: not a JSON result file ({str(exc)[:200]})") from None
    return JobResult.from_json(data, f"{path}: not a LambdaML result")  # a CodecError in one line
