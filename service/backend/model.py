"""The backend's one model: its load, the calls that use it, and its drain and unload.

A backend holds at most one engine for its whole life (:class:`BackendModel`): EMPTY until Load,
LOADING, READY while it serves, then CLOSING and CLOSED once Unload or SIGTERM ends it. A failed
load leaves it FAILED: the server starts a fresh backend rather than loading again into a process
that a half-done load may have left in any state.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from engines.base import Engine, ModelSpec
from engines.device import release_device_memory
from engines.errors import (
    FailedPreconditionError,
    ModelLoadError,
    RuntimeServiceError,
    UnavailableError,
    clip_text,
)
from engines.executor import DeviceExecutor, ExecutorPool
from engines.reasons import Reason
from engines.registry import engine_class
from engines.types import MemoryUsage
from service.garbage_collector import full_collections_paused
from service.model_manager.preflight import EntryChecks, refuse_engine, refuse_task
from service.settings import Settings

log = logging.getLogger("service.backend")

Capability = TypeVar("Capability")

#: Longest exception text of a failed load put in its status message (characters).
MAX_LOAD_ERROR_CHARS = 512
#: Longest wait for calls cancelled at the end of a drain to end (seconds).
CANCELLED_CALLS_WAIT_S = 5.0


class ModelState(enum.StrEnum):
    """Where the backend's model is in its life."""

    EMPTY = "empty"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    CLOSING = "closing"
    CLOSED = "closed"


class BackendModel:
    """The backend's engine and the calls in flight on it.

    Args:
        settings: The backend's settings (``device``: the preference of a spec with device ``auto``).
        executors: Where the engine's lane is made (one lane, named after the model).

    """

    def __init__(self, settings: Settings, executors: ExecutorPool) -> None:
        self._settings = settings
        self._executors = executors
        self._checks = EntryChecks(settings, engine_class, {})
        self.state = ModelState.EMPTY
        self.spec: ModelSpec | None = None
        self.engine: Engine | None = None
        self._executor: DeviceExecutor | None = None
        self._calls: set[asyncio.Task[Any]] = set()
        self._evicted: set[asyncio.Task[Any]] = set()  # calls that close() cancelled
        self._calls_done = asyncio.Event()
        self._calls_done.set()
        self._close_task: asyncio.Task[None] | None = None

    @property
    def serving(self) -> bool:
        """Whether the model is loaded and new calls are taken."""
        return self.state is ModelState.READY

    def memory_usage(self) -> MemoryUsage:
        """The engine's own count of what it holds (zeros without an engine)."""
        return self.engine.memory_usage() if self.engine is not None else MemoryUsage()

    # -- load -------------------------------------------------------------------------------

    async def load(self, spec: ModelSpec) -> Engine:
        """Load ``spec`` as the server's loader does: its checks, then the engine's load on its own lane.

        The engine class comes from the registry by ``spec.backend`` after the entry's cheap checks
        (:meth:`service.model_manager.preflight.EntryChecks.engine_class_and_device`, in a worker
        thread); the device is ``spec.device`` (``auto`` or empty: the ``device`` setting).

        Returns:
            The loaded engine.

        Raises:
            FailedPreconditionError: a model is loaded or loading already, or the backend is
                closing or failed a load before (reason FAILED_PRECONDITION); a bad entry
                (UNKNOWN_BACKEND, MODEL_SOURCE_MISSING, ... as the server's checks) or an
                unavailable device (DEVICE_UNAVAILABLE).
            RuntimeServiceError: what the engine raised (e.g. INSUFFICIENT_MEMORY).
            ModelLoadError: INTERNAL, reason MODEL_LOAD_FAILED, for any other exception; its
                message has the exception's type and text (clipped to :data:`MAX_LOAD_ERROR_CHARS`).

        """
        if self.state is not ModelState.EMPTY:
            raise FailedPreconditionError(
                f"this backend cannot load {spec.name!r}: its model is {self.state.value}"
                + (f" ({self.spec.name!r})" if self.spec is not None else "")
                + "; a backend loads once",
                model=spec.name,
                state=self.state.value,
            )
        self.state, self.spec = ModelState.LOADING, spec
        executor: DeviceExecutor | None = None
        device = ""
        started = time.perf_counter()
        try:
            with full_collections_paused():
                cls, device = await asyncio.to_thread(self._checks.engine_class_and_device, spec)
                executor = self._executors.lane(device, spec.name)
                engine = cls(spec, device, executor)
                engine.progress = _progress_log(spec.name)
                log.info(
                    "loading model", extra={"model": spec.name, "backend": spec.backend, "device": device}
                )
                await executor.run(engine.configure_lane)
                await executor.run(engine.load)
        except BaseException as exc:
            self.state = ModelState.FAILED
            if executor is not None:
                with contextlib.suppress(Exception):
                    await executor.run(release_device_memory, device)
                self._executors.retire(executor)
            if isinstance(exc, RuntimeServiceError):
                log.warning("model failed to load: %s", exc.message, extra={"model": spec.name})
                raise
            if not isinstance(exc, Exception):
                raise
            log.error("model failed to load", exc_info=exc, extra={"model": spec.name})
            raise ModelLoadError(
                f"model {spec.name!r} failed to load: "
                f"{type(exc).__name__}: {clip_text(str(exc), MAX_LOAD_ERROR_CHARS)}",
                model=spec.name,
                error_type=type(exc).__name__,
            ) from exc
        self.engine, self._executor, self.state = engine, executor, ModelState.READY
        memory = engine.memory_usage()
        log.info(
            "model ready",
            extra={
                "model": spec.name,
                "seconds": round(time.perf_counter() - started, 3),
                "ram_bytes": memory.ram_bytes,
                "vram_bytes": memory.vram_bytes,
            },
        )
        return engine

    # -- use --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def use(self, capability: type[Capability]) -> Iterator[Capability]:
        """Hold the engine for one call, typed as ``capability``; the drain waits for the block.

        Args:
            capability: What the call uses (``Embedder``, ``TextGenerator``, ``Tokenizer``, ... of
                :mod:`engines.capabilities`): the model must list its task, or for a capability
                without a task its engine must have it, as the server's ``acquire`` requires.

        Raises:
            UnavailableError: no model is loaded yet or the load failed (reason UNAVAILABLE); the
                backend is closing, or its close cancelled this call after the drain
                (MODEL_UNLOADING).
            TaskNotSupportedError: the model does not serve the capability's task, or its engine
                lacks the capability.

        """
        engine, spec = self.engine, self.spec
        if self.state in (ModelState.CLOSING, ModelState.CLOSED):
            raise UnavailableError(
                "the backend is unloading its model; retry and it loads again", reason=Reason.MODEL_UNLOADING
            )
        if self.state is not ModelState.READY or engine is None or spec is None:
            raise UnavailableError(f"the backend has no model ready (it is {self.state.value})")
        refuse_task(spec, capability)
        refuse_engine(spec, type(engine), capability)
        call = asyncio.current_task()
        if call is not None:
            self._calls.add(call)
            self._calls_done.clear()
        try:
            yield engine  # type: ignore[misc]  # checked by provides()
        except asyncio.CancelledError:
            if call is None or call not in self._evicted:
                raise  # the client went away, or its deadline passed
            call.uncancel()  # cancelled by close(): answered UNAVAILABLE, not left open
            raise UnavailableError(
                "the backend unloaded its model during the call; retry and it loads again",
                reason=Reason.MODEL_UNLOADING,
            ) from None
        finally:
            if call is not None:
                self._calls.discard(call)
                if not self._calls:
                    self._calls_done.set()

    def evicted(self, call: asyncio.Task[Any] | None) -> bool:
        """Whether :meth:`close` cancelled ``call`` (then it answers MODEL_UNLOADING, not CANCELLED)."""
        return call is not None and call in self._evicted

    # -- close ------------------------------------------------------------------------------

    async def close(self, drain_timeout_s: float) -> None:
        """Stop taking calls, let those in flight end, then unload the engine; once, whoever asks.

        Calls in flight get up to ``drain_timeout_s`` to end, the engine's own work
        (:meth:`Engine.drain`) the rest of it; calls still running then are cancelled (up to
        :data:`CANCELLED_CALLS_WAIT_S` more to end; each answers UNAVAILABLE, reason
        MODEL_UNLOADING), and the engine unloads on its lane. A failed
        unload is logged: the process exits next, which frees everything anyway. A second call
        waits for the first one's close.

        Args:
            drain_timeout_s: Longest wait for running calls, seconds (0: none; they are cancelled).

        """
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close(max(0.0, drain_timeout_s)))
        await asyncio.shield(self._close_task)

    async def _close(self, drain_timeout_s: float) -> None:
        previous, self.state = self.state, ModelState.CLOSING
        engine, name = self.engine, self.spec.name if self.spec else ""
        log.info("closing backend", extra={"model": name, "calls": len(self._calls), "state": previous.value})
        deadline = time.monotonic() + drain_timeout_s
        if self._calls:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._calls_done.wait(), drain_timeout_s)
        if engine is not None:
            try:
                await asyncio.wait_for(engine.drain(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("engine still busy at the end of the drain", extra={"model": name})
        if self._calls:
            log.warning("cancelling calls still running", extra={"model": name, "calls": len(self._calls)})
            for call in list(self._calls):
                self._evicted.add(call)
                call.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._calls_done.wait(), CANCELLED_CALLS_WAIT_S)
        if engine is not None and self._executor is not None:
            try:
                await self._executor.run(engine.unload)
            except Exception:
                log.exception("engine unload raised; exiting anyway", extra={"model": name})
            self._executors.retire(self._executor)
        self.engine, self._executor, self.state = None, None, ModelState.CLOSED
        log.info("backend closed", extra={"model": name})


def _progress_log(model: str):
    """An ``Engine.progress`` sink that logs each new detail of a load once (any thread)."""
    last = [""]

    def report(detail: str) -> None:
        detail = clip_text(detail, 120)
        if detail != last[0]:
            last[0] = detail
            log.info("load progress: %s", detail, extra={"model": model})

    return report
