"""Files expire (OpenAI's ``expires_after``): defaults, bounds, lazy deletion, the sweep, batch outputs.

Every test runs on the test clock (``clock``): time moves only when a test says, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace

import pytest

from engines.errors import InvalidArgumentError
from engines.executor import DeviceExecutor
from service.batches.files import (
    DEFAULT_FILE_EXPIRY_S,
    MAX_FILE_EXPIRY_S,
    MIN_FILE_EXPIRY_S,
    FileInfo,
    FileNotFoundInStoreError,
    expiry_marker,
    expiry_seconds,
)
from service.batches.ids import new_id, owner_dir
from service.batches.lines import LineResult, parse_input
from service.batches.records import COMPLETED
from service.batches.runner import SWEEP_LIMIT, BatchRunner
from tests.service.batches.helpers import LIMITS, FakeExecutor, jsonl, line, make_store, settle

DAY = 24 * 3600


@pytest.fixture
async def lane():
    executor = DeviceExecutor("cpu", "test:expiry")
    yield executor
    executor.shutdown()


def keys(store) -> set[str]:
    """Every key of the batch store's folder."""
    return set(store.state.sizes())


def traces(store, file_id: str) -> set[str]:
    """The keys that hold anything of ``file_id`` (ids are unique): description, bytes, expiry marker."""
    return {key for key in keys(store) if file_id in key}


def gone(store, owner: str, file_id: str) -> None:
    """Every reader answers ``file_id`` as absent (NOT_FOUND FILE_NOT_FOUND)."""
    for call in (
        lambda: store.get_file(owner, file_id),
        lambda: store.file_content(owner, file_id),
        lambda: store.delete_file(owner, file_id),
        lambda: store.create_batch(owner, file_id, "/v1/embeddings", "24h", {}),
        lambda: store.input_lines(owner, file_id),
    ):
        with pytest.raises(FileNotFoundInStoreError) as caught:
            call()
        assert (caught.value.status, caught.value.reason) == ("NOT_FOUND", "FILE_NOT_FOUND")
    assert file_id not in {f.id for f in store.list_files(owner)[0]}


def test_a_file_expires_after_30_days_by_default_as_openai(store, clock):
    file = store.create_file("k", "in.jsonl", jsonl(line("a")))
    assert DEFAULT_FILE_EXPIRY_S == 30 * DAY == MAX_FILE_EXPIRY_S
    assert file.expires_at == file.created_at + 30 * DAY == int(clock()) + 30 * DAY
    assert store.get_file("k", file.id).expires_at == file.expires_at
    assert traces(store, file.id) == {
        f"{owner_dir('k')}/files/{file.id}",
        f"file_data/{file.id}",
        expiry_marker(file.expires_at, file.id),
    }
    assert expiry_marker(file.expires_at, file.id) == f"expiry/{file.expires_at:012d}-{file.id}"
    clock.tick(30 * DAY - 1)
    assert store.file_content("k", file.id)[1] == jsonl(line("a"))  # one second before: still there
    clock.tick(1)
    gone(store, "k", file.id)


def test_a_custom_expiry_is_kept_and_every_reader_sees_the_file_gone_once_due(store, clock):
    short = store.create_file("k", "short.jsonl", jsonl(line("a")), expires_after_s=3600)
    long = store.create_file("k", "long.jsonl", jsonl(line("b")), expires_after_s=7200)
    assert (short.expires_at - short.created_at, long.expires_at - long.created_at) == (3600, 7200)
    listed = {f.id: f.expires_at for f in store.list_files("k")[0]}
    assert listed == {short.id: short.expires_at, long.id: long.expires_at}
    clock.tick(3600)
    gone(store, "k", short.id)
    assert [f.id for f in store.list_files("k")[0]] == [long.id]
    assert store.get_file("k", long.id) == long


@pytest.mark.parametrize("how", ["get", "list", "content", "delete", "batch"])
def test_the_read_that_finds_a_file_expired_deletes_it(store, clock, how):
    file = store.create_file("k", "in.jsonl", jsonl(line("a")), expires_after_s=3600)
    other = store.create_file("other", "in.jsonl", jsonl(line("a")), expires_after_s=3600)
    clock.tick(3600)
    if how == "list":
        assert store.list_files("k") == ([], False)
    else:
        call = {
            "get": store.get_file,
            "content": store.file_content,
            "delete": store.delete_file,
            "batch": lambda owner, file_id: store.create_batch(owner, file_id, "/v1/embeddings", "", {}),
        }[how]
        with pytest.raises(FileNotFoundInStoreError):
            call("k", file.id)
    assert traces(store, file.id) == set()  # description, bytes and marker: all deleted
    assert len(traces(store, other.id)) == 3  # another key's file waits for its own reader or a sweep
    assert store.list_batches("k") == ([], False)


@pytest.mark.parametrize(
    ("seconds", "anchor", "field"),
    [
        (MIN_FILE_EXPIRY_S - 1, "created_at", "expires_after.seconds"),
        (MAX_FILE_EXPIRY_S + 1, "created_at", "expires_after.seconds"),
        (-3600, "created_at", "expires_after.seconds"),
        (3600, "last_active_at", "expires_after.anchor"),
    ],
)
def test_an_expiry_out_of_openais_bounds_is_refused_naming_the_field(store, seconds, anchor, field):
    with pytest.raises(InvalidArgumentError) as caught:
        expiry_seconds(seconds, "expires_after", anchor)
    assert (caught.value.reason, caught.value.metadata["field"]) == ("INVALID_EXPIRES_AFTER", field)
    if anchor == "created_at":
        with pytest.raises(InvalidArgumentError) as caught:
            store.create_file("k", "in.jsonl", jsonl(line("a")), expires_after_s=seconds)
        assert (caught.value.reason, caught.value.metadata["field"]) == ("INVALID_EXPIRES_AFTER", field)
        file = store.create_file("k", "in.jsonl", jsonl(line("a")))
        with pytest.raises(InvalidArgumentError) as caught:
            store.create_batch("k", file.id, "/v1/embeddings", "", {}, output_expires_after_s=seconds)
        assert caught.value.metadata["field"] == "output_expires_after.seconds"
    assert store.list_batches("k") == ([], False)  # no batch was made
    assert expiry_seconds(0, "expires_after") == DEFAULT_FILE_EXPIRY_S  # 0: not given
    assert expiry_seconds(MIN_FILE_EXPIRY_S, "x") == MIN_FILE_EXPIRY_S
    assert expiry_seconds(MAX_FILE_EXPIRY_S, "x") == MAX_FILE_EXPIRY_S


def test_a_description_stored_before_expiry_existed_never_expires(store, clock):
    file = store.create_file("k", "in.jsonl", jsonl(line("a")))
    old = {key: value for key, value in asdict(file).items() if key != "expires_at"}
    store.state.delete(f"{owner_dir('k')}/files/{file.id}")
    store.state.delete(expiry_marker(file.expires_at, file.id))
    store.state.create(f"{owner_dir('k')}/files/{file.id}", json.dumps(old).encode())
    clock.tick(365 * DAY)
    assert store.get_file("k", file.id) == replace(file, expires_at=0)
    assert store.sweep_expired(clock(), 100) == 0
    assert store.file_content("k", file.id)[1] == jsonl(line("a"))


def test_the_sweep_deletes_due_files_of_keys_that_never_return_oldest_first_within_its_limit(store, clock):
    first = [
        store.create_file(f"gone-{i}", "in.jsonl", jsonl(line("a")), expires_after_s=3600) for i in range(3)
    ]
    clock.tick(10)
    later = store.create_file("gone-0", "in.jsonl", jsonl(line("a")), expires_after_s=3600)
    kept = store.create_file("stays", "in.jsonl", jsonl(line("a")), expires_after_s=7200)
    assert store.sweep_expired(clock(), 100) == 0  # nothing due yet
    clock.tick(3600)  # the first three and `later` (10 s younger) are due; not `kept`
    assert store.sweep_expired(clock(), 2) == 2
    left = [file for file in (*first, later) if traces(store, file.id)]
    assert len(left) == 2 and left[1] == later  # two of the oldest went first
    assert store.sweep_expired(clock(), 2) == 2
    assert store.sweep_expired(clock(), 2) == 0
    for file in first:
        assert traces(store, file.id) == set()
    assert traces(store, later.id) == set()
    assert store.get_file("stays", kept.id) == kept
    assert {key for key in keys(store) if key.startswith("expiry/")} == {
        expiry_marker(kept.expires_at, kept.id)
    }
    assert store.sweep_expired(clock(), 0) == 0


def test_the_sweep_clears_stray_markers_and_bytes_a_crash_left(store, clock):
    # A crash between the deletes: the description is gone, the bytes and marker stay.
    half = store.create_file("k", "in.jsonl", jsonl(line("a")), expires_after_s=3600)
    store.state.delete(f"{owner_dir('k')}/files/{half.id}")
    # A marker with no file at all, one whose content is lost, and a name no marker has.
    lost = new_id("file-", clock())
    store.state.create(expiry_marker(half.expires_at, lost), json.dumps({"owner": "k"}).encode())
    store.state.create(expiry_marker(half.expires_at - 1, new_id("file-", clock())), b"")
    store.state.create("expiry/0-not-a-marker", b"{}")
    # A marker written by a finalize that died and was resumed: its file expires later.
    resumed = store.create_file("k", "in.jsonl", jsonl(line("b")), expires_after_s=7200)
    stale = expiry_marker(resumed.expires_at - 3600, resumed.id)
    store.state.create(stale, json.dumps({"owner": "k"}).encode())
    clock.tick(3600)
    assert store.sweep_expired(clock(), 100) == 5
    assert {key for key in keys(store) if key.startswith(("expiry/", "file_data/"))} == {
        expiry_marker(resumed.expires_at, resumed.id),
        f"file_data/{resumed.id}",
    }
    assert store.get_file("k", resumed.id) == resumed  # the stale marker did not take the file
    clock.tick(3600)
    assert store.sweep_expired(clock(), 100) == 1
    assert keys(store) == set()


def test_expired_files_do_not_count_against_the_keys_file_limit(store, clock):
    for _ in range(LIMITS.max_files):
        store.create_file("k", "in.jsonl", jsonl(line("a")), expires_after_s=3600)
    clock.tick(3600)
    file = store.create_file("k", "in.jsonl", jsonl(line("a")))  # the expired ones are deleted to make room
    assert [f.id for f in store.list_files("k")[0]] == [file.id]


def test_a_batchs_output_and_error_files_get_its_output_expiry(store, clock):
    data = jsonl(line("a"), line("b"))
    file = store.create_file("k", "in.jsonl", data, expires_after_s=3600)
    batch = store.create_batch("k", file.id, "/v1/embeddings", "24h", {}, output_expires_after_s=7200)
    assert batch.output_expires_after_s == 7200
    assert store.create_batch("k", file.id, "/v1/embeddings", "24h", {}).output_expires_after_s == 30 * DAY
    clock.tick(600)  # outputs are written later: their expiry counts from then (OpenAI's anchor)
    batch = replace(
        batch, planned_output_file_id=new_id("file-", clock()), planned_error_file_id=new_id("file-", clock())
    )
    store.put_results(batch.id, {0: LineResult(200, {"ok": True}, "req-1")})
    outputs = store.write_outputs(batch, parse_input(data, LIMITS.input), ("batch_expired", "too late"))
    written = [store.get_file("k", outputs.output_file_id), store.get_file("k", outputs.error_file_id)]
    assert [(f.purpose, f.expires_at) for f in written] == [("batch_output", int(clock()) + 7200)] * 2
    clock.tick(7200)
    assert store.sweep_expired(clock(), 100) == 3  # the input (due first) and both outputs
    for output in written:
        gone(store, "k", output.id)


def test_a_stored_batch_record_without_an_output_expiry_loads_with_30_days(store):
    file = store.create_file("k", "in.jsonl", jsonl(line("a")))
    batch = store.create_batch("k", file.id, "/v1/embeddings", "24h", {})
    record = json.loads(batch.to_json())
    del record["output_expires_after_s"]
    assert type(batch).from_json(json.dumps(record).encode()) == batch
    assert isinstance(
        FileInfo(**{k: v for k, v in asdict(file).items() if k != "expires_at"}).expires_at, int
    )


async def test_a_running_batch_keeps_running_when_its_input_file_expires(store, lane, clock):
    file = store.create_file("k", "in.jsonl", jsonl(*(line(f"r{i}") for i in range(4))), expires_after_s=3600)
    batch = store.create_batch("k", file.id, "/v1/embeddings", "24h", {}, output_expires_after_s=3600)
    fake = FakeExecutor(gated=True)
    run = BatchRunner(
        store, lane, line_concurrency=2, max_running=1, lease_s=30.0, scan_interval_s=60.0, clock=clock
    )
    run.attach(fake)
    await run.scan()
    await settle(2, fake)  # two lines in flight, two waiting
    clock.tick(3600)
    assert await run.sweep() == 1  # the input file is gone ...
    gone(store, "k", file.id)
    fake.gate.set()
    await run.wait_idle()
    done = store.get_batch("k", batch.id)  # ... but the runner holds its lines: every one ran
    assert (done.status, done.completed, done.failed) == (COMPLETED, 4, 0)
    output = store.get_file("k", done.output_file_id)
    assert output.expires_at == int(clock()) + 3600


async def test_the_runners_periodic_scan_sweeps_expired_files_a_bounded_number_a_pass(store, lane, clock):
    assert SWEEP_LIMIT == 100
    files = [
        store.create_file(f"gone-{i}", "in.jsonl", jsonl(line("a")), expires_after_s=3600) for i in range(3)
    ]
    clock.tick(3600)
    run = BatchRunner(
        store, lane, line_concurrency=1, max_running=1, lease_s=30.0, scan_interval_s=60.0, clock=clock
    )
    run.start(FakeExecutor())
    try:
        for _ in range(500):  # at most 5 s: the first pass sweeps at once (a few local file deletes)
            if not any(key.startswith("expiry/") for key in keys(store)):
                break
            await asyncio.sleep(0.01)
    finally:
        await run.stop()
    for file in files:
        assert traces(store, file.id) == set()


def test_a_sweep_that_found_nothing_due_lists_again_only_when_a_file_may_be_due(store, clock, tmp_path):
    listings = []
    listed = store.state.sizes
    store.state.sizes = lambda prefix="": (prefix == "expiry" and listings.append(prefix)) or listed(prefix)
    replica = make_store(tmp_path, clock)  # another server on the same state store
    first = store.create_file("k", "in.jsonl", jsonl(line("a")), expires_after_s=7200)
    assert store.sweep_expired(clock(), 100) == 0
    assert listings == ["expiry"]
    clock.tick(1800)
    assert store.sweep_expired(clock(), 100) == 0 and len(listings) == 1  # nothing can be due yet
    # Written after the listing, by the replica: due 3600 s after it was written, at the soonest.
    second = replica.create_file("gone", "in.jsonl", jsonl(line("b")), expires_after_s=3600)
    clock.tick(1799)
    assert store.sweep_expired(clock(), 100) == 0 and len(listings) == 1
    clock.tick(1)  # an hour after the listing: lists again, and sees the replica's file
    assert store.sweep_expired(clock(), 100) == 0 and len(listings) == 2
    clock.tick(1800)  # the replica's file is due (the first is due 1800 s later)
    assert store.sweep_expired(clock(), 100) == 1 and len(listings) == 3
    assert traces(store, second.id) == set() and store.get_file("k", first.id) == first
    clock.tick(1800)
    assert store.sweep_expired(clock(), 100) == 1
    assert keys(store) == set()
