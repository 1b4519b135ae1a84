"""Storage keys: one builder and parser, names validated, listings sorted in round order."""

from __future__ import annotations

import pytest

from lambdaml import keys
from lambdaml.errors import ConfigError

TRICKY_JOB_IDS = ["job_1", "my.job-2_x", "a_b_c_d", "r000000001", "p00001", "m", "c00002", "J" * 64, "0-_."]


@pytest.mark.parametrize("job_id", TRICKY_JOB_IDS)
@pytest.mark.parametrize("rank", [None, 0, 7, 1023])
@pytest.mark.parametrize("chunk", [None, 0, 3])
def test_comm_key_round_trips(job_id: str, rank: int | None, chunk: int | None) -> None:
    key = keys.comm_key(job_id, 42, "grad_w.v-2", rank=rank, chunk=chunk)
    parsed = keys.parse_comm_key(key)
    assert parsed == keys.CommKey(job_id=job_id, round=42, tag="grad_w.v-2", chunk=chunk, rank=rank)


def test_comm_key_layout() -> None:
    assert keys.comm_key("j_1", 3, "g", rank=2) == "comm/j_1/a0001/r000000003/g/p00002"
    assert keys.comm_key("j_1", 3, "g", rank=None) == "comm/j_1/a0001/r000000003/g/m"
    assert keys.comm_key("j_1", 3, "g", rank=2, chunk=1) == "comm/j_1/a0001/r000000003/g/c00001/p00002"
    assert keys.comm_key("j_1", 3, "g", rank=None, chunk=1, attempt=12) == "comm/j_1/a0012/r000000003/g/c00001/m"


def test_attempts_of_one_job_never_share_a_key() -> None:
    first, second = (keys.comm_key("j", 3, "g", rank=1, attempt=a) for a in (1, 2))
    assert first != second
    assert keys.parse_comm_key(second).attempt == 2
    assert not second.startswith(keys.comm_prefix("j", 1))
    assert first.startswith(keys.comm_job_prefix("j")) and second.startswith(keys.comm_job_prefix("j"))
    assert keys.worker_checkpoint("j", 1, 0, "s0") != keys.worker_checkpoint("j", 2, 0, "s0")
    assert keys.worker_heartbeat("j", 2, 0).startswith(keys.attempt_prefix("j", 2))
    for bad in (0, 10_000, True, "1"):
        with pytest.raises(ConfigError, match="attempt"):
            keys.comm_prefix("j", bad)  # type: ignore[arg-type]


def test_comm_keys_live_under_their_round_and_job_prefix() -> None:
    key = keys.comm_key("job_a", 5, "g", rank=1)
    assert key.startswith(keys.round_prefix("job_a", 5))
    assert key.startswith(keys.comm_prefix("job_a"))
    # a job whose id is a prefix of another's must not see its keys
    assert not keys.comm_key("job_ab", 5, "g", rank=1).startswith(keys.comm_prefix("job_a"))
    assert not keys.comm_key("job_a", 50, "g", rank=1).startswith(keys.round_prefix("job_a", 5))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "comm/j/r1/g/m",  # round not padded
        "comm/j/r000000001/g/p1",  # rank not padded
        "comm/j/r000000001/g/x00001",
        "comm/j/r000000001/g/c00001",  # chunk without writer
        "comm/j/r000000001/m",  # no tag
        "jobs/j/r000000001/g/m",
        "comm/j/r000000001/g/m/extra",
        "comm/j/r000000001/g/p00001" + keys.CHUNK_MARK + "00000",  # a chunk part is not a comm key
    ],
)
def test_parse_rejects_non_comm_keys(bad: str) -> None:
    with pytest.raises(ValueError, match="not a communication key"):
        keys.parse_comm_key(bad)


def test_consecutive_rounds_sort_in_round_order_as_strings() -> None:
    rounds = [0, 1, 2, 9, 10, 11, 99, 100, 101, 999, 1000, 123_456_789]
    ks = [keys.comm_key("j", r, "g", rank=None) for r in rounds]
    assert sorted(ks) == ks
    assert keys.comm_key("j", 9, "g", rank=0) < keys.comm_key("j", 10, "g", rank=0)
    assert keys.round_prefix("j", 9) < keys.round_prefix("j", 10)


def test_ranks_and_chunks_sort_numerically_within_a_round() -> None:
    by_rank = [keys.comm_key("j", 1, "g", rank=r) for r in (0, 2, 9, 10, 100, 1023)]
    assert sorted(by_rank) == by_rank
    by_chunk = [keys.comm_key("j", 1, "g", rank=0, chunk=c) for c in (0, 9, 10, 99, 100)]
    assert sorted(by_chunk) == by_chunk


@pytest.mark.parametrize(
    "name",
    ["", "a/b", "/", "has space", " lead", "trail ", "a" * 65, "-lead", "_lead", ".lead", "..", "é", "a:b", "a*"],
)
def test_invalid_names_raise_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid job id"):
        keys.comm_key(name, 1, "g", rank=0)
    with pytest.raises(ConfigError, match="invalid dataset name"):
        keys.dataset_shard(name, "v1", 0)
    with pytest.raises(ConfigError, match="invalid dataset version"):
        keys.dataset_shard("d", name, 0)
    with pytest.raises(ConfigError, match="invalid tag"):
        keys.comm_key("job", 1, name, rank=0)


@pytest.mark.parametrize("bad", [None, 5, b"job"])
def test_non_string_names_raise_config_error(bad: object) -> None:
    with pytest.raises(ConfigError):
        keys.check_name(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a", "A9", "a" * 64, "x.y_z-1", "9lives"])
def test_valid_names_are_returned_unchanged(name: str) -> None:
    assert keys.check_name(name, "tag") == name


def test_invalid_name_message_names_what_and_value() -> None:
    with pytest.raises(ConfigError) as info:
        keys.check_name("bad name", "barrier name")
    message = str(info.value)
    assert "invalid barrier name 'bad name'" in message
    assert "1-64" in message


def test_trailing_newline_is_rejected() -> None:
    with pytest.raises(ConfigError):
        keys.check_name("job\n")


def test_dataset_and_job_keys() -> None:
    assert keys.dataset_current("higgs") == "datasets/higgs/current.json"
    assert keys.dataset_manifest("higgs", "v1") == "datasets/higgs/v/v1/manifest.json"
    assert keys.dataset_shard("higgs", "v1", 3) == "datasets/higgs/v/v1/shards/00003"
    assert keys.dataset_test("higgs", "v1") == "datasets/higgs/v/v1/test"
    shards = [keys.dataset_shard("higgs", "v1", i) for i in (0, 1, 9, 10, 100)]
    assert sorted(shards) == shards
    assert keys.job_spec("j") == "jobs/j/spec.json"
    assert keys.job_result("j") == "jobs/j/result.json"
    assert keys.job_model("j") == "jobs/j/model"


def test_barrier_keys_are_in_the_job_namespace_but_not_comm_keys() -> None:
    barrier = keys.barrier_key("job_1", "start", 3)
    assert barrier == "comm/job_1/a0001/barrier/start/p00003"
    assert barrier.startswith(keys.comm_prefix("job_1"))
    with pytest.raises(ValueError):
        keys.parse_comm_key(barrier)
    with pytest.raises(ConfigError, match="invalid barrier name"):
        keys.barrier_key("job_1", "a/b", 0)


def test_chunk_part_helpers() -> None:
    key = keys.comm_key("job_1", 7, "g", rank=None)
    parts = [keys.chunk_part(key, i) for i in (0, 1, 9, 10, 11)]
    prefix = keys.chunk_parts_prefix(key)
    assert parts[0] == key + "~part/00000"
    assert all(p.startswith(prefix) for p in parts)
    assert sorted(parts) == parts
    assert all(keys.is_chunk_part(p) for p in parts)
    assert not keys.is_chunk_part(key)
    assert not keys.is_chunk_part(keys.dataset_shard("d", "v", 1))
    # a valid name can never contain the chunk mark, so no logical key looks like a part
    with pytest.raises(ConfigError):
        keys.check_name("a~part")
