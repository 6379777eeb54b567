"""The batch store and runners on S3 (moto's server): leases and record changes by conditional PUTs,
two replicas sharing one bucket never run the same batch, and the batch completes once."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from engines.executor import DeviceExecutor
from engines.state_store import open_state_store
from service.batches.records import CANCELLING, COMPLETED
from service.batches.runner import BatchRunner
from service.batches.store import BatchApiStore
from tests.moto_s3 import moto_s3
from tests.service.batches.helpers import LIMITS, FakeExecutor, jsonl, line, parse_jsonl, settle


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as (_, options):
        yield options


@pytest.fixture
def s3_store(s3, request, clock):
    return BatchApiStore(open_state_store(f"s3://state/{request.node.name}", s3), LIMITS, clock)


def test_leases_and_record_changes_are_compare_and_swaps_on_s3(s3_store, clock):
    assert s3_store.take_lease("batch_x", "replica-1", 10.0)
    assert not s3_store.take_lease("batch_x", "replica-2", 10.0)
    clock.tick(11)
    assert s3_store.take_lease("batch_x", "replica-2", 10.0)
    file = s3_store.create_file("k", "in", jsonl(line("a")))
    batch = s3_store.create_batch("k", file.id, "/v1/embeddings", "", {})
    # A change computed on a record another writer replaced meanwhile is made again on the new one.
    seen = []

    def change(current):
        seen.append(current.status)
        if len(seen) == 1:
            s3_store.cancel_batch("k", batch.id)  # lands between this read and this write
        return replace(current, completed=1)

    changed = s3_store.update_batch("k", batch.id, change)
    assert seen == ["validating", CANCELLING]
    assert (changed.status, changed.completed) == (CANCELLING, 1)
    assert s3_store.get_batch("k", batch.id) == changed


async def test_two_replicas_on_one_bucket_run_a_batch_once(s3_store, clock):
    file = s3_store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(6))))
    batch = s3_store.create_batch("k", file.id, "/v1/embeddings", "", {})
    first, second = FakeExecutor(gated=True), FakeExecutor(gated=True)
    lanes = [DeviceExecutor("cpu", f"test:s3-{i}") for i in range(2)]
    runners = [
        BatchRunner(
            s3_store,
            lane,
            line_concurrency=2,
            max_running=2,
            lease_s=30,
            scan_interval_s=60,
            clock=clock,
            holder=name,
        )
        for lane, name in zip(lanes, ("replica-1", "replica-2"), strict=True)
    ]
    runners[0].attach(first)
    runners[1].attach(second)
    try:
        await asyncio.gather(*(r.scan() for r in runners))
        await settle(2, first, second)
        first.gate.set()
        second.gate.set()
        await asyncio.gather(*(r.wait_idle() for r in runners))
    finally:
        for lane in lanes:
            lane.shutdown()
    assert sorted(len(f.calls) for f in (first, second)) == [0, 6]
    done = s3_store.get_batch("k", batch.id)
    assert (done.status, done.completed) == (COMPLETED, 6)
    out = parse_jsonl(s3_store.file_content("k", done.output_file_id)[1])
    assert [x["custom_id"] for x in out] == [f"r{i}" for i in range(6)]
    assert s3_store.active_batches() == [] and s3_store.results(batch.id) == {}
