"""A dynamic batcher: concurrent small requests to one model run as one forward pass.

Every encoder engine (embeddings, cross-encoder reranking, sequence classification) owns one
:class:`DynamicBatcher`. Callers ``await batcher.submit(items, costs)`` from the event loop;
their items wait in a bounded FIFO queue. One collector task per batcher:

1. waits for the first queued item, then up to ``max_wait_ms`` (measured from that item's
   arrival) for more, or less when the queue already holds a full batch. The default is 0:
   whatever is queued when the device is free runs at once, so a lone request pays no wait,
   and under load batches grow by themselves while the previous batch runs;
2. takes a batch of items of similar length (length-aware batching, below) within the batch
   limits (at most ``max_batch_size`` items and a padded cost ``len(batch) * max(cost)`` of at
   most ``max_batch_tokens`` tokens; the oldest item is always taken, so one over-budget input
   still runs), dropping items whose caller was cancelled before they ran;
3. sorts the batch by cost (longest first) and runs ONE job, ``run_batch(items)``, on the
   device's executor;
4. routes each output back to its caller's future. ``run_batch`` returns one output per item, or
   an exception instance for an item that failed alone; an exception raised by ``run_batch``
   fails every caller of the batch. No caller is ever left waiting.

While a batch runs, new requests queue up, so under load each batch is as large as the limits
allow (the same scheme as text-embeddings-inference's and infinity's batch queues).

A second job waits on the lane behind the running one (:data:`JOBS_ON_LANE`), and a job takes its
batch from the queue only when it starts on the lane thread. So the lane goes from one batch
straight into the next, without waiting for the event loop to hand the outputs out and collect
again, and the batch is still everything queued at the moment the device is free (see
docs/architecture/design-notes.md#a-second-job-waits-on-the-lane). A job is queued only for items
that arrived after the last one was (or that will not fit its batch), so a lone request costs one
job, not two.

Priorities and fair share: the queue is a :class:`~engines.fair_queue.FairQueue`. Every
input carries its call's share (:func:`~engines.fair_share.current_share`, read in the caller's
context when it is queued) and costs its tokens. A batch holds inputs of one priority class: the
first class with inputs queued (all interactive inputs go before any batch-class input; a batch
already on the lane is never interrupted). Within the class the order is start-time fair queuing
between API keys, by tokens and the keys' weights, first in first out within a key: one key's
flood of 64 callers delays another key's input by about one batch, not by the whole flood. While
inputs of more than one key keep arriving, batches are cut at about ``fair_batch_ms`` of device
time (:mod:`engines.batching.time_slice`), so that one batch is a short wait too.

Length-aware batching: a batch is padded to its longest input, so inputs of very different
lengths are not run together. The input first in the fair order heads every batch (with one key,
the oldest: an input only ever waits behind older inputs of its key and about one turn of each
other key, so a stream of short inputs cannot hold a long one back; once its wait window is over
it runs in the next batch the lane takes); the batch then takes the queued inputs of its class
nearest to it in length (the earlier in the fair order first among equals) while every input keeps at least
:data:`LENGTH_RATIO` of the batch's longest input's tokens, so at most half of a batch is
padding. Inputs of other lengths wait for the next job (queued behind the running one at once,
so the lane does not idle for them). ``python -m bench.embeddings --mixed-lengths`` measures the
padding and the throughput it saves (bench/README.md).

A queue that holds ``max_queue`` items refuses more with :class:`ResourceExhaustedError`
(reason ``OVERLOADED``; HTTP 429 at the gateway), unless the newcomer's key is more entitled to
places than the key with the most inputs queued (a higher class, or fewer inputs per weight):
then that key's newest whole requests are refused instead, OVERLOADED as well, to make room
(longest queue drop, see :mod:`engines.fair_queue`); a key never pushes out its own.

Engines tokenize a request's inputs (in a worker thread) before its items can be queued. So that
a burst is refused before that work, not after it, an engine first takes the request's places
with :meth:`DynamicBatcher.reserve`; reserved places count against ``max_queue`` like queued
items, and turn into queued items when the request's ``submit`` enqueues them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

from engines import tracing
from engines.batching.options import BatchingConfig
from engines.batching.time_slice import BatchTimeSlice
from engines.errors import ResourceExhaustedError, UnavailableError, queue_wait_exceeded
from engines.executor import DeviceExecutor
from engines.fair_queue import FairQueue
from engines.fair_share import current_share
from engines.metrics import observe_encoder_batch
from engines.reasons import Reason

log = logging.getLogger(__name__)

I = TypeVar("I")  # noqa: E741 - the conventional name for an input type variable
O = TypeVar("O")  # noqa: E741

#: Jobs of one batcher on its lane at once: the running batch and one waiting to take the next.
JOBS_ON_LANE = 2

#: Least fraction of a batch's longest input's tokens that every input of the batch has (the
#: length-aware batching of the module docstring): at most ``1 - LENGTH_RATIO`` of a batch is
#: padding. One half: on the CPU a forward pass costs about its padded tokens plus a small fixed
#: cost, so a group pays for its own pass as soon as it would have been half padding (as text-embeddings-
#: inference's and vLLM's power-of-two length buckets bound padding to one half).
LENGTH_RATIO = 0.5


@dataclass(slots=True)
class _Entry(Generic[I]):
    item: I
    cost: int
    future: asyncio.Future
    enqueued_at: float  # time.monotonic() (the lane thread reads it too)
    request: int  # serial number of the submit call it came with (requests are counted by it)
    # Epoch ns of the entry's queueing and of its batch's start and end (spans, when tracing).
    enqueued_ns: int = 0
    started_ns: int = 0
    finished_ns: int = 0


class QueuePlaces:
    """Queue places one request holds while its inputs are prepared (see :meth:`DynamicBatcher.reserve`).

    Use as a context manager around the preparation and the ``submit(..., places=...)`` call:
    the places are handed back when the request's items join the queue (they are then counted
    as queued items) or when the ``with`` block ends (an error or cancellation before submit),
    whichever comes first.

    Attributes:
        count: the places held (items of the request); 0 once handed back.

    """

    def __init__(self, give_back: Callable[[int], None], count: int) -> None:
        self._give_back = give_back
        self.count = count

    def release(self) -> None:
        """Hand the places back (idempotent)."""
        count, self.count = self.count, 0
        if count:
            self._give_back(count)

    def __enter__(self) -> QueuePlaces:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()


class DynamicBatcher(Generic[I, O]):
    """Gathers items from concurrent callers into batches run on the model's lane (executor).

    Args:
        run_batch: blocking function run on the executor with a list of items (sorted longest
            first); returns one output per item, in the same order, where an exception instance
            fails that item's caller alone.
        executor: the engine's lane.
        config: the batch limits.
        name: the model name, for logs and error messages.

    """

    def __init__(
        self,
        run_batch: Callable[[list[I]], Sequence[O | BaseException]],
        executor: DeviceExecutor,
        config: BatchingConfig | None = None,
        *,
        name: str = "",
    ) -> None:
        self._run_batch = run_batch
        self._executor = executor
        self.config = config or BatchingConfig()
        self.name = name
        self._queue: FairQueue[_Entry[I]] = FairQueue(name)
        # Places held by requests still preparing their items; they count against max_queue.
        self._reserved = 0
        # Requests holding such places, and the batch on the lane now (read by request_counts).
        self._preparing = 0
        self._computing: list[_Entry[I]] = []
        self._submits = 0
        self._wakeup: asyncio.Event | None = None
        self._collector: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        # The queue is changed on the event loop and taken from on the lane thread (a job takes
        # its batch when it starts): every change and every batch plan holds this lock.
        self._lock = threading.Lock()
        self._jobs: set[asyncio.Task[None]] = set()
        self._lane_slots: asyncio.Semaphore | None = None
        # Items queued so far, and that count when the last job was queued: a job queued since
        # then takes every item that was waiting then, so only newer items need another job.
        self._arrivals = 0
        self._arrivals_at_last_job = 0
        # The batch's device-time budget while several keys send work (under the lock).
        self._slice = BatchTimeSlice(self.config.fair_batch_ms)

    @property
    def queue_depth(self) -> int:
        """Inputs queued or held by requests still preparing them (read at metrics scrapes)."""
        return len(self._queue) + self._reserved

    def request_counts(self) -> tuple[int, int]:
        """``(running, waiting)`` requests now (read at metrics scrapes, from any thread).

        Running: requests with an input in the batch on the lane. Waiting: requests preparing their
        inputs, and requests with inputs queued and none in that batch (a request split over
        several batches counts as running while one of its batches runs). Counted over the queue
        under the lock a batch is taken with, which no job holds while it computes.
        """
        with self._lock:
            running = {entry.request for entry in self._computing}
            queued = {entry.request for entry in self._queue.ordered() if not entry.future.done()}
        return len(running), len(queued - running) + self._preparing

    def reserve(self, count: int) -> QueuePlaces:
        """Take ``count`` queue places for a request before its inputs are tokenized.

        The check and the taking happen with no await in between, so a burst of simultaneous
        requests cannot all pass while their inputs are being prepared.

        Args:
            count: items the request will submit (its number of inputs).

        Returns:
            the places, to pass to :meth:`submit` as ``places`` (and to close on every way out).

        Raises:
            ResourceExhaustedError: queued items and held places leave no room (reason OVERLOADED).
            UnavailableError: the batcher is closed (model unloading, server stopping).

        """
        self._check_open()
        self._admit(count)
        self._reserved += count
        if count:  # QueuePlaces gives back only places it holds
            self._preparing += 1
        return QueuePlaces(self._give_back, count)

    def _give_back(self, count: int) -> None:
        self._reserved -= count
        self._preparing -= 1

    def _check_open(self) -> None:
        if self._closed:
            raise UnavailableError(f"model {self.name!r} is unloading", reason=Reason.MODEL_UNLOADING)

    def _admit(self, count: int) -> None:
        """Refuse ``count`` more items when the queue and the held places have no room for them."""
        held = len(self._queue) + self._reserved
        # A request larger than the whole queue is still accepted into an empty queue, so that
        # max_queue never makes a request impossible; it only sheds load.
        if count and held and held + count > self.config.max_queue:
            if self._push_out(count, held + count - self.config.max_queue):
                return
            raise ResourceExhaustedError(
                f"model {self.name!r} is overloaded: {held} inputs are queued or being prepared "
                f"(max_queue={self.config.max_queue}); retry later",
                model=self.name,
                queued=held,
                max_queue=self.config.max_queue,
            )

    def _push_out(self, count: int, needed: int) -> bool:
        """Make ``needed`` places for ``count`` items of the current call's key by refusing queued requests.

        The victims are whole requests of the least entitled key (:meth:`FairQueue.push_out_victims`:
        a lower class, or more inputs queued per weight than this key would have), newest first;
        their callers get OVERLOADED, as if they had come when the queue was full. False (nothing
        refused) when that cannot free ``needed`` places.
        """
        with self._lock:
            victims = self._queue.push_out_victims(
                current_share(), count=count, needed=needed, group=lambda entry: entry.request
            )
            for entry in victims or ():  # bounded by the queue
                self._queue.discard(entry)
        if victims is None:
            return False
        error = ResourceExhaustedError(
            f"model {self.name!r} is overloaded (max_queue={self.config.max_queue}); this request's "
            "queued inputs gave their places to another key's (fair share); retry later",
            model=self.name,
            max_queue=self.config.max_queue,
        )
        for entry in victims:
            if not entry.future.done():
                entry.future.set_exception(error)
        return True

    async def submit(
        self, items: Sequence[I], costs: Sequence[int], *, places: QueuePlaces | None = None
    ) -> list[O]:
        """Queue ``items`` (one caller's inputs) and return their outputs, in order.

        Args:
            items: inputs of one request; they may run in different batches.
            costs: token count of each item (its padded length in the batch).
            places: the places this request took with :meth:`reserve` (its items are then
                admitted without a second check, and the places become these queued items);
                None to check for room now.

        Raises:
            ResourceExhaustedError: the queue is full (reason OVERLOADED; only without ``places``).
            UnavailableError: the batcher is closed (model unloading, server stopping).
            Exception: the first error of an item of this request (the others are then dropped
                if they have not run).

        """
        if len(items) != len(costs):
            raise ValueError("items and costs differ in length")
        self._check_open()
        if not items:
            return []
        self._start()
        if places is None:
            self._admit(len(items))
        else:
            places.release()  # from here on its items are counted in the queue itself
        loop = asyncio.get_running_loop()
        share = current_share()
        now, now_ns = time.monotonic(), time.time_ns()
        futures = [loop.create_future() for _ in items]
        self._submits += 1
        entries = [
            _Entry(item, max(1, int(cost)), future, now, self._submits, now_ns)
            for item, cost, future in zip(items, costs, futures, strict=True)
        ]
        with self._lock:
            for entry in entries:  # bounded by max_queue (or one request's inputs when larger)
                self._queue.push(entry, share, cost=entry.cost, now=now)
            self._slice.note_arrival(share.priority, share.key, now)
        self._arrivals += len(entries)
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            outputs = [await future for future in futures]
            self._record_spans(entries)
            return outputs
        except BaseException:
            # Cancelled or one item failed: the request is over, drop what has not run yet. Under
            # the lock, so that a job taking its batch sees all of the request dropped or none.
            with self._lock:
                for future in futures:
                    future.cancel()
            raise

    def _record_spans(self, entries: list[_Entry[I]]) -> None:
        """A request's wait in the queue and its batches' run, as child spans of the caller's span."""
        if not tracing.enabled():
            return
        started = min(entry.started_ns for entry in entries)
        finished = max(entry.finished_ns for entry in entries)
        tracing.record_span("ur.encoder.queue", entries[0].enqueued_ns, started, model=self.name)
        tracing.record_span("ur.encoder.batch", started, finished, model=self.name, inputs=len(entries))

    def _start(self) -> None:
        if self._collector is None or self._collector.done():
            self._loop = asyncio.get_running_loop()
            self._wakeup = asyncio.Event()
            self._lane_slots = asyncio.Semaphore(JOBS_ON_LANE)
            self._collector = self._loop.create_task(self._collect(), name=f"batcher-{self.name}")

    # -- collector ----------------------------------------------------------------------------

    async def _collect(self) -> None:
        assert self._wakeup is not None and self._lane_slots is not None
        wakeup, slots = self._wakeup, self._lane_slots
        while True:
            self._drop_cancelled()
            if not self._queue or self._covered():
                wakeup.clear()
                await wakeup.wait()
                continue
            with self._lock:
                oldest = self._queue.oldest_enqueued_at()
            if oldest is None:  # cancelled meanwhile
                continue
            deadline = oldest + self.config.max_wait_ms / 1000
            while not self._full() and (remaining := deadline - time.monotonic()) > 0:
                wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), remaining)
            await slots.acquire()
            if not self._queue:  # the job waiting on the lane took them when it started
                slots.release()
                continue
            job = asyncio.get_running_loop().create_task(self._run_job(), name=f"batch-{self.name}")
            self._jobs.add(job)
            job.add_done_callback(self._job_done)
            self._arrivals_at_last_job = self._arrivals

    def _covered(self) -> bool:
        """Whether a job already queued will take every waiting item (none came since, all fit)."""
        if not self._jobs or self._arrivals != self._arrivals_at_last_job:
            return False
        with self._lock:
            batch, _, left = self._plan()
        return not left and len(batch) < self.config.max_batch_size

    def _job_done(self, job: asyncio.Task[None]) -> None:
        self._jobs.discard(job)
        assert self._lane_slots is not None and self._wakeup is not None
        self._lane_slots.release()
        self._wakeup.set()  # what is still queued (a job that failed before taking) is looked at again

    def _drop_cancelled(self) -> None:
        with self._lock:
            now = time.monotonic()
            expired = self._pop_expired(now)
            self._queue.remove_where(lambda entry: entry.future.done())
        self._expire(expired, now)

    def _pop_expired(self, now: float) -> list[_Entry[I]]:
        """Pop the items that waited past ``max_queue_wait_s`` by ``now`` (lock held).

        Each key's inputs are oldest first, so they are at the heads of the keys' queues.
        """
        limit = self.config.max_queue_wait_s
        return self._queue.expire(now, limit) if limit else []

    def _fits(self, count: int, longest: int, token_limit: int) -> bool:
        return count <= self.config.max_batch_size and count * longest <= token_limit

    def _plan(self) -> tuple[list[_Entry[I]], bool, int]:
        """The next batch, whether it is full, and the live entries left out of it (lock held).

        The batch is the live entry first in the fair queue's order and the live entries of its
        priority class nearest to it in length (the earlier in that order first among equals)
        that keep the batch within :data:`LENGTH_RATIO` and the limits. Full: no more entries fit
        by ``max_batch_size`` or ``max_batch_tokens``, or while several keys send work, by the
        padded tokens of ``fair_batch_ms`` (:mod:`engines.batching.time_slice`); entries of other
        lengths or of the other class wait for their own batch, and do not make this one full.
        Work: a merge and a sort of the live entries, at most ``max_queue`` (or one request's
        inputs when larger).
        """
        classes = [[e for e in group if not e.future.done()] for group in self._queue.ordered_by_class()]
        classes = [group for group in classes if group]
        if not classes:
            return [], False, 0
        live = sum(len(group) for group in classes)
        head, *others = classes[0]
        turn = {id(entry): at for at, entry in enumerate(others)}
        others.sort(key=lambda entry: (abs(math.log(entry.cost / head.cost)), turn[id(entry)]))
        batch, longest, shortest, full = [head], head.cost, head.cost, False
        token_limit = self.config.max_batch_tokens
        sliced = self._slice.token_limit(time.monotonic())
        if sliced is not None:
            token_limit = min(token_limit, sliced)
        for entry in others:  # bounded by the queue
            if len(batch) >= self.config.max_batch_size:
                full = True
                break
            longest_with, shortest_with = max(longest, entry.cost), min(shortest, entry.cost)
            if shortest_with < LENGTH_RATIO * longest_with:
                continue  # another length group: its own batch
            if not self._fits(len(batch) + 1, longest_with, token_limit):
                full = True
                if entry.cost <= longest:
                    break  # nothing else fits either: shorter ones pad to the same longest
                continue
            batch.append(entry)
            longest, shortest = longest_with, shortest_with
        full = full or len(batch) >= self.config.max_batch_size
        return batch, full, live - len(batch)

    def _full(self) -> bool:
        with self._lock:
            return self._plan()[1]

    def _take(self) -> list[_Entry[I]]:
        """Pop the next batch, longest first (on the lane thread, when its job starts).

        Items that waited past ``max_queue_wait_s`` by now are popped too, and failed on the
        event loop (QUEUE_WAIT_EXCEEDED); cancelled callers' items are dropped.
        """
        with self._lock:
            now = time.monotonic()
            expired = self._pop_expired(now)
            batch, _, _ = self._plan()
            self._queue.take(batch)  # served: the fair queue's virtual time moves on
            self._queue.remove_where(lambda entry: entry.future.done())
            self._computing = batch  # its requests count as running from here (request_counts)
        if expired and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                self._loop.call_soon_threadsafe(self._expire, expired, now)
        batch.sort(key=lambda entry: entry.cost, reverse=True)
        return batch

    def _expire(self, entries: list[_Entry[I]], now: float) -> None:
        """Fail popped items with QUEUE_WAIT_EXCEEDED (on the event loop); cancelled ones are dropped."""
        limit = self.config.max_queue_wait_s
        for entry in entries:
            if not entry.future.done():
                entry.future.set_exception(queue_wait_exceeded(self.name, now - entry.enqueued_at, limit))

    def _take_and_run(self, taken: list[_Entry[I]]) -> tuple[Sequence[O | BaseException], float, float, int]:
        """The lane's job: take what is queued now and run it (``taken`` gets the batch first).

        Returns:
            the batch's outputs, its start and end (``time.monotonic()``) and its start in epoch ns.

        """
        try:
            batch = self._take()
            taken.extend(batch)
            started, started_ns = time.monotonic(), time.time_ns()
            if not batch:
                return [], started, started, started_ns
            outputs = self._run_batch([entry.item for entry in batch])
            return outputs, started, time.monotonic(), started_ns
        finally:
            self._computing = []

    async def _run_job(self) -> None:
        batch: list[_Entry[I]] = []
        try:
            outputs, started, finished, started_ns = await self._executor.run(self._take_and_run, batch)
            if not batch:
                return
            waits = [started - entry.enqueued_at for entry in batch]
            observe_encoder_batch(self.name, waits, finished - started)
            with self._lock:
                self._slice.observe(finished - started, len(batch) * max(entry.cost for entry in batch))
            finished_ns = time.time_ns()
            for entry in batch:
                entry.started_ns, entry.finished_ns = started_ns, finished_ns
            if len(outputs) != len(batch):
                raise RuntimeError(f"run_batch returned {len(outputs)} outputs for {len(batch)} items")
        except asyncio.CancelledError:
            self._fail(
                batch, UnavailableError(f"model {self.name!r} is unloading", reason=Reason.MODEL_UNLOADING)
            )
            raise
        except Exception as exc:
            if not batch:
                # The lane refused the job before it took anything (executor shut down): fail what
                # waits rather than queue a new job for it at once, and again.
                with self._lock:
                    batch = self._queue.clear()
            else:
                log.warning("batch of %d failed on model %s: %r", len(batch), self.name, exc)
            self._fail(batch, exc)
            return
        for entry, output in zip(batch, outputs, strict=True):
            if entry.future.done():
                continue
            if isinstance(output, BaseException):
                entry.future.set_exception(output)
            else:
                entry.future.set_result(output)

    @staticmethod
    def _fail(entries: Sequence[_Entry[I]], error: BaseException) -> None:
        for entry in entries:
            if not entry.future.done():
                entry.future.set_exception(error)

    # -- shutdown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new items, fail waiting ones with UNAVAILABLE and stop the collector.

        Safe to call from any thread (engines unload on their executor's worker thread).
        """
        self._closed = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._close_on_loop()
        else:
            with contextlib.suppress(RuntimeError):  # loop closed meanwhile
                loop.call_soon_threadsafe(self._close_on_loop)

    def _close_on_loop(self) -> None:
        if self._collector is not None:
            self._collector.cancel()
        for job in list(self._jobs):
            job.cancel()
        error = UnavailableError(f"model {self.name!r} is unloading", reason=Reason.MODEL_UNLOADING)
        with self._lock:
            waiting = self._queue.clear()
        self._fail(waiting, error)
