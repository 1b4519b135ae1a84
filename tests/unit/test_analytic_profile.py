"""The typed profile: JSON round trips of the defaults and of a calibration, one-line errors, and
the algorithms the cost model takes from the plug-in catalogue."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from analytic_model import Workload, aws_profile, load_profile, predict_faas
from analytic_model.calibration import (
    Calibration,
    CallFigures,
    ChannelCalibration,
    ComputeCalibration,
    ExchangeFigures,
    FaasCalibration,
    LambdaCalibration,
    StoreFigures,
)
from analytic_model.profile import CodecPasses, Host, MeasuredCompute, Profile, save_profile, with_figures
from analytic_model.tables import aws_defaults
from lambdaml import catalogue
from lambdaml.calibrate.compute import measure_add_Bps, measure_codec_passes
from lambdaml.errors import ConfigError


def _calibration(growth: float | None = None) -> Calibration:
    calls = CallFigures(2e-4, 1.9e-4, 3e-5, 2e-5, 8e8, 9e8, 0.8, 0.7)
    exchange = ExchangeFigures(0.2, 8e-5, 3.6e-4, 1.9e-4, 3.2e-4, 2.2e-4, 1.01, 1.02)
    redis = ChannelCalibration(calls, StoreFigures(4e-5, 5e-5, 6e9, None), exchange, 4e-5, 1e-4, None, growth)
    return Calibration(
        target="local",
        source="measured here",
        created="2026-12-01T00:00:00+00:00",
        host=Host("vm", 2, "x86_64", "3.11.9"),
        channels={"redis": redis},
        compute=ComputeCalibration({"lr:29:dense": MeasuredCompute(7e-8, 2e-5, 116.0)}, 2.5e9, {"linear": 1.6}),
        faas=FaasCalibration(2, {"numpy": 0.3}, 0.16, network_Bps=1e9, load_latency_s=0.006),
        lambda_=LambdaCalibration(checkpoint_every=None, init_billed=False),
    )


def test_the_shipped_defaults_read_into_typed_records_and_back() -> None:
    profile = Profile.from_json(aws_defaults())
    assert profile == aws_profile() and profile.origin == aws_profile().origin
    assert profile.lambda_.vcpu_one_at_mb == 1769 and profile.lambda_.checkpoint_every == 50
    assert profile.faas.cold_start_s["torch"] == 5.0 and profile.poll.factor == 1.5
    assert profile.instance("c5.large").name == "c5.large" and profile.channel("s3").kind == "s3"
    again = Profile.from_json(json.loads(json.dumps(profile.to_json())))
    assert again == profile  # every figure survives its JSON (only the sources stay behind)
    assert profile.figure("lambda.checkpoint_every") == 50 and profile.number("codec_header_bytes") == 56


def test_a_calibration_is_written_as_today_s_files_and_read_back(tmp_path: Path) -> None:
    measured = _calibration()
    data = measured.to_json()
    assert data["_source"] == "measured here" and data["lambda"] == {"checkpoint_every": None, "init_billed": False}
    redis = data["channels"]["redis"]
    assert redis["latency_put_s"] == 2e-4 and redis["server_get_Bps"] is None and redis["max_item_bytes"] is None
    assert "server_growth" not in redis and "warm_start_s" not in data["faas"]  # not measured: left out
    assert "per_step_s" not in data["compute"]  # no dense model's step measured
    path = save_profile(measured, tmp_path / "local.json")
    assert Calibration.from_json(json.loads(path.read_text())) == measured
    profile = load_profile(path)
    assert profile.target == "local" and profile.shared_cores == 2 and profile.channel("redis").shared_cores == 2
    assert profile.channel("redis").server_get_Bps is None  # measured: no byte limit
    assert profile.channel("redis").get_batch == 1000  # not measured: the defaults'
    assert profile.channel("redis").server_growth == 0.0
    assert profile.measured["lr:29:dense"].per_sample_s == 7e-8 and profile.lambda_.checkpoint_every is None
    assert profile.origin["channels.redis.crowding"] == "measured here"
    assert load_profile(save_profile(_calibration(growth=0.05), path)).channel("redis").server_growth == 0.05


def test_a_calibration_with_another_channel() -> None:
    measured = _calibration()
    both = measured.with_channel("s3", measured.channels["redis"])
    assert set(both.channels) == {"redis", "s3"} and set(measured.channels) == {"redis"}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"lambda": {"timeout_s": -1}}, "profile 'aws': lambda.timeout_s must be a non-negative number, got -1"),
        ({"lambda": {"timeot_s": 1}}, "profile lambda: unknown field 'timeot_s'"),
        ({"lambda": {"init_billed": "yes"}}, "lambda.init_billed must be bool, got 'yes'"),
        ({"faas": {"cold_start_s": {"numpy": "x"}}}, "faas.cold_start_s.numpy must be a non-negative number"),
        ({"instances": {"c5.large": {"vcpus": 2.5}}}, "instances.c5.large.vcpus must be a non-negative whole number"),
        ({"channels": {"kafka": {"latency_put_s": 1}}}, "profile channels.kafka: missing field 'latency_get_s'"),
        ({"faas": 3}, "profile faas must be an object, got 3"),
    ],
)
def test_bad_figures_are_one_line_errors(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        with_figures(aws_profile(), changes)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_calibration_file_with_an_unknown_figure_is_refused() -> None:
    data = _calibration().to_json()
    data["channels"]["redis"]["latency"] = 1.0
    with pytest.raises(ConfigError, match=r"profile channels\.redis: unknown field 'latency'"):
        Calibration.from_json(data)


def test_the_algorithms_come_from_the_catalogue() -> None:
    profile = aws_profile()
    for name in catalogue.ALGORITHMS:
        workload = Workload("kmeans" if name == "kmeans" else "lr", 1e6, 10_000, features=28, algorithm=name)
        assert predict_faas(workload, 2, "redis", "allreduce", 3008, profile).time_s > 0
    with pytest.raises(ConfigError, match="unknown algorithm 'lbfgs'; known: ") as caught:
        Workload("lr", 1e6, 10_000, features=28, algorithm="lbfgs").check(profile)
    assert all(name in str(caught.value) for name in catalogue.ALGORITHMS)


def test_calibrated_codec_passes_replace_the_shipped_ones_for_the_compressors_measured(tmp_path: Path) -> None:
    base = _calibration()
    onebit = CodecPasses(compress=4.0, decompress=3.0)
    measured = replace(base, compute=replace(base.compute, codec_passes={"onebit": onebit}))
    profile = load_profile(save_profile(measured, tmp_path / "local.json"))
    shipped = load_profile(save_profile(base, tmp_path / "plain.json"))
    assert profile.compute.codec_passes == {"onebit": onebit} and shipped.compute.codec_passes == {}

    def round_s(used: Profile, compression: str) -> float:
        workload = Workload("lr", dataset_bytes=1e6, samples=3200, features=100_000, sparse=True,
                            batch_size=100, algorithm="ga_sgd", compression=compression)  # fmt: skip
        return predict_faas(workload, 2, "redis", "allreduce", 3008, used).round_s

    # Fewer measured passes than the shipped 20 and 14: a shorter round; qsgd was not measured.
    assert round_s(profile, "onebit") < round_s(shipped, "onebit")
    assert round_s(profile, "qsgd") == round_s(shipped, "qsgd")


def test_calibration_measures_every_compressor_s_passes() -> None:
    passes = measure_codec_passes(measure_add_Bps())
    assert set(passes) == set(catalogue.COMPRESSORS)
    assert all(math.isfinite(p.compress) and math.isfinite(p.decompress) for p in passes.values())
    assert all(p.compress >= 0 and p.decompress >= 0 for p in passes.values())


def test_a_calibrated_mac_rate_times_the_hashing_of_authenticated_values(tmp_path: Path) -> None:
    base = _calibration()
    profile = load_profile(save_profile(replace(base, compute=replace(base.compute, mac_Bps=4e8)), tmp_path / "m.json"))
    older = load_profile(save_profile(base, tmp_path / "plain.json"))  # a calibration before the MAC was timed
    assert profile.compute.mac_Bps == 4e8 and older.compute.mac_Bps == aws_profile().compute.mac_Bps
    assert profile.channel("redis").mac_Bps is None and profile.channel("redis", authenticated=True).mac_Bps == 4e8

    def round_s(authenticated: bool | None) -> float:
        workload = Workload("lr", dataset_bytes=1e6, samples=3200, features=1_000_000, batch_size=100)
        return predict_faas(workload, 4, "redis", "scatter_reduce", 3008, profile, authenticated=authenticated).round_s

    # A local job on Redis without a password MACs its values: by default the round hashes them.
    assert round_s(None) == round_s(True) > round_s(False)


def test_jobs_mac_their_values_where_the_store_has_no_authentication_of_its_own() -> None:
    from analytic_model.prediction import values_authenticated

    local = replace(aws_profile(), target="local")
    assert values_authenticated(aws_profile(), "memcached") and not values_authenticated(aws_profile(), "redis")
    assert values_authenticated(local, "redis") and values_authenticated(local, "memcached")
    assert not any(values_authenticated(p, c) for p in (local, aws_profile()) for c in ("s3", "dynamodb"))


def test_calibration_times_the_mac_as_sealing_does() -> None:
    from lambdaml.calibrate.compute import measure_mac_Bps

    rate = measure_mac_Bps()
    # HMAC-SHA256 streams 0.3-2 GB/s on one core; below 20 MB/s the probe timed something else.
    assert 2e7 < rate < 2e10
