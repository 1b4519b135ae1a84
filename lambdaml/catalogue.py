"""The plug-in catalogue: every plug-in's name, where it lives, what it needs and what it can do.

Checking a job reads this catalogue and never imports a plug-in. So the coordinator, a zip
function without torch, validates a torch job like any other, and the cost model lists
exactly what a job file accepts. The registries (``lambdaml.registry``) load the plug-ins
themselves, lazily, from the paths given here. A description is the one place a plug-in's
capabilities are written: an algorithm's or compressor's class reads them from its own.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Literal, TypeVar

from lambdaml.errors import ConfigError, UnknownName

logger = logging.getLogger(__name__)

#: The entry-point group a package declares its plug-ins in (``pyproject.toml``:
#: ``[project.entry-points."lambdaml.plugins"] name = "module:DESCRIPTION"``). Each entry point
#: names one description (a ``ChannelInfo``, ``AlgorithmInfo``...) or a sequence of them. Every
#: process reads them, a worker as much as the command line, so a plug-in needs no code here.
ENTRY_POINT_GROUP = "lambdaml.plugins"

CompressionUse = Literal["none", "optional", "required"]

#: What to install for a plug-in that needs an optional package.
INSTALL_HINTS = {"torch": "install the torch extra: pip install 'lambdaml[torch]'"}


@dataclass(frozen=True)
class Plugin:
    """Where a plug-in lives (``module:attribute``) and the optional package it needs, if any."""

    name: str
    path: str
    needs: str | None = None

    @property
    def install_hint(self) -> str:
        return INSTALL_HINTS.get(self.needs or "", "")


@dataclass(frozen=True)
class ModelInfo(Plugin):
    #: Tells apart two classes only (a dataset of more is refused, not trained as "0 against the rest").
    binary: bool = False
    #: Whether labels mean anything to it (accuracy is reported only then).
    supervised: bool = True

    def check_classes(self, dataset: str, classes: int) -> None:
        """Refuse, in one line, a dataset this model cannot learn."""
        if self.binary and classes > 2:
            raise ConfigError(
                f"model {self.name!r} is binary, but dataset {dataset!r} has {classes} classes; "
                "use model: softmax (or multiclass_svm)"
            )


@dataclass(frozen=True)
class OptimizerInfo(Plugin):
    """An update rule for the ``optimizer`` setting (built in: an algorithm plug-in brings its own rule)."""

    #: Vectors of the parameters' size it keeps (momentum: the velocity; Adam: both moments).
    state_vectors: int = 0


OPTIMIZERS: Mapping[str, OptimizerInfo] = {
    info.name: info
    for info in (
        OptimizerInfo("sgd", "lambdaml.optim:SGD"),
        OptimizerInfo("momentum", "lambdaml.optim:Momentum", state_vectors=1),
        OptimizerInfo("adam", "lambdaml.optim:Adam", state_vectors=2),
    )
}

#: When an algorithm exchanges: every step; once an epoch, one update from the whole shard
#: (kmeans); or after ``local_epochs`` epochs of local steps (MA-SGD, ADMM).
ExchangeEvery = Literal["step", "epoch", "local_epochs"]


@dataclass(frozen=True)
class AlgorithmInfo(Plugin):
    #: Its hyperparameters' model (``module:class``, a subclass of ``lambdaml.config.AlgorithmSpec``).
    spec: str = "lambdaml.config.algorithm:AlgorithmSpec"
    #: Has an ASP/SSP form (consensus methods such as ADMM do not).
    supports_async: bool = False
    #: Sums gradients over workers every step (GA-SGD): DDP can do it in backward.
    reduces_gradients: bool = False
    #: What it sends compressed: nothing, what the job asks, or always (1-bit by default).
    compression: CompressionUse = "none"
    #: Workers talk only to their ring neighbours.
    decentralized: bool = False
    #: The ``optimizer`` settings it accepts.
    optimizers: tuple[str, ...] = tuple(OPTIMIZERS)
    #: When it exchanges (the cost model's rounds).
    exchange_every: ExchangeEvery = "step"
    #: Vectors of the parameters' size one worker checkpoints, the parameters included, beyond
    #: the optimizer's (the cost model's checkpoint and memory sizes).
    state_vectors: int = 1


@dataclass(frozen=True)
class CompressorInfo(Plugin):
    #: Draws random numbers (seeded per round and rank, so a replay sends the same bytes).
    stochastic: bool = False


@dataclass(frozen=True)
class PatternInfo(Plugin):
    """A communication pattern: how workers exchange a vector over a channel."""


#: How a channel's use is billed: its requests (by the rule of a price-table section), the hours
#: of the cache node serving it, or nothing (a store the job's own machines hold).
BilledBy = Literal["requests", "node_hours", "nothing"]


@dataclass(frozen=True)
class StackField:
    """A channel field that a deployed stack fills from one of its CloudFormation outputs."""

    field: str  # the job file's field: "bucket"
    output: str  # the output holding the stack's value: "CommBucketName"
    named: str  # a refusal says "this stack's {named} 'x', not 'y'": "S3 channel is bucket"


@dataclass(frozen=True)
class ChannelInfo(Plugin):
    """A channel kind, described once (built in: ``lambdaml/channels/kinds/``): what a job file
    says of it, what it can do, what a stack or this machine provides for it, how it is priced.
    Everything outside the channel's own module asks this description."""

    #: Its job-file model (``module:class``, a subclass of ``lambdaml.config.ChannelSpec``).
    spec: str = "lambdaml.config.channel:ChannelSpec"
    #: How messages name it ("S3", "in-memory"); empty: its name.
    title: str = ""
    #: Workers in separate processes (Lambda functions) reach one store through it; False: its
    #: workers run as threads of one process, sharing one channel.
    connects_processes: bool = True
    #: Reads part of a value in one request (``Channel.ranged_reads``).
    ranged_reads: bool = False
    #: Keeps one write request's values in the order sent (``Channel.ordered_writes``).
    ordered_writes: bool = False
    #: The store admits only clients that authenticate (AWS's IAM), whatever the job file says;
    #: False: only where the job gives it credentials (``auth``). Under ``integrity: auto`` values
    #: carry a MAC exactly where the store admits anyone.
    authenticates_clients: bool = False
    #: The AWS service it is: its endpoint in a local stack's record, and moto serves it here.
    aws_service: str | None = None
    #: How it is billed, and the price-table section its price comes from: the rule its requests
    #: are priced by, or the cache node types (the cost model's key for it).
    billed_by: BilledBy = "nothing"
    prices: str | None = None
    #: The fields a deployed stack fills from its outputs.
    stack_fields: tuple[StackField, ...] = ()
    #: Served by the stack's cache (its outputs ``CacheKind`` and ``CacheEndpoint``: host and port) ...
    stack_cache: bool = False
    #: ... which on AWS speaks TLS only, with an AUTH token in Secrets Manager (``CacheAuthSecretArn``).
    stack_cache_secured: bool = False
    #: Starts a server of it on a free loopback port (``module:function`` returning a
    #: ``lambdaml.local.services.Service``), for ``lambdaml local up --cache`` and calibration.
    local_server: str | None = None

    @property
    def called(self) -> str:
        return self.title or self.name


@dataclass(frozen=True)
class BackendInfo(Plugin):
    """A backend: where a job's workers run."""


P = TypeVar("P", bound=Plugin)


class PluginTable(Mapping[str, P]):
    """One kind's descriptions: the built-in ones, then those that installed packages declare.

    A built-in name is answered without reading any package's metadata; an unknown name, or
    listing them all, reads the entry points first (once per process).
    """

    def __init__(self, description: type[P], *plugins: P, built_in: str | None = None) -> None:
        self.description = description
        self._entries = {p.name: p for p in plugins}
        #: ``module:attribute`` of more built-in descriptions' paths, read when the table is first asked.
        self._built_in = built_in

    def _load_built_in(self) -> None:
        path, self._built_in = self._built_in, None  # a description that asks the table meanwhile sees the rest
        if path is None:
            return
        try:
            found = [_attribute(p) for p in _paths(path)]
        except BaseException:
            self._built_in = path
            raise
        built = {p.name: p for p in found if isinstance(p, self.description)}
        if len(built) != len(found):
            raise ConfigError(f"{path} names something that is not a {self.description.__name__}")
        for name, plugin in self._entries.items():
            if built.get(name, plugin) != plugin:
                raise ConfigError(f"{name!r} is already a {self.description.__name__}: a plug-in cannot replace it")
        self._entries = {**built, **self._entries}

    def add(self, plugin: P) -> None:
        self._load_built_in()
        if plugin.name in self._entries and self._entries[plugin.name] != plugin:
            raise ConfigError(f"{plugin.name!r} is already a {self.description.__name__}: a plug-in cannot replace it")
        self._entries[plugin.name] = plugin

    def __setitem__(self, name: str, plugin: P) -> None:
        if name != plugin.name:
            raise ConfigError(f"plug-in {plugin.name!r} cannot be listed as {name!r}")
        self.add(plugin)

    def __delitem__(self, name: str) -> None:
        """Forget a plug-in added for a while (as tests do)."""
        del self._entries[name]

    def __getitem__(self, name: str) -> P:
        self._load_built_in()
        if name not in self._entries:
            load_entry_points()
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self._load_built_in()
        load_entry_points()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._load_built_in()
        load_entry_points()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load_built_in()
        if name not in self._entries:
            load_entry_points()
        return name in self._entries


def _attribute(path: str) -> object:
    """The object at ``module:attribute`` (a built-in description, or the paths of them)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _paths(path: str) -> list[str]:
    paths = _attribute(path)
    if not isinstance(paths, list | tuple) or not all(isinstance(p, str) for p in paths):
        raise ConfigError(f"{path} is not a sequence of 'module:attribute' paths")
    return list(paths)


def _index(description: type[P], *plugins: P) -> PluginTable[P]:
    return PluginTable(description, *plugins)


MODELS: Mapping[str, ModelInfo] = _index(
    ModelInfo,
    ModelInfo("lr", "lambdaml.models.linear:LogisticRegression", binary=True),
    ModelInfo("svm", "lambdaml.models.linear:LinearSVM", binary=True),
    ModelInfo("softmax", "lambdaml.models.multiclass:SoftmaxRegression"),
    ModelInfo("multiclass_svm", "lambdaml.models.multiclass:MulticlassSVM"),
    ModelInfo("kmeans", "lambdaml.models.kmeans:KMeansModel", supervised=False),
    ModelInfo("mlp", "lambdaml.models.torch_models:MLP", needs="torch"),
    ModelInfo("mobilenet", "lambdaml.models.torch_models:MobileNet", needs="torch"),
    ModelInfo("resnet18", "lambdaml.models.torch_models:ResNet18", needs="torch"),
)

_RING = ("sgd",)
_SPECS = "lambdaml.config.algorithm"
ALGORITHMS: Mapping[str, AlgorithmInfo] = _index(
    AlgorithmInfo,
    AlgorithmInfo(
        "ga_sgd",
        "lambdaml.algorithms.ga_sgd:GASGD",
        supports_async=True,
        reduces_gradients=True,
        compression="optional",
    ),
    AlgorithmInfo(
        "ma_sgd",
        "lambdaml.algorithms.ma_sgd:MASGD",
        spec=f"{_SPECS}:LocalTrainingSpec",
        supports_async=True,
        compression="optional",
        exchange_every="local_epochs",
        state_vectors=2,  # and the model of the last average
    ),
    AlgorithmInfo(
        "admm",
        "lambdaml.algorithms.admm:ADMM",
        spec=f"{_SPECS}:ADMMSpec",
        exchange_every="local_epochs",
        state_vectors=3,  # and z and u
    ),
    AlgorithmInfo("kmeans", "lambdaml.algorithms.kmeans:KMeans", exchange_every="epoch"),
    AlgorithmInfo(
        "onebit_adam",
        "lambdaml.algorithms.onebit_adam:OneBitAdam",
        spec=f"{_SPECS}:OneBitAdamSpec",
        compression="required",
        optimizers=("sgd", "adam"),
        state_vectors=2,  # and the frozen variance
    ),
    AlgorithmInfo("dpsgd", "lambdaml.algorithms.decentralized:DPSGD", decentralized=True, optimizers=_RING),
    AlgorithmInfo(
        "dcd_psgd",
        "lambdaml.algorithms.decentralized:DCDPSGD",
        compression="optional",
        decentralized=True,
        optimizers=_RING,
        state_vectors=3,  # and the two neighbours' replicas
    ),
    AlgorithmInfo(
        "ecd_psgd",
        "lambdaml.algorithms.decentralized:ECDPSGD",
        compression="optional",
        decentralized=True,
        optimizers=_RING,
        state_vectors=3,  # and the two neighbours' estimates
    ),
    AlgorithmInfo(
        "choco_sgd",
        "lambdaml.algorithms.decentralized:CHOCOSGD",
        spec=f"{_SPECS}:CHOCOSGDSpec",
        compression="optional",
        decentralized=True,
        optimizers=_RING,
        state_vectors=4,  # and its public copy and the two neighbours'
    ),
)

COMPRESSORS: Mapping[str, CompressorInfo] = _index(
    CompressorInfo,
    CompressorInfo("identity", "lambdaml.compression.compressors:Identity"),
    CompressorInfo("onebit", "lambdaml.compression.compressors:OneBit"),
    CompressorInfo("qsgd", "lambdaml.compression.compressors:QSGD", stochastic=True),
    CompressorInfo("uint8", "lambdaml.compression.compressors:MinMaxUint8"),
    CompressorInfo("topk", "lambdaml.compression.compressors:TopK"),
)

PATTERNS: Mapping[str, PatternInfo] = _index(
    PatternInfo,
    PatternInfo("allreduce", "lambdaml.comm.patterns:AllReduce"),
    PatternInfo("scatter_reduce", "lambdaml.comm.patterns:ScatterReduce"),
    PatternInfo("scatter_reduce_2d", "lambdaml.comm.grid:ScatterReduce2D"),
)

#: Each built-in channel kind is described in a module of its own, with its job-file model: the
#: catalogue reads them the first time it is asked about a channel.
CHANNELS: Mapping[str, ChannelInfo] = PluginTable(ChannelInfo, built_in="lambdaml.channels.kinds:DESCRIPTIONS")

BACKENDS: Mapping[str, BackendInfo] = _index(
    BackendInfo,
    BackendInfo("local", "lambdaml.backends.local:LocalBackend"),
    BackendInfo("iaas-local", "lambdaml.backends.iaas:IaaSLocalBackend", needs="torch"),
)

#: Where ``data prepare`` takes a dataset's rows from: files in these formats, a generator, or a
#: small dataset shipped in a package (the readers are lambdaml.data.prepare's and .builtin's).
DATASET_FORMATS = ("libsvm", "csv", "npz", "parquet", "cifar10")
SYNTHETIC_DATASETS = ("higgs", "rcv1")
BUILTIN_DATASETS = ("digits", "breast_cancer", "mnist5k")

#: Every kind of plug-in, by the word its errors use.
KINDS: Mapping[str, Mapping[str, Plugin]] = {
    "model": MODELS,
    "algorithm": ALGORITHMS,
    "compressor": COMPRESSORS,
    "communication pattern": PATTERNS,
    "channel": CHANNELS,
    "backend": BACKENDS,
}


def register(plugin: Plugin, kind: str | None = None) -> None:
    """Add a plug-in's description to the catalogue, in this process only (a notebook, a test).

    ``kind``: the word of ``KINDS`` it goes under; by default the one its description's type is
    for. Declaring the description in the ``lambdaml.plugins`` entry-point group does the same in
    every process, workers included.
    """
    if kind is None:
        kinds = [k for k, table in KINDS.items() if isinstance(plugin, _table(table).description)]
        if len(kinds) != 1:
            raise ConfigError(f"say which kind of plug-in {plugin.name!r} is: one of {', '.join(KINDS)}")
        kind = kinds[0]
    if kind not in KINDS:
        raise UnknownName(f"unknown plug-in kind {kind!r}; known: {', '.join(KINDS)}")
    table = _table(KINDS[kind])
    if not isinstance(plugin, table.description):
        raise ConfigError(
            f"a {kind} plug-in is described by a {table.description.__name__}, not {type(plugin).__name__}"
        )
    table.add(plugin)


def _table(entries: Mapping[str, Plugin]) -> PluginTable[Plugin]:
    assert isinstance(entries, PluginTable)
    return entries


#: The import path the entry points were last read under (None: not yet read).
_entry_points_read_on: tuple[str, ...] | None = None


def load_entry_points() -> None:
    """Register what installed packages declare in the ``lambdaml.plugins`` group: once, and again
    where the import path has changed since (a notebook or a test that puts a package on it)."""
    global _entry_points_read_on
    if _entry_points_read_on == tuple(sys.path):
        return
    _entry_points_read_on = tuple(sys.path)
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            declared = point.load()
        except Exception as exc:  # a broken plug-in package: one line naming it, not a traceback
            raise ConfigError(f"plug-in {point.name!r} ({point.value}) cannot be loaded: {exc}") from None
        for plugin in declared if isinstance(declared, list | tuple) else [declared]:
            if not isinstance(plugin, Plugin):
                raise ConfigError(f"plug-in {point.name!r} ({point.value}) is not a plug-in description")
            register(plugin)
        logger.debug("plug-ins of %s loaded", point.value)


def lookup(entries: Mapping[str, P], kind: str, name: object) -> P:
    """The entry called ``name``; an unknown name is an error listing the known ones."""
    try:
        return entries[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise UnknownName(f"unknown {kind} {name!r}; known: {', '.join(sorted(entries))}") from None


def model(name: str) -> ModelInfo:
    return lookup(MODELS, "model", name)


def algorithm(name: str) -> AlgorithmInfo:
    return lookup(ALGORITHMS, "algorithm", name)


def channel(name: str) -> ChannelInfo:
    return lookup(CHANNELS, "channel", name)


def shared_channels() -> list[str]:
    """The channels workers in separate processes share (all but in-process ones): those a stack
    serves, calibration measures and the cost model tries by default."""
    return [name for name, info in CHANNELS.items() if info.connects_processes]


#: The synchronization protocols a job may name (``sync.protocol``).
PROTOCOLS = ("bsp", "asp", "ssp")


def check_relaxation(name: str, compression: str | None, *, error_feedback: bool | None, optimizer: str) -> None:
    """What an algorithm accepts of compression and optimizer (the job file's rule, and the cost model's).

    ``compression``: the compressor the job names (None: none given). One-line ConfigError otherwise.
    """
    kind = algorithm(name)
    if compression is not None and kind.compression == "none":
        hint = "; use dcd_psgd, ecd_psgd or choco_sgd" if kind.decentralized else ""
        raise ConfigError(f"algorithm {name!r} does not compress what it sends{hint}")
    if compression is not None and error_feedback and kind.decentralized:
        raise ConfigError(f"error_feedback does not apply to {name!r}, which compensates compression itself")
    if optimizer not in kind.optimizers:
        raise ConfigError(f"optimizer {optimizer!r} does not apply to algorithm {name!r}")


def check_protocol(name: str, protocol: str, *, compression_given: bool, compressed: bool, pattern: str) -> None:
    """What runs under a protocol and a pattern (the job file's rule, and the cost model's).

    ``compression_given``: the job names a compression; ``compressed``: it sends compressed
    values (also 1-bit Adam by default). ``pattern``: the pattern asked for, or "auto".
    """
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    if protocol != "bsp" and not algorithm(name).supports_async:
        raise ConfigError(f"algorithm {name!r} runs only under protocol 'bsp', not {protocol!r}")
    if protocol != "bsp" and compression_given:
        raise ConfigError(f"compression runs under protocol 'bsp' only, not {protocol!r}")
    if pattern == "scatter_reduce_2d" and compressed:
        # Its row sums are reduced again down the columns: compressing them needs error feedback of its own.
        raise ConfigError("compression runs over pattern 'allreduce' or 'scatter_reduce', not 'scatter_reduce_2d'")
