"""Executors: every model (and each fitting task) runs its blocking work on a lane of its own.

The isolation rule: a *lane* is one worker thread with a FIFO queue, owned by one
loaded model on one device, or by one task's own CPU work (fitting anomaly detectors, fitting
custom classifiers). Jobs of one owner run one after another in the order they were queued;
jobs of different owners run at the same time, and the operating system shares the device's
cores among them. So one model's heavy job (an OCR page of a second, a 200,000-row fit, a
generation step for eight sequences) never holds another model's small call in a queue: it
only shares the cores with it. Every job is bounded before it starts (one batch, one page, one
decode step), so a lane's own callers wait at most one bounded job.

``bench/isolation.py`` ("noisy neighbour") measures it: a small call beside a busy neighbour shares
the cores, not a queue (bench/README.md).

A lane also keeps a llama.cpp context on the same thread for its whole life (hopping threads
costs llama.cpp much of its throughput under OpenMP; see
docs/architecture/design-notes.md#one-thread-per-llamacpp-context), and nothing blocking ever runs
on the event loop. A model's lane is retired when the model unloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from engines.errors import UnavailableError
from engines.process_lane import ProcessLane
from engines.reasons import Reason

P = ParamSpec("P")
T = TypeVar("T")


class DeviceExecutor:
    """A single worker thread with a FIFO queue (one lane) on one device.

    ``await run(fn, *args)`` queues ``fn`` and returns its result; an exception raised by
    ``fn`` is raised to the awaiting caller (the worker survives it). Cancelling the awaiting
    task before ``fn`` starts drops it from the queue. Context variables (request id) are
    copied into the worker.
    """

    def __init__(self, device: str, owner: str = "shared") -> None:
        self.device = device
        self.owner = owner
        # Thread names show the owner in py-spy and faulthandler dumps; kept short.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{device}-{owner[:40]}")
        self._closed = False

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on this device's worker and return its result.

        Raises:
            UnavailableError: the executor is shut down.
            Exception: whatever ``fn`` raises.

        """
        if self._closed:
            raise UnavailableError(
                f"executor for device {self.device} is shut down", reason=Reason.SHUTTING_DOWN
            )
        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, fn, *args, **kwargs)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, call)
        except RuntimeError as exc:  # submit after shutdown raced with us
            if self._closed:
                raise UnavailableError(
                    f"executor for device {self.device} is shut down", reason=Reason.SHUTTING_DOWN
                ) from exc
            raise

    def submit_detached(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` without waiting for it (clean-up from a cancelled task); errors are dropped."""
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile: nothing left to clean
                self._pool.submit(fn)

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop accepting work, cancel queued jobs, and (optionally) wait for the running one."""
        self._closed = True
        self._pool.shutdown(wait=wait, cancel_futures=True)


class ExecutorPool:
    """The lanes of a server, each made on first use.

    One :class:`DeviceExecutor` per (device, owner), and one :class:`ProcessLane` per owner of work
    that must not hold the server's GIL or must be killable.
    """

    def __init__(self) -> None:
        self._lanes: dict[tuple[str, str], DeviceExecutor] = {}
        self._process_lanes: dict[str, ProcessLane] = {}
        self._lock = threading.Lock()

    def process_lane(self, owner: str, preload: tuple[str, ...] = ()) -> ProcessLane:
        """The process lane of ``owner`` (``"task:anomaly-fit"``), created if needed.

        ``preload`` names the modules its jobs' functions live in (see :class:`ProcessLane`).
        """
        with self._lock:
            lane = self._process_lanes.get(owner)
            if lane is None:
                lane = self._process_lanes[owner] = ProcessLane(owner.replace(":", "-"), preload)
            return lane

    def lane(self, device: str, owner: str) -> DeviceExecutor:
        """The lane of ``owner`` on ``device``, created if needed.

        ``owner`` is a model's catalog name or a task's (``"task:anomaly"``: the colon keeps it
        apart from model names); ``device`` is ``"cpu"``, ``"cuda:0"`` or ``"mps"``.
        """
        with self._lock:
            executor = self._lanes.get((device, owner))
            if executor is None:
                executor = self._lanes[device, owner] = DeviceExecutor(device, owner)
            return executor

    def retire(self, executor: DeviceExecutor) -> None:
        """Stop ``executor`` (its owner is gone: the model unloaded) without waiting for it.

        Jobs still queued are cancelled; the next :meth:`lane` call for the same owner makes a
        new lane.
        """
        with self._lock:
            if self._lanes.get((executor.device, executor.owner)) is executor:
                del self._lanes[executor.device, executor.owner]
        executor.shutdown(wait=False)

    def shutdown(self, *, wait: bool = True) -> None:
        """Shut every lane down (process lanes' children are killed)."""
        with self._lock:
            executors = list(self._lanes.values())
            process_lanes = list(self._process_lanes.values())
            self._lanes.clear()
            self._process_lanes.clear()
        for executor in executors:
            executor.shutdown(wait=wait)
        for lane in process_lanes:
            lane.stop()
