"""The plug-in catalogue: every plug-in's name, where it lives, what it needs and what it can do.

Checking a job reads this catalogue and never imports a plug-in. So the coordinator, a zip
function without torch, validates a torch job like any other, and the cost model lists
exactly what a job file accepts. The registries (``lambdaml.registry``) load the plug-ins
themselves, lazily, from the paths given here; a test holds every plug-in's own class
attributes to its entry.
"""

from __future__ import annotations

import logging
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
class AlgorithmInfo(Plugin):
    #: Has an ASP/SSP form (consensus methods such as ADMM do not).
    supports_async: bool = False
    #: Sums gradients over workers every step (GA-SGD): DDP can do it in backward.
    reduces_gradients: bool = False
    #: What it sends compressed: nothing, what the job asks, or always (1-bit by default).
    compression: CompressionUse = "none"
    #: Workers talk only to their ring neighbours.
    decentralized: bool = False
    #: The ``optimizer`` settings it accepts.
    optimizers: tuple[str, ...] = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class CompressorInfo(Plugin):
    #: Draws random numbers (seeded per round and rank, so a replay sends the same bytes).
    stochastic: bool = False


@dataclass(frozen=True)
class PatternInfo(Plugin):
    """A communication pattern: how workers exchange a vector over a channel."""


@dataclass(frozen=True)
class ChannelInfo(Plugin):
    """A channel kind: the store workers synchronize through."""


@dataclass(frozen=True)
class BackendInfo(Plugin):
    """A backend: where a job's workers run."""


P = TypeVar("P", bound=Plugin)


class PluginTable(Mapping[str, P]):
    """One kind's descriptions: the built-in ones, then those that installed packages declare.

    A built-in name is answered without reading any package's metadata; an unknown name, or
    listing them all, reads the entry points first (once per process).
    """

    def __init__(self, description: type[P], *plugins: P) -> None:
        self.description = description
        self._entries = {p.name: p for p in plugins}

    def add(self, plugin: P) -> None:
        if plugin.name in self._entries and self._entries[plugin.name] != plugin:
            raise ConfigError(f"{plugin.name!r} is already a {self.description.__name__}: a plug-in cannot replace it")
        self._entries[plugin.name] = plugin

    def __getitem__(self, name: str) -> P:
        if name not in self._entries:
            load_entry_points()
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        load_entry_points()
        return iter(list(self._entries))

    def __len__(self) -> int:
        load_entry_points()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        if name not in self._entries:
            load_entry_points()
        return name in self._entries


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
ALGORITHMS: Mapping[str, AlgorithmInfo] = _index(
    AlgorithmInfo,
    AlgorithmInfo(
        "ga_sgd",
        "lambdaml.algorithms.ga_sgd:GASGD",
        supports_async=True,
        reduces_gradients=True,
        compression="optional",
    ),
    AlgorithmInfo("ma_sgd", "lambdaml.algorithms.ma_sgd:MASGD", supports_async=True, compression="optional"),
    AlgorithmInfo("admm", "lambdaml.algorithms.admm:ADMM"),
    AlgorithmInfo("kmeans", "lambdaml.algorithms.kmeans:KMeans"),
    AlgorithmInfo(
        "onebit_adam", "lambdaml.algorithms.onebit_adam:OneBitAdam", compression="required", optimizers=("sgd", "adam")
    ),
    AlgorithmInfo("dpsgd", "lambdaml.algorithms.decentralized:DPSGD", decentralized=True, optimizers=_RING),
    AlgorithmInfo(
        "dcd_psgd",
        "lambdaml.algorithms.decentralized:DCDPSGD",
        compression="optional",
        decentralized=True,
        optimizers=_RING,
    ),
    AlgorithmInfo(
        "ecd_psgd",
        "lambdaml.algorithms.decentralized:ECDPSGD",
        compression="optional",
        decentralized=True,
        optimizers=_RING,
    ),
    AlgorithmInfo(
        "choco_sgd",
        "lambdaml.algorithms.decentralized:CHOCOSGD",
        compression="optional",
        decentralized=True,
        optimizers=_RING,
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

CHANNELS: Mapping[str, ChannelInfo] = _index(
    ChannelInfo,
    ChannelInfo("s3", "lambdaml.channels.s3:S3Channel"),
    ChannelInfo("redis", "lambdaml.channels.redis:RedisChannel"),
    ChannelInfo("memcached", "lambdaml.channels.memcached:MemcachedChannel"),
    ChannelInfo("dynamodb", "lambdaml.channels.dynamodb:DynamoDBChannel"),
    ChannelInfo("memory", "lambdaml.channels.memory:MemoryChannel"),
)
#: The channels that connect separate processes (all but the in-process one): what a stack
#: serves and calibration measures.
SHARED_CHANNELS: tuple[str, ...] = ("s3", "redis", "memcached", "dynamodb")

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


_loaded_entry_points = False


def load_entry_points() -> None:
    """Register what installed packages declare in the ``lambdaml.plugins`` group (once)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            declared = point.load()
        except Exception as exc:  # a broken plug-in package must not take the others down
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
