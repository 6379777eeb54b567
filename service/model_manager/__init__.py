"""Model lifecycle: load on demand, keep alive, unload when idle, report status and memory.

:class:`ModelManager` is the facade the server, servicers and tasks use; it composes one helper
per job:

* :mod:`~service.model_manager.managed`: the managed-model record and its status string;
* :mod:`~service.model_manager.hub`: hub ids clients name, their admission and download;
* :mod:`~service.model_manager.preflight`: a catalog entry's checks and LoadModel's option overrides;
* :mod:`~service.model_manager.loading`: a model's load;
* :mod:`~service.model_manager.residency`: the memory budget, evictions and unloads;
* :mod:`~service.model_manager.leases`: requests' holds on models and the keep-alive reaper;
* :mod:`~service.model_manager.watching`: a model's status as it changes (WatchModel).

Concurrency rules:

* each model has its own ``asyncio.Lock``; the first request for a model loads it and the
  others wait on that lock (double-checked), so a model loads once and a load of model A
  never waits for a load of model B;
* a request holds a model between :meth:`ModelManager.acquire` entry and exit (``active``
  count); nothing unloads a model with active requests;
* keep-alive follows docker/model-runner's backend interface (``pkg/inference/backend.go``; see
  :mod:`service.keep_alive`); a background task unloads idle models; pinned models never unload
  on idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from engines.base import ModelSpec
from engines.capabilities import CAPABILITY_TASKS, Capability
from engines.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ModelNotFoundError,
    UnavailableError,
)
from engines.executor import DeviceExecutor, ExecutorPool
from engines.options import EngineOptions
from engines.reasons import Reason
from engines.registry import engine_class
from engines.types import MemoryUsage, Task
from service.keep_alive import format_keep_alive, parse_keep_alive
from service.model_manager.backend_exits import BackendExits
from service.model_manager.backends.launcher import BackendLauncher
from service.model_manager.hub import HUB_DEFAULT_BACKENDS, HubModels, download_progress
from service.model_manager.leases import Leases
from service.model_manager.loading import MAX_PROGRESS_CHARS, Loader
from service.model_manager.managed import ManagedModel, ModelState, format_status
from service.model_manager.preflight import (
    PREFLIGHT_REASONS,
    EngineFactory,
    EntryChecks,
    options_text,
    refuse_engine,
    refuse_task,
)
from service.model_manager.residency import (
    DRAIN_TIMEOUT_S,
    MAKE_ROOM_ATTEMPTS,
    MAKE_ROOM_RETRY_S,
    Residency,
)
from service.model_manager.watching import WATCH_MAX_S, WATCH_POLL_S, WatchTooLongError, watch_status
from service.model_names import validate_model_name
from service.settings import Settings

__all__ = [
    "DRAIN_TIMEOUT_S",
    "HUB_DEFAULT_BACKENDS",
    "MAKE_ROOM_ATTEMPTS",
    "MAKE_ROOM_RETRY_S",
    "MAX_PROGRESS_CHARS",
    "PREFLIGHT_REASONS",
    "WATCH_MAX_S",
    "WATCH_POLL_S",
    "EngineFactory",
    "ManagedModel",
    "ModelManager",
    "ModelState",
    "WatchTooLongError",
    "download_progress",
    "format_status",
]

log = logging.getLogger(__name__)


class ModelManager:
    """Owns every model's lifecycle; :mod:`service.tasks` get engines only through :meth:`acquire`.

    Args:
        catalog: model specs by name.
        settings: server settings (default keep-alive, hub policy, memory headroom).
        executors: the lanes engines run on (one per loaded model).
        engine_factory: backend name → engine class (the registry; replaceable in tests).
        invalid: malformed catalog entries by name, with why (service.catalog.Catalog.invalid):
            listed, never loadable.

    """

    def __init__(
        self,
        catalog: dict[str, ModelSpec],
        settings: Settings,
        executors: ExecutorPool,
        engine_factory: EngineFactory = engine_class,
        invalid: dict[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._default_keep_alive_s = parse_keep_alive(settings.default_keep_alive)
        self._checks = EntryChecks(settings, engine_factory, invalid or {})
        self._models: dict[str, ManagedModel] = {name: self._managed(spec) for name, spec in catalog.items()}
        for name in invalid or {}:
            self._models[name] = self._managed(ModelSpec(name=name, backend="", tasks=(), source=""))
        # Helpers share the one dict of models: hub entries join and leave it.
        self._hub = HubModels(self._models, settings)
        self._residency = Residency(self._models, settings, executors)
        #: Starts and counts backend processes; None when every model runs in this process.
        self.backends = BackendLauncher(settings) if settings.backend_processes else None
        self._loader = Loader(
            self._checks,
            self._hub,
            self._residency,
            executors,
            self._default_keep_alive_s,
            self.backends,
            settings.backend_load_timeout_s,
            settings.backend_unresponsive_s,
        )
        self._leases = Leases(self._models, settings, self._loader, self._residency)
        self._exits = BackendExits(executors, self._leases, self._loader)
        self._loader.on_backend_exit = self._exits.exited

    def _managed(self, spec: ModelSpec) -> ManagedModel:
        if (
            self._settings.max_queue_wait_s
            and "max_queue_wait_s" not in spec.options
            and self._checks.queues(spec)
        ):
            # The server-wide limit, unless the catalog entry sets its own.
            options = {**spec.options, "max_queue_wait_s": self._settings.max_queue_wait_s}
            spec = dataclasses.replace(spec, options=options)
        keep_alive = parse_keep_alive(spec.keep_alive) if spec.keep_alive else self._default_keep_alive_s
        return ManagedModel(spec=spec, keep_alive_s=keep_alive, pinned=spec.pinned)

    # -- lookup ---------------------------------------------------------------------------

    def get(self, name: str, task: Task | None = None) -> ManagedModel:
        """Return the managed model called ``name``.

        With ``allow_hub_models`` and a ``task``, an unknown ``org/name`` becomes a new entry
        backed by the task's default hub backend.

        Raises:
            InvalidArgumentError: path-like or malformed name (reason INVALID_MODEL_NAME).
            ModelNotFoundError: not in the catalog (and not an allowed hub id).

        """
        try:
            validate_model_name(name)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"invalid model name {name!r}: {exc}",
                reason=Reason.INVALID_MODEL_NAME,
                field="model",
                model=name,
            ) from None
        managed = self._models.get(name)
        if managed is not None:
            return managed
        if task is not None and self._hub.admits(name, task):
            return self._hub.admit(name, task, self._managed)
        raise ModelNotFoundError(f"model {name!r} is not in the catalog", field="model", model=name)

    def models(self) -> list[ManagedModel]:
        """All managed models, sorted by name."""
        return [self._models[name] for name in sorted(self._models)]

    # -- use ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def acquire(
        self, name: str, capability: type[Capability], keep_alive: str | None = None
    ) -> AsyncIterator[Capability]:
        """Hold the model ``name`` loaded while the block runs, typed as ``capability``.

        Args:
            name: catalog name (or allowed hub id).
            capability: what the caller will use (``Embedder``, ``TextGenerator``, ...; see
                :mod:`engines.capabilities`); the model must serve its task, or for a capability
                without a task (``Tokenizer``) its backend must have it, checked before loading.
            keep_alive: optional override of the model's keep-alive from now on.

        Raises:
            InvalidArgumentError, ModelNotFoundError: see :meth:`get`; bad keep_alive.
            TaskNotSupportedError: the model does not serve the capability's task.
            UnavailableError: the server is shutting down.
            ResourceExhaustedError: not enough free memory to load the model.
            FailedPreconditionError: the catalog entry is unusable (see :meth:`check_catalog`), or
                its device is not available (DEVICE_UNAVAILABLE).
            ModelLoadError: loading failed (the model's status then says why).

        """
        task = CAPABILITY_TASKS.get(capability)
        managed = self.get(name, task)
        self._checks.refuse_malformed(managed.spec)
        refuse_task(managed.spec, capability)
        if task is None:
            # Refused before a load: an OCR model is not loaded only to learn it has no tokenizer.
            refuse_engine(managed.spec, self._checks.preflight(managed.spec), capability)
        override = parse_keep_alive(keep_alive) if keep_alive else None
        engine = await self._leases.begin(managed)
        try:
            # A catalog entry listing a task its backend cannot do: the operator's mistake.
            refuse_engine(managed.spec, engine.engine_class, capability)
            yield engine
        finally:
            self._leases.end(managed, override)

    # -- load / unload ----------------------------------------------------------------------

    async def load(
        self,
        name: str,
        keep_alive: str | None = None,
        pinned: bool | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> ManagedModel:
        """Load ``name`` now (no-op when ready) and optionally change its keep-alive and pinning.

        Args:
            name: catalog name.
            keep_alive: keep-alive from now on (a duration, "0" or "-1"); None keeps the model's.
            pinned: pin or unpin; None keeps the model's.
            options: backend options for this load over the catalog entry's (LoadModel's
                overrides), checked against the backend's options model before any load work. They
                last until the model unloads. None: no requirement (a loaded model stays as it
                is); ``{}``: exactly the catalog's options.

        Raises:
            InvalidArgumentError: an invalid override (reason INVALID_MODEL_OPTION, naming it).
            FailedPreconditionError: the model is loaded with other options than ``options`` ask
                for (reason MODEL_LOADED_WITH_OTHER_OPTIONS: unload it first).
            Otherwise the same as :meth:`acquire`, except TaskNotSupportedError.

        """
        managed = self.get(name)
        override = parse_keep_alive(keep_alive) if keep_alive else None
        self._leases.refuse_if_closing()
        wanted: tuple[ModelSpec, EngineOptions] | None = None
        if options is not None:
            # Checked before the lock: a bad override never waits behind another load.
            wanted = await asyncio.to_thread(self._checks.with_overrides, managed.spec, options)
        async with managed.lock:
            if managed.state is not ModelState.READY:
                await self._loader.load_locked(managed, wanted[0] if wanted is not None else None)
            elif wanted is not None and managed.engine is not None and managed.engine.options != wanted[1]:
                loaded = options_text(managed.effective_options())
                raise FailedPreconditionError(
                    f"model {name!r} is loaded with other options ({loaded}) than this load asks for; "
                    "unload it first",
                    reason=Reason.MODEL_LOADED_WITH_OTHER_OPTIONS,
                    model=name,
                )
        if override is not None:
            managed.keep_alive_s = override
        if pinned is not None:
            managed.pinned = pinned
        managed.last_used = time.monotonic()
        return managed

    def check_catalog(self) -> list[ManagedModel]:
        """Check every entry as it would be before a load (no weights read); mark the bad ones ERROR.

        Each bad entry gets one error log line; its status becomes ``Error: <details>`` and its
        requests FAILED_PRECONDITION until a load succeeds. Good entries are left untouched.

        Returns:
            The models marked ERROR, sorted by name.

        """
        bad = []
        for managed in self.models():
            try:
                self._checks.preflight(managed.spec)
            except FailedPreconditionError as exc:
                managed.state, managed.error = ModelState.ERROR, exc.message
                log.error(
                    "catalog entry %r is unusable: %s",
                    managed.spec.name,
                    exc.message,
                    extra={"model": managed.spec.name, "backend": managed.spec.backend, "reason": exc.reason},
                )
                bad.append(managed)
        return bad

    async def required_memory(self, name: str) -> MemoryUsage:
        """The estimate of what ``name`` holds once loaded (:meth:`Engine.required_memory`), cached.

        Computed once per model in a worker thread (file headers only: no weights read, no device
        touched) and kept in ``ManagedModel.required``; a load recomputes it with its own options.

        Raises:
            InvalidArgumentError, ModelNotFoundError: see :meth:`get`.
            FailedPreconditionError and the other errors of the entry's checks: an unusable entry.

        """
        managed = self.get(name)
        if managed.required is None:
            self._checks.refuse_malformed(managed.spec)
            cls, device = await asyncio.to_thread(self._checks.engine_class_and_device, managed.spec)
            # An engine is cheap to make (no load) and its lane starts no thread until used.
            engine = cls(managed.spec, device, DeviceExecutor(device, f"estimate:{name}"))
            managed.required = await asyncio.to_thread(engine.required_memory)
        return managed.required

    async def unload(self, name: str, *, force: bool = False) -> ManagedModel:
        """Unload ``name`` once its in-flight requests finish (no-op when not loaded).

        Raises:
            FailedPreconditionError: the model is pinned and ``force`` is false (reason MODEL_PINNED).
            InvalidArgumentError, ModelNotFoundError: see :meth:`get`.

        """
        managed = self.get(name)
        if managed.pinned and not force:
            raise FailedPreconditionError(
                f"model {name!r} is pinned; pass force to unload it", reason=Reason.MODEL_PINNED, model=name
            )
        async with managed.lock:
            await managed.idle.wait()
            await self._residency.unload_locked(managed, "explicit")
        return managed

    # -- watching -----------------------------------------------------------------------------

    async def watch(
        self, name: str, loading: asyncio.Future[Any] | None = None
    ) -> AsyncIterator[ManagedModel]:
        """Yield the model ``name`` now and each time its status string changes, until it settles.

        See :func:`service.model_manager.watching.watch_status` (settled, polling, its bound).

        Raises:
            InvalidArgumentError, ModelNotFoundError: see :meth:`get`.

        """
        managed = self.get(name)
        async with contextlib.aclosing(watch_status(managed, loading)) as statuses:
            async for watched in statuses:
                yield watched

    # -- preloading ----------------------------------------------------------------------------

    def preload_names(self) -> list[str]:
        """Models to load at start: catalog entries with ``preload: true`` in catalog order, then ``preload``.

        Raises:
            ValueError: the ``preload`` setting (``UR_PRELOAD``) names a model that is not in the catalog.

        """
        names = [name for name, managed in self._models.items() if managed.spec.preload]
        for name in self._settings.preload:
            if name not in self._models:
                raise ValueError(f"UR_PRELOAD names model {name!r}, which is not in the catalog")
            if name not in names:
                names.append(name)
        return names

    async def preload(self, names: list[str]) -> None:
        """Load ``names`` one after another, within the budget; a failure is logged and the rest go on.

        A model that fails to load is left ``Error: <why>`` (its status), as any failed load is. A
        load refused because the server is closing ends the preloading.
        """
        for name in names:
            try:
                await self.load(name)
            except UnavailableError:
                return
            except Exception as exc:
                log.error(
                    "preload failed",
                    extra={"model": name, "error": getattr(exc, "message", None) or repr(exc)},
                )

    # -- background ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the idle reaper (call from the running event loop)."""
        self._leases.start()

    def spawn(self, coro: object) -> None:
        """Run ``coro`` in the background; :meth:`close` waits for it (once loads are refused)."""
        self._leases.spawn(coro)

    async def close(self) -> None:
        """Refuse new work, stop the reaper and unload every model."""
        await self._leases.close()
        for managed in self._models.values():
            async with managed.lock:
                await self._residency.unload_locked(managed, "shutdown")
        if self.backends is not None:
            self.backends.close()

    def describe_keep_alive(self, managed: ManagedModel) -> str:
        """The model's keep-alive as a Go duration string ("5m0s"), "0s" or "-1"."""
        return format_keep_alive(managed.keep_alive_s)
