"""``lambdaml calibrate`` on the local services, and ``advise`` from the profile it writes."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from analytic_model import load_profile
from lambdaml.calibrate import cores
from lambdaml.calibrate.channels import measure_ranged_reads
from lambdaml.calibrate.gloo import torch_available
from lambdaml.calibrate.probing import Effort
from lambdaml.channels import open_channel
from lambdaml.cli import main
from lambdaml.config import ChannelSpec
from lambdaml.local.services import free_port


@pytest.mark.timeout(180)
def test_calibrate_measures_this_machine_and_advise_uses_it(
    moto_url: str, redis_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "local.json"
    argv = ["calibrate", "--quick", "--channels", "redis", "--redis", f"127.0.0.1:{redis_port}"]
    assert main([*argv, "--endpoint-url", moto_url, "--out", str(out), "--output", "json"]) == 0
    captured = capsys.readouterr()
    measured = json.loads(captured.out)  # stdout is the JSON alone; the steps went to stderr
    assert measured["profile"] == str(out) and "redis" in measured["channels"] and "measuring" in captured.err

    profile = load_profile(out)
    assert profile.target == "local" and profile.shared_cores == cores()
    redis = profile.channel("redis")
    assert 0 < redis.latency_get_s < 0.1 and 0 < redis.latency_put_s < 0.1  # loopback: well under 100 ms
    assert redis.bandwidth_get_Bps > 1e6 and redis.server_get_s > 0
    assert redis.get_batch == 1000  # not measured: lambdaml's MGET, from the defaults
    # A Python client spends much of a loopback call in its own code; the rest is the server and the kernel.
    assert 0.05 < redis.cpu_share_get <= 1.0 and 0.05 < redis.cpu_share_put <= 1.0
    assert redis.shared_cores == cores()
    # Each pattern's rounds of large values were measured: its bytes move at most a few times
    # slower (5 is where the solve stops; a machine loaded by other work gets there).
    assert 1.0 <= redis.bytes_slowdown <= 5.0 and redis.sr_bytes_slowdown is not None
    assert 1.0 <= redis.sr_bytes_slowdown <= 5.0
    # Where the store sets a pattern's rounds of large values, its bytes' slowdown in them (10: the bound).
    assert 1.0 <= redis.store_bytes_slowdown <= 10.0
    assert "measured by 'lambdaml calibrate'" in profile.origin["channels.redis.store_bytes_slowdown"]
    # The ring methods' neighbour exchange was run too: its own wait loss, at 2 workers and beyond.
    assert redis.ring_wait_s is not None and 0 <= redis.ring_wait_s < 1.0
    assert redis.ring_wait_per_worker_s is not None and redis.ring_wait_per_worker_s >= 0
    # A value over malloc's largest mmap threshold was timed: its bytes' rates, and where they start.
    assert redis.big_from_bytes == 32 * 2**20 and redis.big_value_bytes is not None
    assert redis.big_value_bytes > redis.big_from_bytes
    assert redis.bandwidth_get_big_Bps is not None and redis.bandwidth_get_big_Bps > 1e6
    assert redis.bandwidth_put_big_Bps is not None and redis.bandwidth_put_big_Bps > 1e6
    assert redis.server_range_Bps is None  # no native ranged reads: nothing read beyond them
    lr = profile.measured["lr:29:dense"]
    assert 0 < lr.per_sample_s < 1e-4 and lr.per_step_s > 0
    assert profile.number("faas.cold_start_s.numpy") > 0 and profile.number("faas.network_Bps") > 1e6
    assert profile.figure("lambda.checkpoint_every") == 50  # local workers checkpoint as Lambda's do
    # Heartbeats on moto over loopback: well under a second, and measured.
    assert 0 < profile.number("faas.heartbeat_s") < 1 and 0 <= profile.number("faas.heartbeat_per_worker_s") < 1
    assert "measured by 'lambdaml calibrate'" in profile.origin["faas.heartbeat_s"]
    assert "measured by 'lambdaml calibrate'" in profile.origin["channels.redis.latency_get_s"]
    assert "Lambda" in profile.origin["lambda.vcpu_one_at_mb"]  # what was not measured keeps its source
    if torch_available():  # the iaas-local backend's gloo group: its start-up and its ring on loopback
        assert "measured by 'lambdaml calibrate'" in profile.origin["ec2.startup_s"]
        assert 0 < profile.number("ec2.startup_s") < 120 and profile.number("ec2.unbilled_startup_s") == 0
        assert 0 <= profile.number("ec2.ring_latency_s") < 0.05 and profile.number("ec2.network_Bps") > 1e7
        assert 0 <= profile.number("ec2.wait_s") < 1.0

    advise = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "4MB", "--samples", "40000"]
    assert main([*advise, "--profile", str(out), "--channels", "redis", "--workers", "2,4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    faas = [r for r in rows if r["platform"] == "faas"]
    assert faas and all(r["compute_from"] == "measured" for r in faas)
    iaas = [r for r in rows if r["platform"] == "iaas"]
    assert iaas and all(r["time"]["startup_s"] == profile.number("ec2.startup_s") for r in iaas)
    # Four workers on two cores compute no faster than two: the profile shares its cores (the
    # first step after each wait pays the measured wake-up on top, whatever the core share).
    wake = redis.step_wake_s
    assert 0 <= wake < 0.01
    per_worker = {
        r["workers"]: r["time"]["compute_s"] - r["rounds"] * wake for r in faas if r["pattern"] == "allreduce"
    }
    if cores() <= 2:
        assert per_worker[4] == pytest.approx(per_worker[2], rel=0.01)


def test_calibrate_finds_which_store_reads_a_whole_object_for_a_range(moto_url: str, redis_port: int) -> None:
    effort = Effort()
    # moto reads and copies the whole value to serve a range of it: what 32 MB cost the range
    # is a rate, of memory copies.
    with open_channel(
        ChannelSpec(kind="s3", bucket=f"lambdaml-range-{secrets.token_hex(3)}", endpoint_url=moto_url)
    ) as s3:
        s3.ensure()
        rate = measure_ranged_reads(s3, effort)
    assert rate is not None and 1e8 < rate < 1e11
    # Redis has no native ranges here: nothing to measure.
    with open_channel(ChannelSpec(kind="redis", port=redis_port)) as redis:
        assert measure_ranged_reads(redis, effort) is None


def test_calibrate_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A stack whose CloudFormation endpoint answers nothing (a closed loopback port): never AWS.
    monkeypatch.setenv("LAMBDAML_HOME", str(tmp_path))
    (tmp_path / "stacks").mkdir()
    dead = f"http://127.0.0.1:{free_port()}"
    record = {"endpoints": {"cloudformation": dead, "s3": dead}, "region": "us-east-1", "outputs": {}}
    (tmp_path / "stacks" / "gone.json").write_text(json.dumps(record))
    for argv, message in (
        (["calibrate", "--stack", "gone"], "error: local stack 'gone' is down (nothing answers at http://127.0.0.1:"),
        (
            ["calibrate", "--channels", "kafka"],
            "error: lambdaml calibrate: argument --channels: unknown channel 'kafka'; known: s3, redis, memcached, ",
        ),
        (["calibrate", "--model", "gpt"], "error: lambdaml calibrate: argument --model: invalid choice: 'gpt'"),
        (["calibrate", "--batch-size", "1"], "error: --features must be at least 1 and --batch-size at least 2"),
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(message), err
        assert err.count("\n") == 1 and "Traceback" not in err
