"""Tiny Lambda handlers for the local Lambda service tests (run by awslambdaric in their own processes)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any


def echo(event: Any, context: Any) -> dict[str, Any]:
    """Return the event and what the context and environment say about this invocation."""
    return {
        "event": event,
        "request_id": context.aws_request_id,
        "function_name": context.function_name,
        "memory_limit_in_mb": context.memory_limit_in_mb,
        "invoked_function_arn": context.invoked_function_arn,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "pid": os.getpid(),
        "env": {k: os.environ.get(k) for k in ("GREETING", "AWS_REGION", "LAMBDA_TASK_ROOT", "AWS_LAMBDA_RUNTIME_API")},
    }


def sleep(event: Any, context: Any) -> dict[str, Any]:
    """Sleep event["seconds"]; report the remaining time before and after, and the wall-clock interval."""
    before = context.get_remaining_time_in_millis()
    start = time.time()
    time.sleep(float(event.get("seconds", 0)))
    return {
        "pid": os.getpid(),
        "start": start,
        "end": time.time(),
        "remaining_before": before,
        "remaining_after": context.get_remaining_time_in_millis(),
    }


def fail(event: Any, context: Any) -> None:
    raise ValueError(event.get("message", "boom"))


def crash(event: Any, context: Any) -> dict[str, Any]:
    """With event["crash"]: die mid-invocation (SIGKILL, or os._exit with event["exit"]); otherwise report the pid."""
    if event.get("crash"):
        if "exit" in event:
            os._exit(int(event["exit"]))
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(5)
    return {"pid": os.getpid()}


def flaky(event: Any, context: Any) -> dict[str, Any]:
    """Fail (raise, or SIGKILL itself with event["crash"]) the first event["fail_times"] attempts, then succeed.

    Attempts are counted in a marker file named after event["id"], with the request id of each.
    """
    marker = Path(event["marker_dir"]) / f"{event['id']}.attempts"
    with marker.open("a") as f:
        f.write(json.dumps({"request_id": context.aws_request_id, "pid": os.getpid(), "time": time.time()}) + "\n")
    attempts = len(marker.read_text().splitlines())
    if attempts <= int(event["fail_times"]):
        if event.get("crash"):
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"attempt {attempts} fails on purpose")
    (Path(event["marker_dir"]) / f"{event['id']}.done").write_text(str(attempts))
    return {"attempts": attempts}


def record(event: Any, context: Any) -> str:
    """An on-failure destination: write the invocation record it receives next to the failed event's markers."""
    marker_dir = Path(event["requestPayload"]["marker_dir"])
    (marker_dir / f"{event['requestPayload']['id']}.destination.json").write_text(json.dumps(event))
    return "recorded"


def hog(event: Any, context: Any) -> int:
    """Touch event["mb"] MB of memory and hold it for a while."""
    block = b"\x01" * (int(event["mb"]) * 1024 * 1024)
    time.sleep(float(event.get("hold_s", 3)))
    return len(block)


def hold(event: Any, context: Any) -> dict[str, Any]:
    """Create event["started"], then wait (bounded) until event["release"] exists: busy until the test says."""
    Path(event["started"]).touch()
    release = Path(event["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"pid": os.getpid(), "released": release.exists()}
