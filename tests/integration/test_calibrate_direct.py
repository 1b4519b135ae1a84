"""``lambdaml calibrate`` measures the direct channel's links here (loopback, meeting through a
Redis), and ``advise`` on that profile prices direct rows from what it measured, not FMI's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytic_model import load_profile
from analytic_model.kinds import PUBLISHED_NOTE
from lambdaml.calibrate import Effort, channel_figures, local_channels
from lambdaml.cli import main
from lambdaml.errors import LambdaMLError


@pytest.mark.timeout(180)
def test_calibrate_times_direct_links_and_advise_uses_them(
    moto_url: str, redis_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "local.json"
    argv = ["calibrate", "--quick", "--channels", "direct", "--redis", f"127.0.0.1:{redis_port}"]
    assert main([*argv, "--endpoint-url", moto_url, "--out", str(out), "--output", "json"]) == 0
    captured = capsys.readouterr()
    assert "direct" in json.loads(captured.out)["channels"] and "links between processes" in captured.err

    profile = load_profile(out)
    direct = profile.channel("direct")
    # Loopback links: a message well under 50 ms, bytes faster than 10 MB/s, and nothing of a store's.
    assert 0 < direct.latency_put_s == direct.latency_get_s < 0.05
    assert direct.bandwidth_put_Bps > 1e7 and direct.server_put_s == 0 and direct.cleanup_cpu_s == 0
    assert 0 <= direct.wait_s < 0.05
    assert "measured by 'lambdaml calibrate'" in profile.origin["channels.direct.latency_put_s"]
    assert direct.small_bytes == 64 * 1024  # the communicator's switch is code, from the defaults

    advise = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "4MB", "--samples", "40000"]
    assert main([*advise, "--profile", str(out), "--channels", "direct,redis", "--workers", "2,4", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["option"] == "direct"]
    assert {r["workers"] for r in rows} == {2, 4}
    assert all(r["pattern"] == "doubling" and PUBLISHED_NOTE not in r["notes"] for r in rows)
    assert all(r["time"]["communicate_s"] > 0 and r["costs"]["channel"] > 0 for r in rows)


@pytest.mark.timeout(120)
def test_a_direct_probe_that_cannot_open_its_links_is_one_clear_error(redis_port: int) -> None:
    addresses = {"redis": f"127.0.0.1:{redis_port}"}
    with local_channels(["direct"], endpoint_url="http://127.0.0.1:1", addresses=addresses) as (specs, _):
        spec = specs["direct"]
        assert spec.rendezvous.port == redis_port  # type: ignore[attr-defined]  # --redis's server, not a new one
        # An address this machine does not have: no worker can listen, so no link can form.
        broken = spec.model_copy(update={"listen_host": "192.0.2.1", "link_timeout_s": 1.0})
        with pytest.raises(LambdaMLError, match=r"^calibrating direct links: .*cannot listen on 192\.0\.2\.1"):
            channel_figures(broken, Effort.quick())
