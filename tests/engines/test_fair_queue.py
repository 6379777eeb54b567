"""Priorities and fair share with deterministic arrivals, queue by queue.

The fair queue itself (strict priority, start-time fair queuing by key and weight, bounded state),
then each queue that admits work on it: the encoder batcher (plain Python batch functions on a
real device executor), the generation scheduler (a fake engine whose characters are tokens) and a
process lane's turns. Real models: tests/engines/test_fair_share_models.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from prometheus_client import REGISTRY

from engines import metrics
from engines.batching import BatchingConfig, DynamicBatcher
from engines.errors import ResourceExhaustedError
from engines.executor import DeviceExecutor
from engines.fair_queue import FairQueue
from engines.fair_share import DEFAULT_CALLER, Caller, Priority, Share, caller_var
from engines.generation.scheduler import ContinuousBatchScheduler
from engines.process_lane import FairTurns, take_turn
from tests.engines.encoders.test_length_batches import Recorder, hold_the_lane
from tests.engines.generation.test_engine_template import FakeEngine, request
from tests.engines.generation.test_scheduler_admission import device_held

A, B, C = Share("a"), Share("b"), Share("c")
BULK = Share("bulk", Priority.BATCH)


def as_caller(share: Share) -> Caller:
    """The caller of a call under ``share`` (its key's name, as the admission chain sets it)."""
    return Caller(name=share.key, share=share, lane=share.key)


def pop_all(queue: FairQueue) -> list:
    return [queue.pop() for _ in range(len(queue))]


# -- the fair queue ------------------------------------------------------------------------------


def test_an_interactive_item_goes_before_a_whole_batch_class_backlog():
    queue: FairQueue[str] = FairQueue()
    for i in range(50):
        queue.push(f"bulk{i}", BULK)
    queue.push("chat", A)
    assert queue.pop() == "chat"
    assert pop_all(queue) == [f"bulk{i}" for i in range(50)]


def test_one_keys_100_queued_items_hold_another_keys_single_item_back_by_one_turn():
    queue: FairQueue[str] = FairQueue()
    for i in range(100):
        queue.push(f"a{i}", A)
    queue.push("b0", B)
    assert [queue.pop(), queue.pop()] == ["a0", "b0"]  # a0 came first with the same start tag
    # Also when a's backlog is already being served: b's state went with its last item, so b1
    # starts at the virtual time again (before a1), never behind a's 98 queued items.
    queue.push("b1", B)
    assert [queue.pop(), queue.pop()] == ["b1", "a1"]
    assert pop_all(queue) == [f"a{i}" for i in range(2, 100)]


def test_weights_2_to_1_give_2_to_1_service_while_both_keys_have_work_queued():
    queue: FairQueue[str] = FairQueue()
    heavy, light = Share("a", weight=2.0), Share("b", weight=1.0)
    for i in range(40):
        queue.push(f"a{i}", heavy)
        queue.push(f"b{i}", light)
    served = [queue.pop()[0] for _ in range(60)]
    for window in range(0, 60, 3):  # every turn of three: two of a, one of b
        assert sorted(served[window : window + 3]) == ["a", "a", "b"], served
    assert served.count("a") == 40 and served.count("b") == 20


def test_shares_are_of_cost_not_of_items():
    """A key sending inputs ten times as long gets one for every ten of the other's (tokens)."""
    queue: FairQueue[str] = FairQueue()
    for i in range(5):
        queue.push(f"long{i}", A, cost=100)
    for i in range(40):
        queue.push(f"short{i}", B, cost=10)
    served = pop_all(queue)
    between = served.index("long2") - served.index("long1") - 1
    assert between == 10, served


def test_one_key_is_first_in_first_out():
    queue: FairQueue[str] = FairQueue()
    for i in range(20):
        queue.push(f"x{i}", Share(), cost=(i * 7) % 5 + 1)
    assert pop_all(queue) == [f"x{i}" for i in range(20)]


def test_a_keys_state_is_dropped_when_its_queue_empties():
    queue: FairQueue[str] = FairQueue("m-state")
    names = {f"{key}{i}": f"{key}{i}" for key in "ab" for i in range(3)}  # items: these objects
    for i in range(3):
        queue.push(names[f"a{i}"], A)
        queue.push(names[f"b{i}"], B)
    queue.push("c0", C)
    queue.push("bulk0", BULK)
    assert queue.flow_count() == 4
    assert queue.discard("c0") and not queue.discard("c0")
    assert queue.flow_count() == 3
    assert queue.remove_where(lambda item: item in {"b0", "b1", "b2"}) == ["b0", "b1", "b2"]
    assert queue.flow_count() == 2
    queue.take([names["a1"], "bulk0"])
    assert pop_all(queue) == ["a0", "a2"]
    assert queue.flow_count() == 0 and queue.depths() == [] and not queue


def test_expire_removes_the_items_older_than_the_limit_oldest_first_over_all_keys():
    queue: FairQueue[str] = FairQueue()
    queue.push("a0", A, now=100.0)
    queue.push("b0", B, now=101.0)
    queue.push("a1", A, now=102.0)
    queue.push("b1", B, now=105.0)
    queue.push("bulk0", BULK, now=100.5)
    assert queue.oldest_enqueued_at() == 100.0
    assert queue.expire(now=106.0, limit_s=3.5) == ["a0", "bulk0", "b0", "a1"]
    assert queue.ordered() == ["b1"]


@pytest.mark.parametrize(
    ("share", "cost", "message"),
    [(Share("a", weight=0.0), 1.0, "weight > 0"), (A, -1.0, "cost must be >= 0")],
)
def test_a_bad_cost_or_weight_is_refused(share, cost, message):
    with pytest.raises(ValueError, match=message):
        FairQueue().push("x", share, cost=cost)


def test_an_item_is_queued_once():
    queue: FairQueue[str] = FairQueue()
    item = "x"
    queue.push(item, A)
    with pytest.raises(ValueError, match="queued already"):
        queue.push(item, B)
    with pytest.raises(IndexError):
        FairQueue().pop()


def test_a_charge_moves_a_held_keys_queued_items_as_if_their_cost_had_been_known():
    """A lane job's cost (its seconds) is known when it ends: SFQ needs only the previous one's."""
    queue: FairQueue[str] = FairQueue()
    queue.push("a0", A, cost=0)
    assert queue.pop(hold=True) == "a0"
    queue.push("a1", A, cost=0)
    queue.push("b0", B, cost=0)
    queue.charge(A, 5.0)  # a0 held the lane 5 s: b goes before a1 ...
    assert queue.pop(hold=True) == "b0"
    queue.charge(B, 1.0)  # ... and b's state goes with its last job
    assert queue.flow_count() == 1
    assert queue.pop(hold=True) == "a1"
    queue.charge(A, 1.0)
    assert queue.flow_count() == 0


def test_depth_and_wait_are_metrics_by_key_only_when_key_names_are_on():
    queue: FairQueue[str] = FairQueue("m-metrics")

    def depth(key: str) -> float | None:
        labels = {"model": "m-metrics", "key": key, "priority": "interactive"}
        return REGISTRY.get_sample_value("ur_queue_depth", labels)

    def waits(key: str) -> float:
        labels = {"model": "m-metrics", "key": key, "priority": "interactive"}
        return REGISTRY.get_sample_value("ur_queue_wait_seconds_count", labels) or 0.0

    for i in range(3):
        queue.push(f"a{i}", A)
    queue.push("b0", B)
    assert depth("") == 4 and depth("a") is None
    metrics.name_keys(True)
    try:
        assert depth("a") == 3 and depth("b") == 1 and depth("") is None
        before = waits("a")
        queue.pop()
        assert waits("a") == before + 1
        assert depth("a") == 2
    finally:
        metrics.name_keys(False)
    queue.clear()
    assert depth("") is None  # an empty queue has no series


# -- the encoder batcher -------------------------------------------------------------------------


@pytest.fixture
def executor():
    ex = DeviceExecutor("cpu-fair-queue")
    yield ex
    ex.shutdown()


async def submit_as(
    batcher: DynamicBatcher, share: Share, names: list[str], cost: int = 8
) -> list[asyncio.Future]:
    """Submit one single-input request per name under ``share``; return once all are queued."""

    async def one(name: str) -> list[str]:
        caller_var.set(as_caller(share))
        return await batcher.submit([(name, cost)], [cost])

    futures = [asyncio.ensure_future(one(name)) for name in names]
    await asyncio.sleep(0)  # each submit runs up to its wait: all are queued now
    return futures


def whole_batches(**limits: int) -> BatchingConfig:
    """Batch limits with time slices off (``fair_batch_ms``): these tests check whole batches' order.

    The lane is held by a batch that waits on a gate, which the slice's estimate would count as
    device time; slices are tested in ``tests/engines/test_batch_time_slice.py`` and on a real model.
    """
    return BatchingConfig(**limits, fair_batch_ms=0)


def batch_names(recorder: Recorder) -> list[list[str]]:
    return [[name for name, _ in batch] for batch in recorder.batches[1:]]  # after the blocker


async def test_a_keys_single_input_runs_in_the_next_batch_beside_another_keys_flood(executor):
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, whole_batches(max_batch_size=8), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    flood = await submit_as(batcher, A, [f"a{i}" for i in range(64)])
    single = await submit_as(batcher, B, ["b0"])
    recorder.gate.set()
    await asyncio.gather(*flood, *single, blocker)
    batches = batch_names(recorder)
    assert "b0" in batches[0], batches[:2]  # in FIFO order it would run in the ninth batch
    assert [len(batch) for batch in batches] == [8] * 8 + [1]


async def test_an_interactive_input_runs_before_queued_batch_class_inputs_and_apart(executor):
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, whole_batches(max_batch_size=8), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    bulk = await submit_as(batcher, BULK, [f"bulk{i}" for i in range(20)])
    chat = await submit_as(batcher, A, ["chat0", "chat1"])
    recorder.gate.set()
    await asyncio.gather(*bulk, *chat, blocker)
    batches = batch_names(recorder)
    assert sorted(batches[0]) == ["chat0", "chat1"]  # a batch holds one class: no bulk rides along
    assert [name for batch in batches[1:] for name in batch] == [f"bulk{i}" for i in range(20)]


async def test_weights_2_to_1_fill_batches_2_to_1(executor):
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, whole_batches(max_batch_size=6), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    heavy = await submit_as(batcher, Share("a", weight=2.0), [f"a{i}" for i in range(24)])
    light = await submit_as(batcher, Share("b", weight=1.0), [f"b{i}" for i in range(24)])
    recorder.gate.set()
    await asyncio.gather(*heavy, *light, blocker)
    for batch in batch_names(recorder)[:6]:  # while both have inputs queued
        assert sorted(name[0] for name in batch) == ["a"] * 4 + ["b"] * 2, batch


async def test_another_keys_long_input_runs_next_beside_a_flood_of_short_ones(executor):
    """The length groups hold within the class: the long input heads the next batch, alone."""
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, whole_batches(max_batch_size=16), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    flood = await submit_as(batcher, A, [f"a{i}" for i in range(100)], cost=7)
    long = await submit_as(batcher, B, ["long"], cost=250)
    recorder.gate.set()
    await asyncio.gather(*flood, *long, blocker)
    batches = batch_names(recorder)
    assert batches[1] == ["long"], batches[:3]  # after the batch headed by a0, which came first


async def test_inputs_of_every_key_past_the_wait_limit_are_refused(executor):
    recorder = Recorder()
    config = BatchingConfig(max_batch_size=4, max_queue_wait_s=0.05)
    batcher = DynamicBatcher(recorder, executor, config, name="t")
    blocker = await hold_the_lane(batcher, recorder)
    queued = await submit_as(batcher, A, ["a0", "a1"]) + await submit_as(batcher, B, ["b0"])
    await asyncio.sleep(0.1)
    recorder.gate.set()
    await blocker
    for future in queued:
        with pytest.raises(ResourceExhaustedError) as caught:
            await future
        assert caught.value.reason == "QUEUE_WAIT_EXCEEDED"
    assert len(batcher._queue) == 0 and batcher._queue.flow_count() == 0


async def test_a_full_encoder_queue_refuses_the_crowding_keys_newest_request_for_another_keys(executor):
    recorder = Recorder()
    batcher = DynamicBatcher(recorder, executor, BatchingConfig(max_batch_size=8, max_queue=4), name="t")
    blocker = await hold_the_lane(batcher, recorder)
    crowd = await submit_as(batcher, A, [f"a{i}" for i in range(4)])
    single = await submit_as(batcher, B, ["b0"])
    with pytest.raises(ResourceExhaustedError, match="gave their places to another key's") as caught:
        await crowd[3]  # refused while it waited: b0 has its place
    assert caught.value.reason == "OVERLOADED"
    caller_var.set(as_caller(A))
    try:
        with pytest.raises(ResourceExhaustedError, match="is overloaded: 4 inputs are queued"):
            await batcher.submit([("a4", 8)], [8])  # a's own places: refused at once, as before
    finally:
        caller_var.set(DEFAULT_CALLER)
    recorder.gate.set()
    await asyncio.gather(*crowd[:3], *single, blocker)
    assert sorted(name for batch in batch_names(recorder) for name in batch) == ["a0", "a1", "a2", "b0"]


# -- the generation scheduler --------------------------------------------------------------------


@pytest.fixture
def engine():
    engine = FakeEngine(reply="abc")
    engine.context_length = 64
    engine.scheduler = ContinuousBatchScheduler(engine, max_sequences=1, max_waiting=20)
    yield engine
    engine.executor.shutdown(wait=False)


async def stream_as(engine, request_id: str, share: Share) -> None:
    """Read the whole stream of a request under ``share``."""
    caller_var.set(as_caller(share))
    async with contextlib.aclosing(engine.stream(request(request_id))) as deltas:
        async for _ in deltas:
            pass


async def admission_order(engine, requests: list[tuple[str, Share]]) -> list[str]:
    """Stream ``requests`` (submitted in order while the lane is held); the order they ran in."""
    async with device_held(engine):
        tasks = [asyncio.ensure_future(stream_as(engine, rid, share)) for rid, share in requests]
        await asyncio.sleep(0)  # each waits for its prepare, in submission order
    await asyncio.gather(*tasks)
    order: list[str] = []
    for call, ids in engine.calls:
        for rid in ids if call == "forward" else ():
            if rid not in order:
                order.append(rid)
    return order


async def test_another_keys_request_takes_the_next_free_slot_before_a_keys_backlog(engine):
    # "first" (a third key) takes the slot whenever the loop starts (first by class and arrival);
    # then a0 and b0 have the same start tag, and a0 came first.
    requests = [("first", C)] + [(f"a{i}", A) for i in range(5)] + [("b0", B)]
    order = await admission_order(engine, requests)
    assert order == ["first", "a0", "b0", "a1", "a2", "a3", "a4"]  # FIFO: b0 last


async def test_an_interactive_request_takes_the_next_slot_before_batch_class_ones(engine):
    # "first" takes the slot whenever the loop starts (it is first by class and by arrival).
    requests = [("first", C)] + [(f"bulk{i}", BULK) for i in range(4)] + [("chat", A)]
    order = await admission_order(engine, requests)
    assert order == ["first", "chat", "bulk0", "bulk1", "bulk2", "bulk3"]  # FIFO: chat last


async def test_a_cancelled_waiting_request_leaves_no_state(engine):
    async with device_held(engine):
        first = asyncio.ensure_future(stream_as(engine, "a0", A))
        waiting = asyncio.ensure_future(stream_as(engine, "b0", B))
        await asyncio.sleep(0)
    for _ in range(200):  # bounded: until b0 is queued behind a0
        if len(engine.scheduler._waiting):
            break
        await asyncio.sleep(0.005)
    waiting.cancel()
    await asyncio.gather(first, waiting, return_exceptions=True)
    await engine.scheduler.drained()
    assert engine.scheduler._waiting.flow_count() == 0
    assert engine.scheduler.admitted_count == 0


# -- a process lane's turns ----------------------------------------------------------------------


async def lane_order(turns: FairTurns, jobs: list[tuple[str, Share, float]]) -> list[str]:
    """Queue ``jobs`` (caller, share, seconds each holds the lane) behind a running one; the order they ran."""
    order: list[str] = []

    async def job(caller: str, share: Share, used_s: float) -> None:
        await turns.acquire(caller, share)
        order.append(caller)
        await asyncio.sleep(0)
        turns.release(caller, used_s, share)

    await turns.acquire("first", A)  # the lane is busy: every job below waits its turn
    tasks = [asyncio.ensure_future(job(*spec)) for spec in jobs]
    await asyncio.sleep(0)
    turns.release("first", 1.0, A)
    await asyncio.gather(*tasks)
    return order


async def test_a_lane_runs_an_interactive_job_before_queued_batch_class_jobs():
    turns = FairTurns()
    jobs = [("bulk", BULK, 1.0)] * 3 + [("chat", A, 1.0)]
    assert await lane_order(turns, jobs) == ["chat", "bulk", "bulk", "bulk"]


async def test_lane_callers_share_its_time_by_weight():
    turns = FairTurns()
    heavy, light = Share("h", weight=2.0), Share("l", weight=1.0)
    jobs = [("h", heavy, 1.0)] * 8 + [("l", light, 1.0)] * 8
    order = await lane_order(turns, jobs)
    assert order[:9] == ["h", "l", "h", "h", "l", "h", "h", "l", "h"], order


async def test_page_jobs_on_a_thread_lane_take_fair_turns(executor):
    """OCR and layout engines put FairTurns in front of their thread lane (take_turn)."""
    turns, gate, order = FairTurns("ocr-test"), threading.Event(), []

    def page(name: str) -> None:
        if name == "first":
            gate.wait(10)
        order.append(name)

    async def job(caller: str, share: Share, name: str) -> None:
        caller_var.set(Caller(name=share.key, share=share, lane=caller))
        await take_turn(turns, lambda: executor.run(page, name))

    first = asyncio.ensure_future(job("c", C, "first"))
    await asyncio.sleep(0.05)  # "first" holds the turn and the lane
    jobs = [asyncio.ensure_future(job("a", A, f"a{i}")) for i in range(4)]
    jobs.append(asyncio.ensure_future(job("b", B, "b0")))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *jobs)
    assert order == ["first", "a0", "b0", "a1", "a2", "a3"]  # FIFO on the lane: b0 last


# -- a full queue: longest queue drop ------------------------------------------------------------


def test_a_full_queue_gives_a_place_of_the_key_with_the_most_waiting_to_another_key():
    queue: FairQueue[str] = FairQueue()
    names = [f"a{i}" for i in range(3)]
    for name in names:
        queue.push(name, A)
    assert queue.push_out_victims(A) is None  # never a key's own work
    assert queue.push_out_victims(B) == [names[2]]  # a's newest
    queue.discard(names[2])
    queue.push("b0", B)
    assert queue.push_out_victims(B) is None  # a 2, b 1: b would have 2 with another: even
    assert queue.push_out_victims(Share("b", weight=2.0)) == [names[1]]  # weight 2: entitled to more
    assert queue.push_out_victims(BULK) is None  # a lower class pushes out nothing
    bulk = FairQueue()
    bulk.push("n0", BULK)
    assert bulk.push_out_victims(A) == ["n0"]  # a higher class pushes out a lower one


def test_push_out_takes_whole_requests_and_only_when_enough_places_come_free():
    queue: FairQueue[tuple[str, int]] = FairQueue()
    items = [("r1", i) for i in range(3)] + [("r2", i) for i in range(4)] + [("r3", i) for i in range(3)]
    for item in items:
        queue.push(item, A)
    by_request = {"group": lambda item: item[0]}
    assert queue.push_out_victims(B, needed=1, **by_request) == items[7:]  # the newest request, whole
    assert queue.push_out_victims(B, needed=4, **by_request) == items[7:] + items[3:7]
    # 4 items of b: a request of a is taken while a holds more than 4; 7 places come free, not 8
    assert queue.push_out_victims(B, count=4, needed=7, **by_request) == items[7:] + items[3:7]
    assert queue.push_out_victims(B, count=4, needed=8, **by_request) is None
    assert len(queue) == 10  # nothing removed: the caller refuses the victims


@pytest.fixture
def long_replies():
    """A fake engine whose replies take 3,000 steps, with 1 slot and 2 waiting places."""
    engine = FakeEngine(reply="x" * 3000)
    engine.context_length = 4096
    engine.scheduler = ContinuousBatchScheduler(engine, max_sequences=1, max_waiting=2)
    yield engine
    engine.executor.shutdown(wait=False)


@pytest.mark.parametrize("crowd", [A, BULK])
async def test_a_request_of_another_key_takes_the_place_of_the_crowding_keys_newest(long_replies, crowd):
    engine = long_replies
    async with device_held(engine):  # prepared in this order once the lane is free
        first = asyncio.ensure_future(stream_as(engine, "first", C))
        crowded = [asyncio.ensure_future(stream_as(engine, f"crowd{i}", crowd)) for i in range(2)]
        await asyncio.sleep(0)
    scheduler = engine.scheduler
    newcomer = None
    try:
        # Bounded (10 s): until "first" runs (it holds the slot for 3,000 steps) and both crowd
        # requests are queued. Counting the queue alone passes while "first" is still queued and
        # crowd1 still being prepared, and then crowd0 is the newest queued request.
        for _ in range(1000):
            if scheduler.active_count == 1 and len(scheduler._waiting) == 2:
                break
            await asyncio.sleep(0.01)
        assert scheduler.active_count == 1 and len(scheduler._waiting) == 2 and not first.done()
        async with device_held(engine):
            newcomer = asyncio.ensure_future(stream_as(engine, "b0", B))
            with pytest.raises(ResourceExhaustedError, match="gave its place to another key's") as caught:
                await crowded[1]  # refused while it waited: its place went to b0
            assert caught.value.reason == "OVERLOADED"
            with pytest.raises(ResourceExhaustedError, match="is full"):
                await stream_as(engine, "crowd2", crowd)  # its own key's places: refused as before
            assert scheduler.admitted_count == 3
    finally:
        # Every task is awaited, pass or fail: a task whose error nobody retrieved is logged with
        # a traceback when collected, inside whatever later test the collection happens to run.
        first.cancel()
        outcomes = await asyncio.gather(
            first, *crowded, *[newcomer] if newcomer else [], return_exceptions=True
        )
    assert outcomes[1] is None and outcomes[3] is None  # crowd0 and b0 ran to the end
    await engine.scheduler.drained()
    assert engine.scheduler.admitted_count == 0
