"""Per-device executors: all blocking compute for one device goes through one worker thread.

One FIFO queue per device means a generation step and an embedding batch interleave fairly,
a llama.cpp context always runs on the same thread (hopping threads costs llama.cpp about a
third of its throughput under OpenMP), and nothing blocking ever runs on the event loop.
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

P = ParamSpec("P")
T = TypeVar("T")


class DeviceExecutor:
    """A single worker thread with a FIFO queue for one device.

    ``await run(fn, *args)`` queues ``fn`` and returns its result; an exception raised by
    ``fn`` is raised to the awaiting caller (the worker survives it). Cancelling the awaiting
    task before ``fn`` starts drops it from the queue. Context variables (request id) are
    copied into the worker.
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"device-{device}")
        self._closed = False

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on this device's worker and return its result.

        Raises:
            UnavailableError: the executor is shut down.
            Exception: whatever ``fn`` raises.

        """
        if self._closed:
            raise UnavailableError(f"executor for device {self.device} is shut down", reason="SHUTTING_DOWN")
        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, fn, *args, **kwargs)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, call)
        except RuntimeError as exc:  # submit after shutdown raced with us
            if self._closed:
                raise UnavailableError(
                    f"executor for device {self.device} is shut down", reason="SHUTTING_DOWN"
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
    """Creates one :class:`DeviceExecutor` per device on first use."""

    def __init__(self) -> None:
        self._executors: dict[str, DeviceExecutor] = {}
        self._lock = threading.Lock()

    def get(self, device: str) -> DeviceExecutor:
        """Return the executor of ``device`` (e.g. ``"cpu"``, ``"cuda:0"``), creating it if needed."""
        with self._lock:
            executor = self._executors.get(device)
            if executor is None:
                executor = self._executors[device] = DeviceExecutor(device)
            return executor

    def shutdown(self, *, wait: bool = True) -> None:
        """Shut every executor down."""
        with self._lock:
            executors = list(self._executors.values())
        for executor in executors:
            executor.shutdown(wait=wait)
