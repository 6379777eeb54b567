"""A model's load: the entry's checks, its room in the budget, the engine's load on its lane.

The managed record's state, progress and error follow the load as it goes; a failed load leaves
it ERROR with why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from engines.base import Engine, ModelSpec
from engines.device import release_device_memory
from engines.errors import (
    FailedPreconditionError,
    ModelLoadError,
    ModelNotFoundError,
    RuntimeServiceError,
    clip_text,
)
from engines.executor import DeviceExecutor, ExecutorPool
from engines.types import MemoryUsage
from service import metrics
from service.garbage_collector import full_collections_paused
from service.keep_alive import parse_keep_alive
from service.model_manager.backends.launcher import BackendLauncher
from service.model_manager.backends.remote import RemoteEngine
from service.model_manager.hub import HubModels
from service.model_manager.managed import ManagedModel, ModelState, restart_delay_s
from service.model_manager.preflight import PREFLIGHT_REASONS, EntryChecks
from service.model_manager.residency import Residency

# The package's logger: the manager's records keep one logger name whichever module writes them.
log = logging.getLogger("service.model_manager")

# Longest progress text of a load shown in its status (an engine's detail, clipped).
MAX_PROGRESS_CHARS = 120


def _measured(managed: ManagedModel, remote: RemoteEngine, usage: MemoryUsage) -> None:
    """Keep a loaded model's memory at its backend's latest measure (the budget reads it)."""
    if managed.engine is remote and managed.state is ModelState.READY:
        managed.memory = usage


def _ignore_exit(managed: ManagedModel, remote: RemoteEngine) -> None:
    """The default :attr:`Loader.on_backend_exit`: nothing to do (the manager sets its own)."""


def progress_sink(managed: ManagedModel) -> Callable[[str], None]:
    """The ``Engine.progress`` of a load: sets ``managed.progress`` on the event loop, from any thread."""
    loop = asyncio.get_running_loop()

    def report(detail: str) -> None:
        def update() -> None:
            if managed.state is ModelState.LOADING:
                managed.progress = clip_text(detail, MAX_PROGRESS_CHARS)

        loop.call_soon_threadsafe(update)

    return report


class Loader:
    """Loads models, one at a time per model (the caller holds the model's lock).

    Args:
        checks: the catalog entries' checks (engine class and device).
        hub: the client-named hub ids (downloaded before their load; forgotten when it fails).
        residency: the memory budget a load reserves its room in.
        executors: the lanes engines run on (one per loaded model).
        default_keep_alive_s: keep-alive of an entry that sets none (setting ``default_keep_alive``).
        backends: starts backend processes; None runs every model in this process. A model of a
            backend class that :attr:`~engines.base.Engine.runs_in_backend_process` loads in one.

    Attributes:
        on_backend_exit: called with the model and its engine when a model's backend process
            exits by itself (set by the manager).

    """

    def __init__(
        self,
        checks: EntryChecks,
        hub: HubModels,
        residency: Residency,
        executors: ExecutorPool,
        default_keep_alive_s: float,
        backends: BackendLauncher | None = None,
        load_timeout_s: float = 1800.0,
        unresponsive_s: float = 30.0,
    ) -> None:
        self._backends = backends
        self._unresponsive_s = unresponsive_s
        self._load_timeout_s = load_timeout_s
        self.on_backend_exit: Callable[[ManagedModel, RemoteEngine], None] = _ignore_exit
        self._checks = checks
        self._hub = hub
        self._residency = residency
        self._executors = executors
        self._default_keep_alive_s = default_keep_alive_s

    async def load_locked(self, managed: ManagedModel, spec: ModelSpec | None = None) -> None:
        """Load the model (lock held); any failure leaves it ERROR with the reason as its status.

        ``spec`` is the catalog entry with LoadModel's option overrides
        (:meth:`EntryChecks.with_overrides`); None loads the entry as it is. The next request or
        LoadModel tries again from the start, checks included, so an entry fixed on disk (a package
        installed since) loads without a restart.
        """
        spec = spec or managed.spec
        # A load's allocations would set off full collections that stop the event loop too.
        with full_collections_paused():
            await self._load_engine(managed, spec)

    async def _load_engine(self, managed: ManagedModel, spec: ModelSpec) -> None:
        """The body of :meth:`load_locked`, with automatic garbage collection paused."""
        # The device and lane of a load that may hold memory (set once engine.load may allocate).
        allocating: tuple[str, DeviceExecutor] | None = None
        backend: RemoteEngine | None = None
        try:
            if spec.name in self._hub:
                # Loading from here on, so that the download's progress shows in its status.
                managed.state, managed.progress, managed.unloaded_because = ModelState.LOADING, "", ""
                spec = await self._hub.resolve(spec, progress_sink(managed))
            # The checks import the backend (torch, for the device probe: seconds of imports that
            # hold the GIL) and read files (GGUF headers for the estimate): in a worker thread, so
            # a first load never holds the event loop that serves every other caller.
            cls, device = await asyncio.to_thread(self._checks.engine_class_and_device, spec)
            executor = self._executors.lane(device, spec.name)
            engine: Engine | RemoteEngine = cls(spec, device, executor)
            if self._backends is not None and self._checks.in_backend_process(cls, spec):
                engine = backend = self._remote(managed, engine)
                managed.backend_starts += 1
                # A backend that keeps dying is started again ever more slowly (bounded).
                await asyncio.sleep(restart_delay_s(managed.backend_exits, time.monotonic()))
            await self._residency.make_room(managed, engine)
            managed.state, managed.progress, managed.unloaded_because = ModelState.LOADING, "", ""
            managed.load_count += 1
            started = time.perf_counter()
            log.info("loading model", extra={"model": spec.name, "backend": spec.backend, "device": device})
            allocating = device, executor
            engine.progress = progress_sink(managed)
            await executor.run(engine.configure_lane)
            await executor.run(engine.load)
        except RuntimeServiceError as exc:
            if backend is not None and (backend.process is None or backend.exited):
                # Its process never served or died loading: the next start waits (restart_delay_s).
                managed.backend_exits.append(time.monotonic())
            await self._load_failed(managed, exc.message, allocating)
            if isinstance(exc, ModelNotFoundError):
                raise
            if exc.reason in PREFLIGHT_REASONS and exc.status == "INTERNAL":
                # A source problem found only while loading is still the catalog's, not a server bug.
                raise FailedPreconditionError(exc.message, reason=exc.reason, model=spec.name) from exc
            raise
        except Exception as exc:
            log.exception("model failed to load", extra={"model": spec.name})
            await self._load_failed(managed, f"{type(exc).__name__}: {exc}", allocating)
            raise ModelLoadError(f"model {spec.name!r} failed to load", model=spec.name) from exc
        finally:
            # Loaded or failed, its bytes are now measured (or freed): no longer held in reserve.
            self._residency.budget.release(spec.name)
            managed.progress = ""
        managed.engine, managed.device, managed.error = engine, device, ""
        managed.memory = engine.memory_usage()
        managed.loaded_at = time.time()
        managed.last_used = time.monotonic()
        managed.keep_alive_s = (
            parse_keep_alive(spec.keep_alive) if spec.keep_alive else self._default_keep_alive_s
        )
        managed.state = ModelState.READY
        if isinstance(engine, RemoteEngine) and engine.exited:
            # It died before the model was ready, when its exit found no engine to take out.
            self.on_backend_exit(managed, engine)
        seconds = time.perf_counter() - started
        metrics.model_loaded(spec.name, seconds)
        log.info(
            "model ready",
            extra={
                "model": spec.name,
                "seconds": round(seconds, 3),
                "ram_bytes": managed.memory.ram_bytes,
                "vram_bytes": managed.memory.vram_bytes,
                # Beside the measure: the estimate the budget reserved before the load.
                "required_ram_bytes": managed.required.ram_bytes if managed.required else 0,
                "required_vram_bytes": managed.required.vram_bytes if managed.required else 0,
            },
        )

    def _remote(self, managed: ManagedModel, local: Engine) -> RemoteEngine:
        """The proxy of ``local``'s model in a backend process (started by its ``load``)."""
        assert self._backends is not None
        return RemoteEngine(
            local,
            self._backends.start,
            self._load_timeout_s,
            on_exit=lambda remote: self.on_backend_exit(managed, remote),
            on_memory=lambda remote, usage: _measured(managed, remote, usage),
            unresponsive_s=self._unresponsive_s,
        )

    async def _load_failed(
        self, managed: ManagedModel, error: str, allocating: tuple[str, DeviceExecutor] | None
    ) -> None:
        if managed.spec.name in self._hub and not managed.active:
            self._hub.forget(managed.spec.name)  # a failed hub id holds no entry
        managed.state, managed.error = ModelState.ERROR, error
        if allocating is not None:
            # Free whatever the failed load allocated before reporting.
            device, executor = allocating
            await executor.run(release_device_memory, device)
            self._executors.retire(executor)
