"""Runs batches: takes a batch's lease, validates it, runs its lines a few at a time, finalizes it.

One :class:`BatchRunner` per server. It scans the store's ``active/`` markers (at start, every
``scan_interval_s``, and at once when a batch is created or cancelled here) and runs up to
``max_running`` batches at once, each under a lease it renews every third of ``lease_s`` (so a
replica that died, even by ``kill -9``, frees its batches ``lease_s`` after its last renewal, and
this replica or another takes them over, resuming from the results saved).

A batch's life (statuses as OpenAI's BatchJob API):

1. ``validating``: every line's url must be the batch's endpoint, else ``failed`` with an error per
   line; else ``in_progress``.
2. ``in_progress``: lines without a result run through the injected executor, at most
   ``line_concurrency`` at once (so a batch never fills the model queues: live calls keep their
   places), each result saved as it completes (keyed by line index, in group commits: one write
   for the lines that completed during the previous one), so a resumed run never runs a line
   whose result was saved; only lines running, or answered and not yet saved, when a server
   died run again. Counts are saved about once a second.
3. A cancel (``cancelling``) or the end of the completion window stops starting lines; lines in
   flight finish. Then ``finalizing`` writes the output and error files (every input line exactly
   once across the two) and the batch ends ``completed``, ``cancelled`` or ``expired``.

Files expire (:meth:`~service.batches.store.BatchApiStore.sweep_expired`): each periodic scan also
deletes up to :data:`SWEEP_LIMIT` files due, of any key, on the runner's lane. A batch whose input
file expires while it runs keeps running: the runner read its lines when it took the batch and
writes its outputs from them (as when the file is deleted); only a batch that must read the file
again (not started yet, or resumed after a restart) fails ``input_file_deleted``.

The executor (:class:`Execute`: ``execute(url, body, key_name, request_id=...) -> (http_status,
json_body)``) is the gateway's routes run in this process under the batch's key at batch priority
(``gateway.batch_lines``); the composition root (:mod:`service.cli`) passes it to
:meth:`BatchRunner.start`. The request id is the one the line's output records; while a line runs,
:data:`service.request_context.request_id_var` holds it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from engines.errors import RuntimeServiceError, clip_text
from engines.executor import DeviceExecutor
from service import metrics
from service.batches.ids import new_id
from service.batches.lines import InputLine, LineResult
from service.batches.records import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    EXPIRED,
    FAILED,
    FINALIZING,
    IN_PROGRESS,
    VALIDATING,
    BatchJob,
    BatchJobError,
    errors_of,
)
from service.batches.store import BatchApiStore
from service.request_context import new_request_id, request_id_var

log = logging.getLogger(__name__)


class Execute(Protocol):
    """Runs one line: its endpoint's answer as ``(HTTP status, JSON body)``.

    ``gateway.batch_lines.BatchLineExecutor.execute`` is the real one.
    """

    def __call__(
        self, url: str, body: dict[str, Any], key_name: str, *, request_id: str
    ) -> Awaitable[tuple[int, Any]]:
        """Run ``body`` through ``url`` under the key named ``key_name``, logged as ``request_id``."""
        ...


#: Seconds between two saves of a running batch's counts (and reads of its status by other replicas' cancels).
COUNTS_INTERVAL_S = 1.0
#: Most expired files one sweep deletes (each a few store calls on the runner's lane, so a backlog
#: of many does not hold the lane up: the next scans go on with the rest).
SWEEP_LIMIT = 100

_MISSING = {
    CANCELLING: ("batch_cancelled", "the batch was cancelled before this line ran"),
    EXPIRED: ("batch_expired", "the batch's completion window ended before this line ran"),
}


def holder_id() -> str:
    """A runner's name in leases: host, process and a random part (unique per start)."""
    return f"{socket.gethostname()[:64]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class _LeaseLost(Exception):
    """Another runner took the batch's lease (this one stalled past ``lease_s``)."""


class BatchRunner:
    """Runs the batches of a :class:`~service.batches.store.BatchApiStore` (see the module).

    Args:
        store: the batches.
        lane: the worker every store call runs on (never the event loop).
        line_concurrency: most lines of one batch in flight.
        max_running: most batches this runner runs at once.
        lease_s: seconds a lease lasts without renewal.
        scan_interval_s: seconds between two scans for batches to run.
        clock: seconds since the epoch (the store's; tests move time forward).
        holder: this runner's name in leases.

    """

    def __init__(
        self,
        store: BatchApiStore,
        lane: DeviceExecutor,
        *,
        line_concurrency: int,
        max_running: int,
        lease_s: float,
        scan_interval_s: float,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
    ) -> None:
        self.store = store
        self.lane = lane
        self.line_concurrency = line_concurrency
        self.max_running = max_running
        self.lease_s = lease_s
        self.scan_interval_s = scan_interval_s
        self.clock = clock
        self.holder = holder or holder_id()
        self._execute: Execute | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()
        #: Batches whose run failed here, and when a scan may try them again (a pause, not a hot loop).
        self._retry_at: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._scanner: asyncio.Task[None] | None = None
        #: ``time.monotonic()`` of the last sweep of expired files (-inf: none yet).
        self._swept_at = float("-inf")

    @property
    def started(self) -> bool:
        """Whether :meth:`start` gave it an executor (before that, batches wait in the store)."""
        return self._execute is not None

    def attach(self, execute: Execute) -> None:
        """Run lines with ``execute`` (without scanning: :meth:`scan` runs what it finds)."""
        self._execute = execute

    def start(self, execute: Execute) -> None:
        """Run batches with ``execute`` from now on: scan at once, then every ``scan_interval_s``."""
        self.attach(execute)
        self._scanner = asyncio.get_running_loop().create_task(self._scan_forever(), name="batch-scanner")

    def wake(self, cancelled: str = "") -> None:
        """Scan now (a batch was created), and stop starting lines of ``cancelled`` if it runs here."""
        if cancelled:
            self._cancelled.add(cancelled)
        self._wake.set()

    async def stop(self) -> None:
        """Stop scanning and running, releasing the leases (lines in flight are abandoned: they run again)."""
        tasks = [task for task in (self._scanner, *self._running.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._scanner = None

    async def wait_idle(self) -> None:
        """Wait until the batches running now have stopped (tests)."""
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def sweep(self) -> int:
        """Delete up to :data:`SWEEP_LIMIT` expired files of any key, on the lane; how many.

        Raises:
            RuntimeServiceError: the store failed (the next sweep goes on).

        """
        swept = await self.lane.run(self.store.sweep_expired, self.clock(), SWEEP_LIMIT)
        if swept:
            log.info("expired batch files deleted", extra={"count": swept})
        return swept

    async def _scan_forever(self) -> None:
        while True:
            self._wake.clear()  # before the scan: a wake during it scans again at once
            try:
                await self.scan()
            except Exception:  # the store down: the next scan retries
                log.warning("batch scan failed", exc_info=True)
            # Sweep on the periodic scans only (at most once a scan_interval_s), not at each wake:
            # a burst of batch creations does not list the expiry markers each time.
            if time.monotonic() - self._swept_at >= self.scan_interval_s:
                self._swept_at = time.monotonic()
                try:
                    await self.sweep()
                except Exception:  # the store down: the next sweep goes on
                    log.warning("expired file sweep failed", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.scan_interval_s)

    async def scan(self) -> None:
        """Start the active batches this runner can take the lease of, up to ``max_running``."""
        if self._execute is None:
            return  # nothing to run lines with yet
        for batch_id, owner in await self.lane.run(self.store.active_batches):  # bounded: batches not ended
            if len(self._running) >= self.max_running:
                return
            if batch_id in self._running or self.clock() < self._retry_at.get(batch_id, 0.0):
                continue
            self._retry_at.pop(batch_id, None)
            if not await self.lane.run(self.store.take_lease, batch_id, self.holder, self.lease_s):
                continue  # another runner holds it
            task = asyncio.get_running_loop().create_task(
                self._run(batch_id, owner), name=f"batch {batch_id}"
            )
            self._running[batch_id] = task

    async def _renew(self, batch_id: str, lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                held = await self.lane.run(self.store.take_lease, batch_id, self.holder, self.lease_s)
            except RuntimeServiceError:  # the store down: try again, the lease lasts a while yet
                log.warning("batch lease renewal failed", extra={"batch_id": batch_id}, exc_info=True)
                continue
            if not held:
                lost.set()
                return

    async def _run(self, batch_id: str, owner: str) -> None:
        lost = asyncio.Event()
        renewal = asyncio.get_running_loop().create_task(self._renew(batch_id, lost))
        metrics.batches_running(1)
        try:
            await self._advance(batch_id, owner, lost)
        except _LeaseLost:
            log.warning("batch lease lost to another runner", extra={"batch_id": batch_id})
        except Exception:  # the store down, a bug: resumed by a scan lease_s from now (here or elsewhere)
            log.exception("batch run failed; it resumes later", extra={"batch_id": batch_id})
            self._retry_at[batch_id] = self.clock() + self.lease_s
        finally:
            metrics.batches_running(-1)
            renewal.cancel()
            self._cancelled.discard(batch_id)
            try:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.lane.run(self.store.release_lease, batch_id, self.holder))
            finally:
                self._running.pop(batch_id, None)
                self._wake.set()  # a batch waiting for a free place starts now, not at the next scan

    async def _update(self, batch: BatchJob, change: Callable[[BatchJob], BatchJob | None]) -> BatchJob:
        return await self.lane.run(self.store.update_batch, batch.owner, batch.id, change)

    async def _advance(self, batch_id: str, owner: str, lost: asyncio.Event) -> None:
        batch = await self.lane.run(self.store.read_record, owner, batch_id)
        if batch is None or batch.status not in (VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING):
            await self.lane.run(self.store.retire, batch_id)  # ended, or forgotten: only its marker was left
            return
        try:
            lines = await self.lane.run(self.store.input_lines, owner, batch.input_file_id)
        except RuntimeServiceError as exc:
            if exc.status != "NOT_FOUND":
                raise
            code = "input_file_deleted"
            lines = None
        if batch.status == VALIDATING:
            errors = (
                (
                    BatchJobError(
                        code, f"the input file {batch.input_file_id!r} was deleted before the batch ran"
                    ),
                )
                if lines is None
                else errors_of(lines, batch.endpoint)
            )
            batch = await self._update(batch, lambda b: _validated(b, errors, int(self.clock())))
            if batch.status == FAILED:
                await self._end(batch)
                return
        if lines is None:  # deleted while running: nothing more can run, or be written
            batch = await self._update(batch, lambda b: _failed(b, int(self.clock())))
            await self._end(batch)
            return
        if batch.status == IN_PROGRESS:
            batch = await self._run_lines(batch, lines, lost)
        await self._finalize(batch, lines)

    async def _run_lines(self, batch: BatchJob, lines: list[InputLine], lost: asyncio.Event) -> BatchJob:
        assert self._execute is not None
        done = await self.lane.run(self.store.results, batch.id)
        counts = [sum(r.ok for r in done.values()), sum(not r.ok for r in done.values())]
        slots = asyncio.Semaphore(self.line_concurrency)
        writer = _ResultWriter(self.store, self.lane, batch.id)
        in_flight: set[asyncio.Task[None]] = set()
        saved_at = time.monotonic()
        try:
            for line in lines:  # bounded: the input's lines (at most UR_BATCH_FILE_MAX_LINES)
                if line.index in done:
                    continue
                await slots.acquire()
                if time.monotonic() - saved_at >= COUNTS_INTERVAL_S:
                    batch = await self._save_counts(batch, counts)
                    saved_at = time.monotonic()
                if lost.is_set():
                    raise _LeaseLost
                if self._stopping(batch):
                    slots.release()
                    break
                task = asyncio.get_running_loop().create_task(
                    self._run_line(batch, line, counts, writer, slots)
                )
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            await asyncio.gather(*in_flight)
        finally:
            for task in in_flight:  # cancelled (shutdown): abandon them
                task.cancel()
        if lost.is_set():
            raise _LeaseLost
        return await self._save_counts(batch, counts)

    def _stopping(self, batch: BatchJob) -> bool:
        return batch.status != IN_PROGRESS or batch.id in self._cancelled or self.clock() >= batch.expires_at

    async def _save_counts(self, batch: BatchJob, counts: list[int]) -> BatchJob:
        completed, failed = counts

        def save(b: BatchJob) -> BatchJob | None:
            return replace(b, completed=completed, failed=failed)

        return await self._update(batch, save)

    async def _run_line(
        self,
        batch: BatchJob,
        line: InputLine,
        counts: list[int],
        writer: _ResultWriter,
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            result = await self._call(batch, line)
        finally:
            # The model's part is done: the next line may start while this one's result is saved
            # (a save takes a few ms of disk, which the slot need not wait for).
            slots.release()
        await writer.save(line.index, result)
        counts[0 if result.ok else 1] += 1
        metrics.batch_line("completed" if result.ok else "failed")

    async def _call(self, batch: BatchJob, line: InputLine) -> LineResult:
        """Run one line through the executor: its answer, or why it got none."""
        assert self._execute is not None
        request_id = new_request_id()
        request_id_var.set(request_id)  # this task's own context: the executor's calls log it
        try:
            status, body = await self._execute(line.url, line.body, batch.owner, request_id=request_id)
            return LineResult(int(status), body, request_id)
        except asyncio.CancelledError:
            raise
        except RuntimeServiceError as exc:
            return LineResult(0, None, request_id, exc.reason.lower(), clip_text(exc.message, 1024))
        except Exception:
            log.exception("batch line failed", extra={"batch_id": batch.id, "line": line.line})
            return LineResult(
                0, None, request_id, "internal_error", "the line failed to run; see the server's log"
            )

    async def _finalize(self, batch: BatchJob, lines: list[InputLine]) -> None:
        batch = await self._update(batch, lambda b: _finalizing(b, int(self.clock())))
        cancelled = batch.status == CANCELLING
        missing = _MISSING[CANCELLING] if cancelled else _MISSING[EXPIRED]
        outputs = await self.lane.run(self.store.write_outputs, batch, lines, missing)
        unfinished = len(lines) - outputs.completed - outputs.failed  # only a cancel or expiry leaves some
        end = CANCELLED if cancelled else EXPIRED if unfinished else COMPLETED
        stamp = {CANCELLED: "cancelled_at", EXPIRED: "expired_at", COMPLETED: "completed_at"}[end]

        def ended(b: BatchJob) -> BatchJob:
            return replace(
                b,
                status=end,
                output_file_id=outputs.output_file_id,
                error_file_id=outputs.error_file_id,
                completed=outputs.completed,
                failed=outputs.failed,
                **{stamp: int(self.clock())},
            )

        batch = await self._update(batch, ended)
        await self._end(batch)

    async def _end(self, batch: BatchJob) -> None:
        metrics.batch_status(batch.status)
        log.info(
            "batch ended",
            extra={
                "batch_id": batch.id,
                "status": batch.status,
                "completed": batch.completed,
                "failed": batch.failed,
                "total": batch.total,
            },
        )
        await self.lane.run(self.store.retire, batch.id)


class _ResultWriter:
    """Saves a batch's line results by group commit.

    Lines that complete while a write runs go together in the next one
    (:meth:`BatchApiStore.put_results`), one durable write for them all.
    A durable write is two flushes on the runner's one lane, so one write per line would cap a
    batch of fast lines (single embeddings) at the disk's flush rate, shared with everything else
    on that lane (see docs/architecture/design-notes.md#batch-results-by-group-commit); grouped, a
    write serves up to ``line_concurrency`` lines.
    """

    def __init__(self, store: BatchApiStore, lane: DeviceExecutor, batch_id: str) -> None:
        self.store, self.lane, self.batch_id = store, lane, batch_id
        self._pending: dict[int, LineResult] = {}
        self._waiting: list[asyncio.Future[None]] = []
        self._writing: asyncio.Task[None] | None = None

    async def save(self, index: int, result: LineResult) -> None:
        """Return once line ``index``'s result is saved (raises what the store raised)."""
        done = asyncio.get_running_loop().create_future()
        self._pending[index] = result
        self._waiting.append(done)
        if self._writing is None:
            self._writing = asyncio.get_running_loop().create_task(self._write())
        await done

    async def _write(self) -> None:
        try:
            while self._pending:  # bounded: each turn takes what arrived, at most the lines in flight
                group, self._pending = self._pending, {}
                waiting, self._waiting = self._waiting, []
                try:
                    await self.lane.run(self.store.put_results, self.batch_id, group)
                except Exception as exc:
                    for future in waiting:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for future in waiting:
                    if not future.done():
                        future.set_result(None)
        finally:
            self._writing = None


def _validated(batch: BatchJob, errors: tuple[BatchJobError, ...], now: int) -> BatchJob | None:
    if batch.status != VALIDATING:
        return None  # cancelled meanwhile: it finalizes as cancelled
    if errors:
        return replace(batch, status=FAILED, errors=errors, failed_at=now)
    return replace(batch, status=IN_PROGRESS, in_progress_at=now)


def _failed(batch: BatchJob, now: int) -> BatchJob:
    error = BatchJobError(
        "input_file_deleted", f"the input file {batch.input_file_id!r} was deleted before the batch ended"
    )
    return replace(batch, status=FAILED, errors=(error,), failed_at=now)


def _finalizing(batch: BatchJob, now: int) -> BatchJob:
    """Plan the output files' ids (once) and turn finalizing (a cancelled batch stays cancelling)."""
    if not batch.planned_output_file_id:
        batch = replace(
            batch, planned_output_file_id=new_id("file-", now), planned_error_file_id=new_id("file-", now)
        )
    if batch.status == IN_PROGRESS:
        batch = replace(batch, status=FINALIZING, finalizing_at=now)
    return batch
