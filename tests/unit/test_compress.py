"""Compressors, their wire format, error feedback, and the job-file options that select them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lambdaml import codec
from lambdaml.compression import COMPRESSORS, Compressor, ErrorFeedback, make_compressor, roundtrip
from lambdaml.compression.base import pack_codes, unpack_codes
from lambdaml.compression.compressors import QSGD, Identity, MinMaxUint8, OneBit, TopK
from lambdaml.config import CompressionSpec, parse_job
from lambdaml.errors import CodecError, ConfigError

ALL: list[Compressor] = [Identity(), OneBit(), QSGD(16), MinMaxUint8(), TopK(0.05)]


def ids(compressors: list[Compressor]) -> list[str]:
    return [type(c).__name__ for c in compressors]


def vector(d: int, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(d) * np.exp(rng.normal(0, 1, d))).astype(dtype)


def wire(compressor: Compressor, x: np.ndarray, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """The bytes a sender puts on the channel, and what it knows receivers will decompress."""
    payload, q = roundtrip(compressor, x, np.random.default_rng(seed))
    return codec.encode_bundle(payload), q


@pytest.mark.parametrize("compressor", ALL, ids=ids(ALL))
@pytest.mark.parametrize("d", [0, 1, 7, 1001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_receivers_decompress_exactly_what_the_sender_expects(compressor: Compressor, d: int, dtype: Any) -> None:
    x = vector(d, dtype=dtype)
    data, q = wire(compressor, x)
    received = compressor.decompress(codec.decode_bundle(data), d)
    assert received.dtype == dtype and received.shape == (d,)
    np.testing.assert_array_equal(received, q)
    received[:] = 0  # a writable copy, not a view of the wire bytes


def test_registry_and_spec_build_every_compressor() -> None:
    assert COMPRESSORS.names() == ["identity", "onebit", "qsgd", "topk", "uint8"]
    qsgd = make_compressor(CompressionSpec(name="qsgd", levels=4))
    assert isinstance(qsgd, QSGD) and qsgd.levels == 4 and qsgd.width == 4
    topk = make_compressor(CompressionSpec(name="topk", ratio=0.25))
    assert isinstance(topk, TopK) and topk.kept(10) == 3


def test_identity_is_exact() -> None:
    x = vector(100)
    _, q = wire(Identity(), x)
    np.testing.assert_array_equal(q, x)


def test_onebit_keeps_the_l2_norm_and_the_signs_with_sign_of_zero_positive() -> None:
    x = vector(10_001)
    x[::97] = 0.0
    _, q = wire(OneBit(), x)
    assert np.linalg.norm(q) == pytest.approx(np.linalg.norm(x), rel=1e-12)
    assert np.all(np.abs(q) == np.abs(q[0]))
    assert np.all(np.sign(q[x != 0]) == np.sign(x[x != 0]))
    assert np.all(q[x == 0] > 0)


@pytest.mark.parametrize("d", [1_000_000, 1_000_003])
def test_onebit_wire_is_one_bit_per_element_plus_a_scale(d: int) -> None:
    x = vector(d, dtype=np.float32)
    data, _ = wire(OneBit(), x)
    assert len(data) <= -(-d // 8) + 200
    assert len(codec.encode(x)) / len(data) >= 31.9


def test_qsgd_is_unbiased_and_on_its_levels() -> None:
    x = vector(50, seed=3)
    compressor = QSGD(4)
    draws = np.stack([wire(compressor, x, seed=s)[1] for s in range(4000)])
    norm = np.linalg.norm(x)
    # Every output is a signed multiple of norm/s, at most norm, never of the wrong sign.
    levels = np.abs(draws) / (norm / 4)
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-9)
    assert levels.max() <= 4 + 1e-9
    assert np.all(draws * np.sign(x) >= 0)
    # The mean of 4,000 draws is within 5 standard errors of x, element by element.
    stderr = draws.std(axis=0) / np.sqrt(len(draws)) + 1e-12
    assert np.all(np.abs(draws.mean(axis=0) - x) <= 5 * stderr)
    assert np.abs(draws.mean(axis=0) - x).max() < 0.05 * norm
    # The same generator state gives the same draw: a replayed round sends the same bytes.
    assert wire(compressor, x, seed=9)[0] == wire(compressor, x, seed=9)[0]


def test_qsgd_packs_sign_and_level_in_few_bits() -> None:
    d = 100_000
    data, _ = wire(QSGD(16), vector(d))  # 16 levels: 5 bits of level, 1 of sign
    assert len(data) <= d * 6 // 8 + 200


def test_uint8_rounds_deterministically_onto_the_min_max_grid() -> None:
    x = vector(5000)
    data, q = wire(MinMaxUint8(), x)
    step = (x.max() - x.min()) / 255
    assert np.abs(q - x).max() <= step / 2 + 1e-12
    assert q.min() == pytest.approx(x.min()) and q.max() == pytest.approx(x.max())
    assert len(data) <= 5000 + 200
    _, constant = wire(MinMaxUint8(), np.full(10, 2.5))
    np.testing.assert_array_equal(constant, np.full(10, 2.5))


def test_topk_sends_the_largest_magnitudes_with_their_indices() -> None:
    x = vector(1000, seed=5)
    _, q = wire(TopK(0.01), x)
    kept = np.flatnonzero(q)
    assert len(kept) == 10
    np.testing.assert_array_equal(q[kept], x[kept])
    assert np.abs(x[kept]).min() >= np.sort(np.abs(x))[-10]


@pytest.mark.parametrize("compressor", ALL, ids=ids(ALL))
def test_error_feedback_telescopes(compressor: Compressor) -> None:
    """Sum of what was sent plus the final memory equals the sum of the inputs."""
    ef = ErrorFeedback()
    rng = np.random.default_rng(1)
    inputs = [vector(257, seed=s) for s in range(30)]
    sent = [ef.compress(compressor, x, rng)[1] for x in inputs]
    assert ef.memory is not None
    total = np.sum(inputs, axis=0)
    np.testing.assert_allclose(np.sum(sent, axis=0) + ef.memory, total, rtol=0, atol=1e-10 * np.abs(total).max())
    if not isinstance(compressor, Identity):
        assert np.abs(ef.memory).max() > 0, "a lossy compressor leaves something in memory"


def test_topk_with_memory_follows_the_rule() -> None:
    """a = e + g; send the k largest |a_i| with their indices; e = a - sent."""
    ef, g1, g2 = ErrorFeedback(), vector(100, seed=1), vector(100, seed=2)
    _, first = ef.compress(TopK(0.05), g1)
    np.testing.assert_array_equal(ef.memory, g1 - first)
    _, second = ef.compress(TopK(0.05), g2)
    a = g1 - first + g2
    top = np.argsort(-np.abs(a))[:5]
    np.testing.assert_array_equal(np.flatnonzero(second), np.sort(top))
    np.testing.assert_array_equal(ef.memory, a - second)


def test_error_feedback_state_round_trips_and_can_be_off() -> None:
    ef = ErrorFeedback()
    ef.compress(OneBit(), vector(20))
    restored = ErrorFeedback()
    restored.load_state_dict(ef.state_dict())
    x = vector(20, seed=4)
    np.testing.assert_array_equal(restored.compress(OneBit(), x)[1], ef.compress(OneBit(), x)[1])
    off = ErrorFeedback(enabled=False)
    off.compress(OneBit(), x)
    assert off.memory is None and off.state_dict() == {}


@pytest.mark.parametrize("width", [1, 3, 5, 8, 11, 16])
def test_code_packing_round_trips(width: int) -> None:
    codes = np.random.default_rng(width).integers(0, 2**width, size=1001).astype(np.uint16)
    packed = pack_codes(codes, width)
    assert packed.size == -(-1001 * width // 8)
    np.testing.assert_array_equal(unpack_codes(packed, width, 1001), codes)
    with pytest.raises(CodecError, match="packed codes have"):
        unpack_codes(packed[:-1], width, 1001)


def test_a_payload_of_another_compressor_or_length_is_refused() -> None:
    payload = OneBit().compress(vector(64))
    with pytest.raises(CodecError, match="lacks its 'range' entry"):
        MinMaxUint8().decompress(payload, 64)
    with pytest.raises(CodecError, match="'signs' has shape"):
        OneBit().decompress(payload, 80)
    topk = TopK(0.5).compress(vector(10))
    topk["index"] = topk["index"][::-1].copy()
    with pytest.raises(CodecError, match="increasing"):
        TopK(0.5).decompress(topk, 10)
    with pytest.raises(ValueError, match="random generator"):
        QSGD(4).compress(vector(3))


# --- the job file -------------------------------------------------------------------------


def job(**algorithm: Any) -> dict[str, Any]:
    sync = algorithm.pop("sync", {})
    model = algorithm.pop("model", {"name": "lr"})
    return {"dataset": "d", "algorithm": algorithm, "sync": sync, "model": model}


def test_job_file_selects_compression() -> None:
    spec = parse_job(job(name="ga_sgd", compression={"name": "qsgd", "levels": 8})).algorithm
    assert spec.compression_spec == CompressionSpec(name="qsgd", levels=8)
    assert parse_job(job(name="ga_sgd")).algorithm.compression_spec is None
    adam = parse_job(job(name="onebit_adam", warmup_steps=10)).algorithm
    assert adam.compression_spec == CompressionSpec(name="onebit") and adam.warmup_steps == 10
    choco = parse_job(job(name="choco_sgd", gamma=0.2, compression={"name": "uint8"})).algorithm
    assert choco.gamma == 0.2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (job(name="ga_sgd", compression={"name": "twobit"}), "algorithm.compression.name: unknown compressor 'twobit'"),
        (job(name="ga_sgd", compression={"name": "topk", "ratio": 0}), "compression.ratio: Input should be greater"),
        (job(name="ga_sgd", compression={"name": "qsgd", "level": 3}), "compression.level: unknown field"),
        (job(name="admm", compression={"name": "onebit"}), "algorithm 'admm' does not compress what it sends"),
        (
            job(name="kmeans", compression={"name": "onebit"}, model={"name": "kmeans"}),
            "algorithm 'kmeans' does not compress",
        ),
        (job(name="dpsgd", compression={"name": "uint8"}), "use dcd_psgd, ecd_psgd or choco_sgd"),
        (
            job(name="dcd_psgd", compression={"name": "uint8", "error_feedback": True}),
            "error_feedback does not apply to 'dcd_psgd'",
        ),
        (job(name="choco_sgd", optimizer="adam"), "optimizer 'adam' does not apply to algorithm 'choco_sgd'"),
        (job(name="onebit_adam", optimizer="momentum"), "optimizer 'momentum' does not apply"),
        (job(name="onebit_adam", warmup_steps=0), "warmup_steps: Input should be greater than or equal to 1"),
        (job(name="choco_sgd", gamma=1.5), "gamma: Input should be less than or equal to 1"),
        (
            job(name="ga_sgd", compression={"name": "onebit"}, sync={"protocol": "asp"}),
            "compression runs under protocol 'bsp' only, not 'asp'",
        ),
        (job(name="ecd_psgd", sync={"protocol": "ssp"}), "algorithm 'ecd_psgd' runs only under protocol 'bsp'"),
    ],
)
def test_invalid_combinations_are_one_line_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        parse_job(data)
    assert "\n" not in str(caught.value)
