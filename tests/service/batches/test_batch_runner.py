"""The batch runner with a fake executor: the state machine, output files, cancel, expiry, leases, resume."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from prometheus_client import REGISTRY

from engines.errors import UnavailableError
from engines.executor import DeviceExecutor
from service.batches.lines import LineResult
from service.batches.records import CANCELLED, COMPLETED, EXPIRED, FAILED, IN_PROGRESS, VALIDATING
from service.batches.runner import BatchRunner
from tests.service.batches.helpers import FakeExecutor, jsonl, line, parse_jsonl, settle


@pytest.fixture
async def lane():
    executor = DeviceExecutor("cpu", "test:batches")
    yield executor
    executor.shutdown()


def runner(store, lane, clock, execute, holder: str = "runner-1", concurrency: int = 2) -> BatchRunner:
    made = BatchRunner(
        store,
        lane,
        line_concurrency=concurrency,
        max_running=2,
        lease_s=30.0,
        scan_interval_s=60.0,
        clock=clock,
        holder=holder,
    )
    made.attach(execute)
    return made


def files(store, owner: str, batch) -> tuple[list[dict], list[dict]]:
    out = parse_jsonl(store.file_content(owner, batch.output_file_id)[1]) if batch.output_file_id else []
    err = parse_jsonl(store.file_content(owner, batch.error_file_id)[1]) if batch.error_file_id else []
    return out, err


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_batch_runs_every_line_once_and_writes_openai_output_and_error_files(store, lane, clock):
    before = {
        "completed": sample("ur_batches_total", status="completed"),
        "lines_ok": sample("ur_batch_lines_total", outcome="completed"),
        "lines_failed": sample("ur_batch_lines_total", outcome="failed"),
    }
    data = jsonl(
        line("a"),
        line("b", input="b", fail=True),
        line("c"),
        line("d", input="d", **{"raise": True}),
        line("e"),
    )
    file = store.create_file("team", "in.jsonl", data)
    batch = store.create_batch("team", file.id, "/v1/embeddings", "24h", {"job": "1"})
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake)
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("team", batch.id)
    assert done.status == COMPLETED
    assert (done.total, done.completed, done.failed) == (5, 3, 2)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    assert sorted(c[0] for c in fake.calls) == ["a", "b", "c", "d", "e"]
    assert {c[1] for c in fake.calls} == {"team"}  # run under the submitting key
    out, err = files(store, "team", done)
    assert [x["custom_id"] for x in out] == ["a", "c", "e"]
    assert out[0]["response"]["status_code"] == 200 and out[0]["response"]["body"] == {"echo": "a"}
    assert (
        out[0]["error"] is None and out[0]["id"].startswith("batch_req_") and out[0]["response"]["request_id"]
    )
    assert [x["custom_id"] for x in err] == ["b", "d"]
    assert err[0]["response"]["status_code"] == 400
    assert err[0]["error"] == {"code": "bad_input", "message": "input rejected"}
    assert err[1]["response"] is None and err[1]["error"]["code"] == "internal_error"
    output_file = store.get_file("team", done.output_file_id)
    assert (output_file.purpose, output_file.line_count) == ("batch_output", 3)
    assert store.active_batches() == []
    assert store.results(batch.id) == {}  # dropped once the files are written
    assert sample("ur_batches_total", status="completed") == before["completed"] + 1
    assert sample("ur_batch_lines_total", outcome="completed") == before["lines_ok"] + 3
    assert sample("ur_batch_lines_total", outcome="failed") == before["lines_failed"] + 2
    assert sample("ur_batches_running") == 0


async def test_lines_run_at_most_line_concurrency_at_once(store, lane, clock):
    file = store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(7))))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    fake = FakeExecutor(gated=True)
    run = runner(store, lane, clock, fake, concurrency=3)
    await run.scan()
    await settle(3, fake)
    assert len(fake.calls) == 3
    fake.gate.set()
    await run.wait_idle()
    assert fake.most_in_flight == 3
    assert store.get_batch("k", batch.id).status == COMPLETED


async def test_cancel_mid_batch_lets_lines_in_flight_finish_and_starts_no_more(store, lane, clock):
    file = store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(6))))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    fake = FakeExecutor(gated=True)
    run = runner(store, lane, clock, fake)
    await run.scan()
    await settle(2, fake)
    assert len(fake.calls) == 2
    assert store.cancel_batch("k", batch.id).status == "cancelling"
    run.wake(cancelled=batch.id)
    fake.gate.set()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert (done.status, done.completed, done.failed) == (CANCELLED, 2, 0)
    assert done.cancelling_at and done.cancelled_at
    assert len(fake.calls) == 2
    out, err = files(store, "k", done)
    assert [x["custom_id"] for x in out] == ["r0", "r1"]
    assert [x["custom_id"] for x in err] == ["r2", "r3", "r4", "r5"]
    assert {x["error"]["code"] for x in err} == {"batch_cancelled"}


async def test_a_batch_cancelled_before_it_ran_ends_cancelled_with_no_line_run(store, lane, clock):
    file = store.create_file("k", "in", jsonl(line("a"), line("b")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    store.cancel_batch("k", batch.id)
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake)
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert done.status == CANCELLED and fake.calls == []
    assert [x["custom_id"] for x in files(store, "k", done)[1]] == ["a", "b"]


async def test_expiry_stops_the_batch_with_what_finished(store, lane, clock):
    file = store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(4))))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    fake = FakeExecutor()
    fake.on_call = lambda n: clock.tick(24 * 3600 + 1) if n == 2 else None  # the window ends during line 2
    run = runner(store, lane, clock, fake, concurrency=1)
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert (done.status, done.completed, done.failed) == (EXPIRED, 2, 0)
    assert done.expired_at >= done.expires_at
    out, err = files(store, "k", done)
    assert [x["custom_id"] for x in out] == ["r0", "r1"]
    assert [(x["custom_id"], x["error"]["code"]) for x in err] == [
        ("r2", "batch_expired"),
        ("r3", "batch_expired"),
    ]


async def test_lines_whose_url_is_not_the_endpoint_fail_validation_by_line(store, lane, clock):
    data = jsonl(
        line("a"), line("b", "/v1/chat/completions", messages=[]), "", line("c", "/v1/rerank", query="q")
    )
    file = store.create_file("k", "in", data)
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake)
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert done.status == FAILED and done.failed_at and fake.calls == []
    assert [(e.code, e.line, e.param) for e in done.errors] == [
        ("invalid_url", 2, "url"),
        ("invalid_url", 4, "url"),
    ]
    assert "'/v1/chat/completions' is not the batch's endpoint '/v1/embeddings'" in done.errors[0].message


async def test_a_deleted_input_file_fails_the_batch(store, lane, clock):
    file = store.create_file("k", "in", jsonl(line("a")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    store.delete_file("k", file.id)
    run = runner(store, lane, clock, FakeExecutor())
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert done.status == FAILED and [e.code for e in done.errors] == ["input_file_deleted"]


async def test_a_leased_batch_is_left_to_its_holder_until_the_lease_expires(store, lane, clock):
    file = store.create_file("k", "in", jsonl(line("a"), line("b")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    assert store.take_lease(batch.id, "dead-replica", 30.0)
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake)
    await run.scan()
    await run.wait_idle()
    assert fake.calls == [] and store.get_batch("k", batch.id).status == VALIDATING
    clock.tick(31)  # the holder stopped renewing
    await run.scan()
    await run.wait_idle()
    assert store.get_batch("k", batch.id).status == COMPLETED
    assert len(fake.calls) == 2


async def test_two_runners_on_one_store_never_run_the_same_batch(store, lane, clock):
    file = store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(5))))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    first, second = FakeExecutor(gated=True), FakeExecutor(gated=True)
    one = runner(store, lane, clock, first, holder="replica-1")
    two = runner(store, DeviceExecutor("cpu", "test:batches-2"), clock, second, holder="replica-2")
    await asyncio.gather(one.scan(), two.scan())
    await settle(2, first, second)
    first.gate.set()
    second.gate.set()
    await asyncio.gather(one.wait_idle(), two.wait_idle())
    assert sorted(len(f.calls) for f in (first, second)) == [0, 5]
    assert store.get_batch("k", batch.id).status == COMPLETED


async def test_a_resumed_batch_never_runs_a_line_with_a_saved_result(store, lane, clock):
    file = store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(4))))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    # A run that died: it validated, then saved two lines' results.
    store.update_batch("k", batch.id, lambda b: replace(b, status=IN_PROGRESS))
    store.put_results(
        batch.id,
        {0: LineResult(200, {"echo": "earlier r0"}, "req-0"), 2: LineResult(500, {"error": {}}, "req-2")},
    )
    # A second runner that believed it held the lease saved line 0 too: one of the two counts.
    store.put_results(batch.id, {0: LineResult(200, {"echo": "later r0"}, "req-0b")})
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake)
    await run.scan()
    await run.wait_idle()
    assert sorted(c[0] for c in fake.calls) == ["r1", "r3"]
    done = store.get_batch("k", batch.id)
    assert (done.status, done.completed, done.failed) == (COMPLETED, 3, 1)
    out, err = files(store, "k", done)
    assert [x["custom_id"] for x in out] == ["r0", "r1", "r3"]
    assert out[0]["response"]["body"] in ({"echo": "earlier r0"}, {"echo": "later r0"})  # one of them, once
    assert [x["custom_id"] for x in err] == ["r2"]


async def test_the_runner_does_nothing_until_it_has_an_executor(store, lane, clock):
    file = store.create_file("k", "in", jsonl(line("a")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    idle = BatchRunner(
        store, lane, line_concurrency=1, max_running=1, lease_s=30, scan_interval_s=60, clock=clock
    )
    assert not idle.started
    await idle.scan()
    assert store.get_batch("k", batch.id).status == VALIDATING
    assert store.take_lease(batch.id, "someone-else", 30.0)  # it took no lease


async def test_a_run_that_fails_on_the_store_is_retried_after_a_pause_not_at_once(store, lane, clock):
    file = store.create_file("k", "in", jsonl(line("a"), line("b")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    saves = store.put_results
    failures = [UnavailableError("the state store is down", reason="STATE_STORE_UNAVAILABLE")]

    def flaky(*args):
        if failures:
            raise failures.pop()
        return saves(*args)

    store.put_results = flaky
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake, concurrency=1)
    await run.scan()
    await run.wait_idle()
    # "a" was answered but not saved; "b" (started once "a" was answered) was saved.
    assert store.get_batch("k", batch.id).status == "in_progress" and len(fake.calls) == 2
    assert sorted(store.results(batch.id)) == [1]
    await run.scan()  # at once: paused
    await run.wait_idle()
    assert len(fake.calls) == 2
    clock.tick(31)  # lease_s later
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert (done.status, done.completed) == (COMPLETED, 2)
    assert sorted(c[0] for c in fake.calls) == ["a", "a", "b"]  # "a" was never saved: it ran again


async def test_a_runner_whose_lease_is_taken_over_stops_and_the_new_holder_finishes(store, lane, clock):
    file = store.create_file("k", "in", jsonl(*(line(f"r{i}") for i in range(6))))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    first, second = FakeExecutor(gated=True), FakeExecutor()
    one = BatchRunner(
        store,
        lane,
        line_concurrency=2,
        max_running=1,
        lease_s=0.3,
        scan_interval_s=60,
        clock=clock,
        holder="stalled",
    )
    one.attach(first)
    await one.scan()
    await settle(2, first)
    clock.tick(10)  # the store's time: "stalled" missed its renewals, its lease expired
    assert store.take_lease(batch.id, "replica-2", 30.0)
    await asyncio.sleep(1.0)  # "stalled" tries to renew (every 0.1 s: ten tries) and finds the lease gone
    first.gate.set()
    await one.wait_idle()
    assert len(first.calls) == 2 and store.get_batch("k", batch.id).status == "in_progress"
    two = runner(store, DeviceExecutor("cpu", "test:batches-2"), clock, second, holder="replica-2")
    await two.scan()
    await two.wait_idle()
    done = store.get_batch("k", batch.id)
    assert done.status == COMPLETED
    out, _ = files(store, "k", done)
    assert [x["custom_id"] for x in out] == [f"r{i}" for i in range(6)]


async def test_a_batch_that_died_finalizing_ends_with_the_files_it_planned(store, lane, clock):
    file = store.create_file("k", "in", jsonl(line("a"), line("b")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "", {})
    store.put_results(
        batch.id, {0: LineResult(200, {"echo": "a"}, "q0"), 1: LineResult(200, {"echo": "b"}, "q1")}
    )
    planned = "file-000000000000plannedout01"
    store.update_batch(
        "k",
        batch.id,
        lambda b: replace(
            b, status="finalizing", planned_output_file_id=planned, planned_error_file_id=planned[:-1] + "2"
        ),
    )
    fake = FakeExecutor()
    run = runner(store, lane, clock, fake)
    await run.scan()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)
    assert (done.status, done.output_file_id, done.error_file_id, done.completed) == (
        COMPLETED,
        planned,
        "",
        2,
    )
    assert fake.calls == []
    assert [x["custom_id"] for x in files(store, "k", done)[0]] == ["a", "b"]
