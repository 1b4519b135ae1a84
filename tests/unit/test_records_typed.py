"""The state record and the Lambda events as types: their JSON reads and writes back unchanged; a malformed one
is one clear error."""

from __future__ import annotations

import pytest

from lambdaml import keys
from lambdaml.channels.memory import MemoryChannel
from lambdaml.config import parse_job
from lambdaml.errors import CodecError, ConfigError
from lambdaml.platforms.aws_lambda.failures import WorkerGaveUp
from lambdaml.runtime import records
from lambdaml.runtime.events import CoordinatorEvent, WorkerEvent
from lambdaml.runtime.status import JobStatus
from lambdaml.storage import get_json, put_json

JOB = parse_job({"dataset": "d", "workers": 2, "algorithm": {"epochs": 3}})


def test_a_state_record_reads_and_writes_back_as_it_was_stored() -> None:
    store = MemoryChannel()
    stored = {"job_id": "j", "state": "running", "attempt": 2, "created_at": None, "updated_at": 5.0, "later": [1]}
    put_json(store, keys.job_status("j"), stored)
    record = records.status(store, "j")
    assert (record.state, record.attempt, record.created_at) == ("running", 2, None)
    assert record.to_json() == stored and record["later"] == [1] and "error" not in record
    records.set_status(store, "j", 2, records.FAILED, error="worker 1: gone", model_uri=None)
    assert get_json(store, keys.job_status("j")) == {
        **stored, "state": "failed", "error": "worker 1: gone", "model_uri": None,
        "updated_at": get_json(store, keys.job_status("j"))["updated_at"],
    }  # fmt: skip
    assert records.status(store, "none").to_json() == {"job_id": "none", "state": "unknown"}


@pytest.mark.parametrize(
    ("stored", "why"), [([1], "a JSON object, not list"), ({"attempt": 1}, "state: Field required")]
)
def test_a_malformed_state_record_is_one_codec_error(stored: object, why: str) -> None:
    store = MemoryChannel()
    put_json(store, keys.job_status("j"), stored)
    with pytest.raises(CodecError, match=why):
        records.status(store, "j")


def test_cancel_is_one_write_and_says_what_stands() -> None:
    store = MemoryChannel()
    records.set_status(store, "j", 1, records.RUNNING, workers=2)
    after = records.cancel(store, "j", lambda attempt: {"cost_dollars": 0.5 * attempt, "cost_estimated": True})
    assert (after.state, after.cost_dollars, after.cost_estimated) == ("cancelled", 0.5, True)
    assert store.get(keys.job_cancel("j", 1)) == b"1"
    assert records.cancel(store, "j") == records.status(store, "j")  # ended: nothing more to do


def test_a_worker_event_is_the_wire_json_it_was_read_from() -> None:
    wire = {
        "job": JOB.model_dump(mode="json"), "job_id": "j", "attempt": 2, "rank": 1, "invocation": 3,
        "worker_function": "worker", "seal_key": "00ff",
    }  # fmt: skip
    event = WorkerEvent.from_json(wire)
    assert (event.rank, event.invocation, event.secret) == (1, 3, b"\x00\xff")
    assert event.to_json() == wire
    assert event.next_invocation().to_json() == {**wire, "invocation": 4}
    with pytest.raises(ConfigError, match="worker event is malformed: no 'rank'"):
        WorkerEvent.from_json({k: v for k, v in wire.items() if k != "rank"})


def test_the_coordinator_events() -> None:
    start = CoordinatorEvent("start", JOB)
    assert start.to_json() == {"action": "start", "job": JOB.model_dump(mode="json")}
    assert CoordinatorEvent.from_json(start.to_json()) == start
    cancel = CoordinatorEvent.from_json({"action": "cancel", "job": JOB.model_dump(mode="json"), "job_id": "j"})
    assert cancel == CoordinatorEvent("cancel", JOB, "j")
    with pytest.raises(ConfigError, match="'cancel' needs 'job' and 'job_id'"):
        CoordinatorEvent.from_json({"action": "cancel", "job": JOB.model_dump(mode="json")})
    with pytest.raises(ConfigError, match="unknown action 'nope'"):
        CoordinatorEvent.from_json({"action": "nope", "job": JOB.model_dump(mode="json"), "job_id": "j"})

    request = WorkerEvent(JOB, "j", 1, 0, worker_function="worker").to_json()
    failure = {"requestContext": {}, "requestPayload": request, "responsePayload": {"errorType": "Runtime.OutOfMemory"}}
    assert WorkerGaveUp.describes(failure) and not WorkerGaveUp.describes(request)
    gave_up = WorkerGaveUp.from_json(failure)
    assert (gave_up.request.rank, gave_up.error_type, gave_up.error_message) == (0, "Runtime.OutOfMemory", "")
    assert isinstance(records.status(MemoryChannel(), "j"), JobStatus)
