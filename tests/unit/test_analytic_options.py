"""The advisor's newer options and how sure it says it is: arm64 Lambda, S3 Express One Zone
(modelled only), every prediction's range, and "too close to call"."""

from __future__ import annotations

import json

import pytest

from analytic_model import Workload, advise, aws_profile, predict_faas
from analytic_model.advisor import Advice
from analytic_model.prediction import Prediction
from analytic_model.profile import with_figures
from analytic_model.tables import prices
from analytic_model.uncertainty import Uncertainty
from lambdaml import catalogue
from lambdaml.cli import main
from lambdaml.config import parse_job
from lambdaml.errors import ConfigError

HIGGS = Workload("lr", dataset_bytes=1.3e9, samples=11_000_000, features=28, algorithm="admm", epochs=10)
RESNET = Workload("resnet50", dataset_bytes=1.5e8, samples=50_000, epochs=1, batch_size=64)
ADVISE = ["advise", "--model", "lr", "--features", "28", "--dataset-bytes", "1.3GB", "--samples", "11e6"]
SMALL = ["--workers", "1,10", "--memory", "3008", "--instances", "c5.large", "--json"]
MODELLED = "modelled only: no channel yet"


def advise_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert main([*ADVISE, *SMALL, *args]) == 0
    data: dict = json.loads(capsys.readouterr().out)  # type: ignore[type-arg]
    return data


# ---- arm64 ---------------------------------------------------------------------------------------


def test_arm64_rows_cost_less_at_equal_speed_and_run_faster_only_where_the_profile_says_so() -> None:
    profile = aws_profile()
    assert profile.compute.arm64_speed == 1.0  # an assumption, stated in the defaults
    x86 = predict_faas(HIGGS, 10, "s3", "allreduce", 3008, profile)
    arm = predict_faas(HIGGS, 10, "s3", "allreduce", 3008, profile, architecture="arm64")
    assert arm.time_s == x86.time_s and arm.cost < x86.cost
    assert arm.costs["lambda"] / x86.costs["lambda"] == pytest.approx(0.8, abs=0.01)  # requests cost the same
    faster = with_figures(profile, {"compute": {"arm64_speed": 1.25}})
    quick = predict_faas(HIGGS, 10, "s3", "allreduce", 3008, faster, architecture="arm64")
    assert quick.time["compute_s"] == pytest.approx(x86.time["compute_s"] / 1.25)
    assert predict_faas(HIGGS, 10, "s3", "allreduce", 3008, faster).time_s == x86.time_s  # x86 is the reference


def test_arch_takes_a_list_and_doubles_the_faas_rows(capsys: pytest.CaptureFixture[str]) -> None:
    one = advise_json(capsys)
    both = advise_json(capsys, "--arch", "x86_64,arm64")
    faas = [r for r in one["rows"] if r["platform"] == "faas"]
    both_faas = [r for r in both["rows"] if r["platform"] == "faas"]
    assert len(both_faas) == 2 * len(faas) > 0
    assert len(both["rows"]) - len(both_faas) == len(one["rows"]) - len(faas)  # the IaaS rows stay
    assert {r["architecture"] for r in both_faas} == {"x86_64", "arm64"}
    assert all(r["architecture"] in r["label"] for r in both_faas)
    assert not any("x86_64" in r["label"] for r in faas)  # one architecture tried: the default goes unsaid
    old_name = advise_json(capsys, "--architecture", "arm64")
    assert {r["architecture"] for r in old_name["rows"] if r["platform"] == "faas"} == {"arm64"}


def test_an_unknown_architecture_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ADVISE, "--arch", "x86_64,sparc"]) == 1
    err = capsys.readouterr().err
    assert "unknown architecture 'sparc'; known: x86_64, arm64" in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="unknown Lambda architecture 'sparc'"):
        advise(HIGGS, workers=[2], architecture=["arm64", "sparc"])


# ---- S3 Express One Zone -------------------------------------------------------------------------


def test_s3express_rows_appear_only_when_asked_and_say_they_are_modelled_only() -> None:
    plain = advise(HIGGS, workers=[1, 10], memory_mb=[3008], instances=["c5.large"])
    assert not any(r.option == "s3express" for r in plain.rows)
    asked = advise(HIGGS, workers=[1, 10], memory_mb=[3008], instances=["c5.large"], channels=["s3", "s3express"])
    express = [r for r in asked.rows if r.option == "s3express"]
    assert express and all(r.notes == (MODELLED,) and MODELLED in r.label for r in express)
    assert not any(MODELLED in r.label for r in asked.rows if r.option != "s3express")
    # One worker synchronizes nothing: its row names a channel that exists.
    only = advise(HIGGS, workers=[1, 10], memory_mb=[3008], instances=["c5.large"], channels=["s3express"])
    assert {r.option for r in only.rows if r.workers == 1 and r.platform == "faas"} == {"s3"}
    # Lower latency than S3: never slower over the same pattern.
    s3 = predict_faas(HIGGS, 10, "s3", "scatter_reduce", 3008, aws_profile())
    fast = predict_faas(HIGGS, 10, "s3express", "scatter_reduce", 3008, aws_profile())
    assert fast.time["communicate_s"] < s3.time["communicate_s"]


def test_s3express_requests_are_priced_with_its_own_prices() -> None:
    table = prices("us-east-1")["s3express"]
    assert table["put_like_request"] == pytest.approx(0.00113 / 1000)
    assert table["get_like_request"] == pytest.approx(0.00003 / 1000)
    # LR's vector is far below 512 KB a request: requests only.
    small = predict_faas(HIGGS, 10, "s3express", "allreduce", 3008, aws_profile())
    r = small.requests
    per_round = (r["puts"] + r["lists"] + r["deletes"]) * 0.00113 / 1000 + r["gets"] * 0.00003 / 1000
    assert small.costs["channel"] == pytest.approx(per_round * small.rounds)
    # ResNet-50's 94 MB vector: the part of each request above 512 KB is billed per GB as well.
    big = predict_faas(RESNET, 4, "s3express", "allreduce", 10240, aws_profile())
    r = big.requests
    requests = (r["puts"] + r["lists"] + r["deletes"]) * 0.00113 / 1000 + r["gets"] * 0.00003 / 1000
    upload = (r["bytes_sent"] - r["puts"] * 512 * 1024) / 2**30 * 0.0032
    retrieval = (r["bytes_received"] - r["gets"] * 512 * 1024) / 2**30 * 0.0006
    assert upload > requests and big.costs["channel"] == pytest.approx((requests + upload + retrieval) * big.rounds)


def test_s3express_is_priced_only_where_its_prices_are_known(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="no eu-west-1 prices for channel 's3express'"):
        advise(HIGGS, workers=[2], channels=["s3express"], region="eu-west-1")
    with pytest.raises(ConfigError, match="no eu-west-1 prices for channel 's3express'; priced in: us-east-1"):
        predict_faas(HIGGS, 2, "s3express", "allreduce", 3008, aws_profile(), region="eu-west-1")
    data = advise_json(capsys, "--channels", "s3express")
    assert any(r["option"] == "s3express" and MODELLED in r["notes"] for r in data["rows"])


def test_a_job_file_cannot_ask_for_an_s3express_channel() -> None:
    assert "s3express" not in catalogue.CHANNELS
    job = {"dataset": "higgs", "workers": 2, "channel": {"kind": "s3express"}, "model": {"name": "lr"}}
    with pytest.raises(ConfigError) as caught:
        parse_job(job, "job.yaml")
    assert "s3express" in str(caught.value) and "\n" not in str(caught.value)


def test_the_table_marks_modelled_only_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ADVISE, "--workers", "10", "--memory", "3008", "--instances", "c5.large",
                 "--channels", "s3,s3express", "--all"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "s3express" in out and f"~ s3express: {MODELLED}" in out


# ---- ranges --------------------------------------------------------------------------------------


def test_every_prediction_carries_a_range_that_holds_it_and_widens_with_the_spread() -> None:
    profile = aws_profile()
    narrow = with_figures(profile, {"uncertainty": {"time_fraction": 0.1, "cost_fraction": 0.05}})
    wide = with_figures(profile, {"uncertainty": {"time_fraction": 0.4, "cost_fraction": 0.5}})
    for p in advise(HIGGS, profile, workers=[1, 10], memory_mb=[3008], instances=["c5.large", "g5.xlarge"]).rows:
        low, high = p.time_range_s
        assert low < p.time_s < high
        assert p.cost_range[0] < p.cost < p.cost_range[1]
    for fast in (lambda q: predict_faas(HIGGS, 10, "redis", "allreduce", 3008, q),):
        a, b = fast(narrow), fast(wide)
        assert a.time_s == b.time_s and a.cost == b.cost  # the spread changes the range, not the estimate
        assert b.time_range_s[0] < a.time_range_s[0] < a.time_s < a.time_range_s[1] < b.time_range_s[1]
        assert b.cost_range[0] < a.cost_range[0] < a.cost < a.cost_range[1] < b.cost_range[1]
        # A measurement within the stated error (predicted / measured - 1 in [-f, f]) is inside the range.
        assert a.time_range_s == pytest.approx((a.time_s / 1.1, a.time_s / 0.9))


def test_the_defaults_state_their_uncertainty_and_a_fraction_of_one_is_refused() -> None:
    profile = aws_profile()
    assert profile.uncertainty == Uncertainty(0.3, 0.3)
    assert "26.3%" in profile.origin["uncertainty.time_fraction"]
    with pytest.raises(ConfigError, match=r"uncertainty\.time_fraction must be at least 0 and below 1, got 1\.0"):
        with_figures(profile, {"uncertainty": {"time_fraction": 1.0}})


def test_json_rows_have_time_and_cost_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    data = advise_json(capsys)
    for row in data["rows"]:
        assert row["time_range_s"][0] < row["time_s"] < row["time_range_s"][1]
        assert row["cost_range"][0] < row["cost"] < row["cost_range"][1]


# ---- too close to call ---------------------------------------------------------------------------


def row(option: str, time_s: float, cost: float, platform: str = "faas") -> Prediction:
    return Prediction(platform, 10, time_s, cost, option, pattern="allreduce", memory_mb=3008,
                      uncertainty=Uncertainty(0.2, 0.2))  # fmt: skip


def test_two_options_within_each_others_range_are_too_close_to_call() -> None:
    close = Advice(HIGGS, "us-east-1", "aws", [row("s3", 10.0, 0.010), row("redis", 11.0, 0.0095)])
    assert close.too_close_to_call is not None
    line = close.recommendation
    assert line.startswith("too close to call: ")
    assert all(p.label in line for p in close.rows) and "recommended: " not in line
    assert json.loads(close.to_json())["too_close_to_call"] == [p.label for p in close.too_close_to_call]


def test_clearly_separated_options_get_a_recommendation() -> None:
    # Cheaper by far, and as fast: the ranges of cost do not meet.
    apart = Advice(HIGGS, "us-east-1", "aws", [row("s3", 10.0, 0.010), row("c5.large", 10.0, 0.002, "iaas")])
    assert apart.too_close_to_call is None
    assert apart.recommendation.startswith(f"recommended: {apart.rows[1].label}: 10.0s (8.3s-12.5s)")
    # Rows of one option (one channel, several memories) are not two options.
    same = Advice(HIGGS, "us-east-1", "aws", [row("s3", 10.0, 0.010), row("s3", 10.5, 0.0099)])
    assert same.too_close_to_call is None and json.loads(same.to_json())["too_close_to_call"] is None


# ---- the sanity properties over the new options ---------------------------------------------------


def test_the_sanity_properties_hold_for_arm64_and_s3express(monkeypatch: pytest.MonkeyPatch) -> None:
    from analytic_model import prediction as prediction_module
    from tests.unit.test_analytic_sanity import MOST_DOLLARS, MOST_S, WORKLOADS, faster_channels

    profile, faster = aws_profile(), faster_channels(aws_profile(), 2.0)
    grid = [
        (model, workers, memory, pattern, arch)
        for model in ("lr", "mlp")
        for workers in (1, 2, 10, 100)
        for memory in (1024, 10240)
        for pattern in ("allreduce", "scatter_reduce")
        for arch in ("x86_64", "arm64")
    ]

    def run(p: object, model: str, workers: int, memory: int, pattern: str, arch: str) -> Prediction:
        return predict_faas(WORKLOADS[model], workers, "s3express", pattern, memory, p, architecture=arch)  # type: ignore[arg-type]

    base = {args: run(profile, *args) for args in grid}
    for args, p in base.items():
        assert all(v >= 0 and v == v for v in (p.time_s, p.cost, *p.time.values())), args  # no NaN, no negative
        assert p.time_s < MOST_S and p.cost < MOST_DOLLARS, args
        assert run(faster, *args).time_s <= p.time_s * (1 + 1e-12), args
        if args[-1] == "arm64":
            x86 = base[(*args[:-1], "x86_64")]
            assert p.time_s == x86.time_s and p.cost < x86.cost, args

    def dearer(region: str) -> dict:  # type: ignore[type-arg]
        def scale(value: object) -> object:
            if isinstance(value, dict):
                return {k: scale(v) for k, v in value.items()}
            return value * 1.5 if isinstance(value, int | float) and not isinstance(value, bool) else value

        return scale(prices(region))  # type: ignore[return-value]

    monkeypatch.setattr(prediction_module, "prices", dearer)
    for args, p in base.items():
        assert run(profile, *args).cost >= p.cost, args


def test_a_wider_spread_turns_a_recommendation_into_too_close_to_call() -> None:
    def advised(fraction: float) -> Advice:
        profile = with_figures(aws_profile(), {"uncertainty": {"time_fraction": fraction, "cost_fraction": fraction}})
        return advise(HIGGS, profile, workers=[10], memory_mb=[3008], instances=["c5.large"], channels=["s3", "redis"])

    sure, unsure = advised(0.0), advised(0.6)
    assert sure.recommended.label == unsure.recommended.label  # the same estimate either way
    assert sure.too_close_to_call is None and sure.recommendation.startswith("recommended: ")
    assert unsure.too_close_to_call is not None and unsure.recommendation.startswith("too close to call: ")


def test_the_advice_table_fits_with_the_widest_new_labels() -> None:
    from lambdaml.cli.output import advice_table
    from tests.unit.test_tables_fit import assert_fits, prediction

    workload = Workload(model="resnet50", dataset_bytes=1.5e12, samples=1_281_167, epochs=90)
    widest = {"pattern": "scatter_reduce_2d", "memory_mb": 10240, "label_architecture": True}
    rows = [
        prediction("faas", 1000, "s3express", seconds=3.5e6, cost=98_765.43, architecture="x86_64",
                   notes=(MODELLED,), **widest),
        prediction("faas", 1000, "memcached", seconds=7199.0, cost=12_345.67, architecture="arm64", **widest),
    ]  # fmt: skip
    text = assert_fits(advice_table(Advice(workload, "us-east-1", "aws", rows, []), every=True))
    assert "FaaS 1000 s3express~ SR2D 10240MB x86" in text and "FaaS 1000 memcached SR2D 10240MB arm" in text


def test_s3express_moves_the_same_requests_as_s3_and_pays_less_per_request() -> None:
    # Ranged reads as S3: ScatterReduce packs a rank's pieces in one value on both.
    s3 = predict_faas(HIGGS, 10, "s3", "scatter_reduce", 3008, aws_profile())
    express = predict_faas(HIGGS, 10, "s3express", "scatter_reduce", 3008, aws_profile())
    for key in ("puts", "bytes_sent"):
        assert express.requests[key] == s3.requests[key], key
    assert express.costs["channel"] / express.rounds < s3.costs["channel"] / s3.rounds
