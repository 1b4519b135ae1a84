"""What ``lambdaml calibrate`` measured on one target: a partial profile, as typed records.

``save_profile`` writes one as JSON; ``load_profile`` lays that over the defaults, so what
was not measured (get batches, EC2 instances, prices) keeps its documented value. The records group a
channel's figures by how they are measured; in the file they are one object, as
``ChannelPerf`` names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from analytic_model.profile import CodecPasses, Host, MeasuredCompute, SparseCompute
from analytic_model.records import FLAT, Reader, json_name, to_json


@dataclass(frozen=True)
class CallFigures:
    """One worker's calls: latency, the extra cost per batched value, bandwidth, its own CPU's share."""

    latency_put_s: float
    latency_get_s: float
    extra_put_s: float
    extra_get_s: float
    bandwidth_put_Bps: float
    bandwidth_get_Bps: float
    cpu_share_put: float
    cpu_share_get: float
    # Values whose buffers malloc maps afresh (``ChannelPerf.bytes_s``): measured once, not in every view.
    big_value_bytes: float | None = None
    big_from_bytes: float | None = None
    bandwidth_put_big_Bps: float | None = None
    bandwidth_get_big_Bps: float | None = None


@dataclass(frozen=True)
class StoreFigures:
    """What the store (or the machine all processes share) spends per request, and its byte limits."""

    server_put_s: float
    server_get_s: float
    server_put_Bps: float | None  # None: too few large requests to tell a byte limit apart
    server_get_Bps: float | None


@dataclass(frozen=True)
class ExchangeFigures:
    """What workers exchanging values through the real patterns lose beyond one worker's calls."""

    crowding: float
    step_wake_s: float
    wait_s: float
    wait_per_worker_s: float
    sr_wait_s: float
    sr_wait_per_worker_s: float
    bytes_slowdown: float
    sr_bytes_slowdown: float
    ring_wait_s: float | None = None  # the ring methods' neighbour exchange (profiles before it lack them)
    ring_wait_per_worker_s: float | None = None
    store_bytes_slowdown: float = 1.0  # profiles before it lack it


@dataclass(frozen=True)
class ChannelCalibration:
    calls: CallFigures = field(metadata=FLAT)
    store: StoreFigures = field(metadata=FLAT)
    exchange: ExchangeFigures = field(metadata=FLAT)
    server_delete_s: float
    cleanup_cpu_s: float
    max_item_bytes: int | None
    server_growth: float | None = None  # measured with more than two processes only
    server_range_Bps: float | None = None  # where a ranged read costs the store the whole object


@dataclass(frozen=True)
class ComputeCalibration:
    measured: Mapping[str, MeasuredCompute]
    add_Bps: float
    vcpu_gflops: Mapping[str, float] = field(default_factory=dict)  # from the dense models measured
    per_step_s: Mapping[str, float] = field(default_factory=dict)
    codec_passes: Mapping[str, CodecPasses] = field(default_factory=dict)  # per compressor
    mac_Bps: float | None = None  # calibrations before it lack it
    sparse: SparseCompute | None = None  # a sparse linear step's rates (calibrations before it lack them)


@dataclass(frozen=True)
class FaasCalibration:
    shared_cores: float | None  # None: the workers do not share this machine's cores
    cold_start_s: Mapping[str, float]
    invoke_s: float
    warm_start_s: float | None = None  # a stack's functions only
    network_Bps: float | None = None  # where loading from the data store was measured
    load_latency_s: float | None = None
    heartbeat_s: float | None = None
    heartbeat_per_worker_s: float | None = None


@dataclass(frozen=True)
class LambdaCalibration:
    """What the local backend's worker processes do instead of Lambda's: no checkpoints, no billed INIT."""

    checkpoint_every: int | None
    init_billed: bool


@dataclass(frozen=True)
class Ec2Calibration:
    """The ``iaas-local`` backend's gloo group on this machine, under the ``ec2`` section's names."""

    startup_s: float  # starting torchrun until every rank has joined the group
    unbilled_startup_s: float  # a local run is billed for its whole wall time: 0
    ring_latency_s: float  # one ring step's fixed cost on loopback
    network_Bps: float  # bytes a second one ring step moves between two ranks on loopback
    wait_s: float  # per round: waiting for a peer the machine's other work delayed


@dataclass(frozen=True)
class Calibration:
    target: str
    source: str = field(metadata=json_name("_source"))
    created: str
    host: Host
    channels: Mapping[str, ChannelCalibration]
    compute: ComputeCalibration
    faas: FaasCalibration
    lambda_: LambdaCalibration | None = field(default=None, metadata=json_name("lambda"))
    ec2: Ec2Calibration | None = None  # where torch was there to time the iaas-local group

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        """A calibration as ``to_json`` (or ``save_profile``) wrote it."""
        values = {key: value for key, value in data.items() if key != "version"}
        return Reader(str(values.get("target", "?"))).record(cls, values)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    def with_channel(self, kind: str, figures: ChannelCalibration) -> Calibration:
        """This calibration with one channel measured (again)."""
        return replace(self, channels={**self.channels, kind: figures})

    def with_heartbeat(self, alone_s: float, per_worker_s: float) -> Calibration:
        """This calibration with the workers' heartbeat measured (again)."""
        return replace(self, faas=replace(self.faas, heartbeat_s=alone_s, heartbeat_per_worker_s=per_worker_s))
