"""Process lanes (``engines/process_lane.py``): jobs run in a killable child at a lower priority.

Each job runs in the child, not the server (other pid, niceness +10); errors come back as their
gRPC-mapped kind; a job over its time limit or whose caller is cancelled kills the child at
once, and the next job gets a new one.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from engines.errors import InvalidArgumentError
from engines.process_lane import DEFAULT_NICENESS, ProcessLane


def refuse(value: str) -> None:
    """A job that fails as bad input does (runs in the child)."""
    raise InvalidArgumentError(f"bad value {value!r}", reason="TEST_REASON", field="value")


@pytest.fixture
async def lane():
    lane = ProcessLane("test-lane", preload=(__name__,))
    yield lane
    lane.stop()


def assert_no_child(lane: ProcessLane, pid: int) -> None:
    """The job's error reached the caller only after the child was killed."""
    assert lane.pid is None
    with pytest.raises(ProcessLookupError):  # killed and reaped, not only forgotten
        os.kill(pid, 0)


async def test_a_job_runs_in_a_child_at_lower_priority(lane):
    child_pid = await lane.run(os.getpid)
    assert child_pid != os.getpid() and child_pid == lane.pid
    assert await lane.run(os.nice, 0) == min(19, os.nice(0) + DEFAULT_NICENESS)
    assert await lane.run(os.getpid) == child_pid, "the child serves job after job"


async def test_a_service_error_keeps_its_kind_reason_and_metadata(lane):
    with pytest.raises(InvalidArgumentError) as caught:
        await lane.run(refuse, "x")
    assert caught.value.reason == "TEST_REASON"
    assert caught.value.metadata == {"field": "value"}
    assert await lane.run(os.getpid) == lane.pid


async def test_another_exception_is_an_internal_error_and_the_child_survives(lane):
    pid = await lane.run(os.getpid)
    with pytest.raises(RuntimeError, match="ValueError in the test-lane process"):
        await lane.run(int, "not a number")
    assert await lane.run(os.getpid) == pid


async def test_a_job_over_its_time_limit_kills_the_child(lane):
    pid = await lane.run(os.getpid)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await lane.run(time.sleep, 60, timeout_s=0.3)
    assert time.monotonic() - started < 2
    assert_no_child(lane, pid)
    assert await lane.run(os.getpid) != pid, "the next job gets a new child"


async def test_a_cancelled_caller_kills_the_child(lane):
    pid = await lane.run(os.getpid)
    job = asyncio.create_task(lane.run(time.sleep, 60))
    await asyncio.sleep(0.3)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert_no_child(lane, pid)


async def test_a_child_that_dies_is_reported_and_replaced(lane):
    pid = await lane.run(os.getpid)
    with pytest.raises(ChildProcessError):
        await lane.run(os._exit, 3)
    assert_no_child(lane, pid)
    assert await lane.run(os.getpid) not in (None, pid)
