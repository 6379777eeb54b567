"""Model lifecycle: load on demand, keep alive, unload when idle, report status and memory.

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
import enum
import functools
import logging
import math
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engines.base import Engine, ModelSpec
from engines.capabilities import CAPABILITY_TASKS, TASKLESS_CAPABILITIES, Capability
from engines.device import available_memory_bytes, cpu_threads, release_device_memory
from engines.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ModelLoadError,
    ModelNotFoundError,
    ResourceExhaustedError,
    RuntimeServiceError,
    TaskNotSupportedError,
    UnavailableError,
    clip_text,
)
from engines.executor import DeviceExecutor, ExecutorPool
from engines.options import EngineOptions, check_override_bounds, parse_options, refuse_operator_options
from engines.registry import engine_class
from engines.stats import EngineStats
from engines.types import MemoryUsage, Task
from service import metrics
from service.garbage_collector import full_collections_paused, reclaim_if_cyclic
from service.keep_alive import format_keep_alive, parse_keep_alive
from service.memory_budget import RAM_POOL, LoadedModel, MemoryBudget, pool_bytes
from service.model_names import validate_model_name
from service.settings import Settings

log = logging.getLogger(__name__)

# Plans of a load's room at most, this far apart (seconds): a model picked to evict that gets a
# request or is being unloaded first is skipped, and the room planned again
# (at most ``MAKE_ROOM_ATTEMPTS x MAKE_ROOM_RETRY_S``).
MAKE_ROOM_ATTEMPTS = 10
MAKE_ROOM_RETRY_S = 0.1
# Longest progress text of a load shown in its status (an engine's detail, clipped).
MAX_PROGRESS_CHARS = 120

# A watch reads the model's status this often (seconds), for at most this long.
WATCH_POLL_S = 0.1
WATCH_MAX_S = 3600.0

# Longest wait for an engine's own work (a batch loop releasing cancelled sequences) before unload;
# one step of a batch is far shorter, so only a wedged device job reaches it.
DRAIN_TIMEOUT_S = 10.0

# Backend used for a hub id that is not in the catalog, by task.
HUB_DEFAULT_BACKENDS: dict[Task, str] = {
    Task.GENERATE: "transformers",
    Task.EMBED: "sentence_transformers",
}

# Reasons of failed catalog checks passed on to clients as they are (see ModelManager._preflight).
PREFLIGHT_REASONS = frozenset(
    {
        "INVALID_CATALOG_ENTRY",
        "UNKNOWN_BACKEND",
        "MODEL_SOURCE_MISSING",
        "MODEL_SOURCE_INVALID",
        "INVALID_MODEL_OPTION",
    }
)


# Weights of other frameworks and runtimes that the default hub backends never read.
_HUB_IGNORE_PATTERNS = ("*.h5", "*.msgpack", "*.ot", "*.onnx", "onnx/*", "openvino/*", "*.tflite", "*.gguf")


def _release_engine(engine: weakref.ref, name: str, device: str) -> None:
    """After an unload (blocking, on the engine's lane), give the engine's memory back.

    First end the engine if a cycle still holds it (:func:`reclaim_if_cyclic`; before the cache
    is emptied, since the cycle may hold its tensors), then return the device's cached blocks.
    """
    reclaim_if_cyclic(engine, name)
    release_device_memory(device)


def _hub_snapshot(repo_id: str, report: Callable[[str], None] = lambda detail: None) -> str:
    """Absolute folder of ``repo_id``'s snapshot in the hub cache, downloaded unless offline (blocking).

    ``report`` hears ``"downloading 42%"`` (files of the snapshot fetched, as huggingface_hub
    counts them) while it downloads.

    Raises:
        huggingface_hub errors: unknown or gated repository, not cached while offline, hub unreachable.

    """
    from huggingface_hub import snapshot_download

    return snapshot_download(
        repo_id, ignore_patterns=list(_HUB_IGNORE_PATTERNS), tqdm_class=download_progress(report)
    )


def download_progress(report: Callable[[str], None]) -> type:
    """A ``tqdm`` class for huggingface_hub's ``tqdm_class`` that tells ``report`` each new percentage.

    Its bar is drawn nowhere (a server's log is no terminal); it only counts.
    """
    import io

    from tqdm import tqdm

    class ReportingProgress(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # Counted even where huggingface_hub turns its bars off (disabled tqdm counts nothing).
            super().__init__(*args, **{**kwargs, "disable": False, "file": io.StringIO()})
            self._percent = -1

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.total:
                percent = min(100, int(100 * self.n / self.total))
                if percent != self._percent:
                    self._percent = percent
                    report(f"downloading {percent}%")
            return shown

    return ReportingProgress


@functools.cache
def _provides(engine_type: type, capability: type) -> bool:
    """Whether ``engine_type`` has the methods of ``capability``, computed once per class.

    The protocols name methods only, which a class cannot lose, so a request's check is a lookup.
    """
    return issubclass(engine_type, capability)


class ModelState(enum.Enum):
    """Lifecycle state of a catalog model."""

    NOT_LOADED = "Not Loaded"
    LOADING = "Loading"
    READY = "Running"
    UNLOADING = "Unloading"
    ERROR = "Error"


def _options_text(options: Mapping[str, Any]) -> str:
    """Options as ``n_ctx=4096, runtime=torch`` for messages (``none`` when empty)."""
    return ", ".join(f"{key}={value}" for key, value in sorted(options.items())) or "none"


#: The fields of ManagedModel that its status string reads.
_STATUS_FIELDS = frozenset({"state", "device", "error", "progress", "unloaded_because"})


def format_status(state: ModelState, details: str = "") -> str:
    """``"<State>: <details>"``, or the state alone without details (model-runner's ``FormatStatus``)."""
    return f"{state.value}: {details}" if details else state.value


@dataclass
class ManagedModel:
    """A catalog model and its runtime state (mutated only on the event loop)."""

    spec: ModelSpec
    keep_alive_s: float
    pinned: bool
    state: ModelState = ModelState.NOT_LOADED
    engine: Engine | None = None
    device: str = ""
    error: str = ""
    active: int = 0
    load_count: int = 0
    loaded_at: float = 0.0  # wall clock, seconds
    last_used: float = 0.0  # monotonic, seconds
    memory: MemoryUsage = field(default_factory=MemoryUsage)
    #: The estimate before a load (Engine.required_memory), once computed; None before.
    required: MemoryUsage | None = None
    #: What a load under way is doing ("downloading 42%", "converting"); "" otherwise.
    progress: str = ""
    #: Why the model was last unloaded, when the server chose to (an eviction); "" otherwise.
    unloaded_because: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set, and replaced by a fresh one, when a field of the status string changes (:meth:`watch`
    #: waits on it, so a state shorter than its poll, such as a fast llama.cpp load, is still seen).
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        changed = self.__dict__.get("changed")
        if changed is not None and name in _STATUS_FIELDS:
            changed.set()
            super().__setattr__("changed", asyncio.Event())

    @property
    def status_detail(self) -> str:
        """Status string in model-runner's ``backend.go`` format, e.g. ``"Running: llama_cpp on cpu"``."""
        if self.state is ModelState.READY:
            return format_status(self.state, f"{self.spec.backend} on {self.device}")
        if self.state is ModelState.ERROR:
            return format_status(self.state, self.error)
        if self.state is ModelState.LOADING and self.progress:
            return f"Installing: {self.progress}"  # model-runner's status while it pulls or converts
        if self.state is ModelState.NOT_LOADED:
            return format_status(self.state, self.unloaded_because)
        return format_status(self.state)

    @property
    def settled(self) -> bool:
        """Whether its status stays as it is until a new load or unload.

        READY, ERROR, or NOT_LOADED with no load starting (its lock free).
        """
        starting = self.state is ModelState.NOT_LOADED and self.lock.locked()
        return self.state in (ModelState.READY, ModelState.ERROR, ModelState.NOT_LOADED) and not starting

    @property
    def evictable(self) -> bool:
        """Whether the server may unload it to make room: loaded, idle, neither pinned nor kept forever."""
        return (
            self.state is ModelState.READY
            and self.active == 0
            and not self.pinned
            and not math.isinf(self.keep_alive_s)
        )

    def stats(self) -> EngineStats:
        """The loaded engine's figures (:meth:`Engine.stats`); empty when no engine is loaded.

        Engines answer from their own bookkeeping, so this may be read from any thread (metrics
        scrapes) while the model's lane runs.
        """
        return self.engine.stats() if self.engine is not None else EngineStats()

    def effective_options(self) -> dict[str, Any]:
        """The backend options in effect, as given (without the backend's defaults).

        The loaded engine's (the catalog entry's with LoadModel's overrides over them), else the
        catalog entry's.
        """
        return dict(self.engine.spec.options if self.engine is not None else self.spec.options)

    def expires_at(self) -> float | None:
        """Wall-clock time at which the idle model will unload, or None if not scheduled."""
        if self.state is not ModelState.READY or self.active or self.pinned or math.isinf(self.keep_alive_s):
            return None
        return time.time() + max(0.0, self.keep_alive_s - (time.monotonic() - self.last_used))


EngineFactory = Callable[[str], type[Engine]]


class ModelManager:
    """Owns every model's lifecycle; tasks get engines only through :meth:`acquire`.

    Args:
        catalog: model specs by name.
        settings: server settings (default keep-alive, hub policy, memory headroom).
        executors: the lanes engines run on (one per loaded model).
        engine_factory: backend name → engine class (the registry; replaceable in tests).

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
        self._executors = executors
        self._engine_factory = engine_factory
        self._default_keep_alive_s = parse_keep_alive(settings.default_keep_alive)
        self._models: dict[str, ManagedModel] = {name: self._managed(spec) for name, spec in catalog.items()}
        # Malformed catalog entries (service.catalog.Catalog.invalid): listed, never loadable.
        self._invalid = dict(invalid or {})
        for name in self._invalid:
            self._models[name] = self._managed(ModelSpec(name=name, backend="", tasks=(), source=""))
        # Entries clients added by naming hub ids (allow_hub_models), oldest first; at most hub_max_models.
        self._hub_names: dict[str, None] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._closing = False
        self._budget = MemoryBudget(
            budgets={RAM_POOL: settings.memory_budget_bytes},
            device_budget=settings.device_memory_budget_bytes,
            headroom=settings.memory_headroom_bytes,
            max_loaded=settings.max_loaded_models,
        )
        # Held while a load is checked against the budget and its room made: two loads cannot
        # both pass the check, nor pick the same model to evict.
        self._budget_lock = asyncio.Lock()

    def _managed(self, spec: ModelSpec) -> ManagedModel:
        if self._settings.max_queue_wait_s and "max_queue_wait_s" not in spec.options and self._queues(spec):
            # The server-wide limit, unless the catalog entry sets its own.
            options = {**spec.options, "max_queue_wait_s": self._settings.max_queue_wait_s}
            spec = dataclasses.replace(spec, options=options)
        keep_alive = parse_keep_alive(spec.keep_alive) if spec.keep_alive else self._default_keep_alive_s
        return ManagedModel(spec=spec, keep_alive_s=keep_alive, pinned=spec.pinned)

    def _queues(self, spec: ModelSpec) -> bool:
        """Whether ``spec``'s backend has the ``max_queue_wait_s`` option (a queue before its device)."""
        try:
            options_model = self._engine_factory(spec.backend).options_model
        except RuntimeServiceError:
            return False  # an unknown backend: the entry is refused when used
        return "max_queue_wait_s" in options_model.model_fields

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
                f"invalid model name {name!r}: {exc}", reason="INVALID_MODEL_NAME", field="model", model=name
            ) from None
        managed = self._models.get(name)
        if managed is not None:
            return managed
        if self._settings.allow_hub_models and "/" in name and task in HUB_DEFAULT_BACKENDS:
            self._make_room_for_hub_model()
            spec = ModelSpec(name=name, backend=HUB_DEFAULT_BACKENDS[task], tasks=(task,), source=name)
            managed = self._models[name] = self._managed(spec)
            self._hub_names[name] = None
            return managed
        raise ModelNotFoundError(f"model {name!r} is not in the catalog", field="model", model=name)

    def _make_room_for_hub_model(self) -> None:
        """Keep the hub entries clients add under ``hub_max_models``.

        When full, entries that are neither loaded, loading nor in use are dropped (the oldest
        first); a hub entry that failed to load is dropped at once (:meth:`_load_locked`).

        Raises:
            ResourceExhaustedError: every hub entry is loaded or in use (reason HUB_MODELS_LIMIT).

        """
        limit = self._settings.hub_max_models
        for name in list(self._hub_names):  # insertion order: the oldest first
            if len(self._hub_names) < limit:
                return
            managed = self._models[name]
            if managed.state in (ModelState.NOT_LOADED, ModelState.ERROR) and not managed.active:
                self._forget_hub_model(name)
        if len(self._hub_names) >= limit:
            raise ResourceExhaustedError(
                f"{limit} hub models are loaded or in use (setting hub_max_models); "
                "unload one first or name a catalog model",
                reason="HUB_MODELS_LIMIT",
                hub_max_models=limit,
            )

    def _forget_hub_model(self, name: str) -> None:
        self._hub_names.pop(name, None)
        self._models.pop(name, None)

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
        self._refuse_malformed(managed.spec)
        what = task.value if task is not None else TASKLESS_CAPABILITIES[capability]
        if task is not None and task not in managed.spec.tasks:
            served = ", ".join(t.value for t in managed.spec.tasks)
            raise TaskNotSupportedError(
                f"model {name!r} cannot do {task.value}; it serves: {served}", model=name, task=task.value
            )
        if task is None and not _provides(self._preflight(managed.spec), capability):
            # Refused before a load: an OCR model is not loaded only to learn it has no tokenizer.
            raise TaskNotSupportedError(
                f"model {name!r} (backend {managed.spec.backend}) cannot {what}", model=name, task=what
            )
        override = parse_keep_alive(keep_alive) if keep_alive else None
        engine = await self._hold(managed)
        try:
            if not _provides(type(engine), capability):
                # A catalog entry listing a task its backend cannot do: the operator's mistake.
                raise TaskNotSupportedError(
                    f"model {name!r} (backend {managed.spec.backend}) cannot do {what}",
                    model=name,
                    task=what,
                )
            yield engine
        finally:
            self._release(managed, override)

    async def _hold(self, managed: ManagedModel) -> Engine:
        if self._closing:
            raise UnavailableError("server is shutting down", reason="SHUTTING_DOWN")
        # Fast path: no await between the check and the increment, so no unload can slip in.
        if managed.state is ModelState.READY and managed.engine is not None:
            managed.active += 1
            managed.idle.clear()
            return managed.engine
        async with managed.lock:
            if managed.state is not ModelState.READY or managed.engine is None:
                await self._load_locked(managed)
            assert managed.engine is not None
            managed.active += 1
            managed.idle.clear()
            return managed.engine

    def _release(self, managed: ManagedModel, keep_alive_override: float | None) -> None:
        managed.active -= 1
        managed.last_used = time.monotonic()
        if keep_alive_override is not None:
            managed.keep_alive_s = keep_alive_override
        if managed.active == 0:
            managed.idle.set()
            if managed.keep_alive_s == 0 and not managed.pinned:
                self.spawn(self._unload_if_idle(managed, 0.0))

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
        if self._closing:
            raise UnavailableError("server is shutting down", reason="SHUTTING_DOWN")
        wanted: tuple[ModelSpec, EngineOptions] | None = None
        if options is not None:
            # Checked before the lock: a bad override never waits behind another load.
            wanted = await asyncio.to_thread(self._with_overrides, managed.spec, options)
        async with managed.lock:
            if managed.state is not ModelState.READY:
                await self._load_locked(managed, wanted[0] if wanted is not None else None)
            elif wanted is not None and managed.engine is not None and managed.engine.options != wanted[1]:
                loaded = _options_text(managed.effective_options())
                raise FailedPreconditionError(
                    f"model {name!r} is loaded with other options ({loaded}) than this load asks for; "
                    "unload it first",
                    reason="MODEL_LOADED_WITH_OTHER_OPTIONS",
                    model=name,
                )
        if override is not None:
            managed.keep_alive_s = override
        if pinned is not None:
            managed.pinned = pinned
        managed.last_used = time.monotonic()
        return managed

    async def _load_locked(self, managed: ManagedModel, spec: ModelSpec | None = None) -> None:
        """Load the model (lock held); any failure leaves it ERROR with the reason as its status.

        ``spec`` is the catalog entry with LoadModel's option overrides (:meth:`_with_overrides`);
        None loads the entry as it is. The next request or LoadModel tries again from the start,
        checks included, so an entry fixed on disk (a package installed since) loads without a
        restart.
        """
        spec = spec or managed.spec
        # A load's allocations would set off full collections that stop the event loop too.
        with full_collections_paused():
            await self._load_engine(managed, spec)

    async def _load_engine(self, managed: ManagedModel, spec: ModelSpec) -> None:
        """The body of :meth:`_load_locked`, with automatic garbage collection paused."""
        loading: tuple[str, DeviceExecutor] | None = None  # set once engine.load may hold memory
        try:
            if spec.name in self._hub_names:
                # Loading from here on, so that the download's progress shows in its status.
                managed.state, managed.progress, managed.unloaded_because = ModelState.LOADING, "", ""
                spec = await self._hub_spec(spec, self._progress_sink(managed))
            # The checks import the backend (torch, for the device probe: seconds of imports that
            # hold the GIL) and read files (GGUF headers for the estimate): in a worker thread, so
            # a first load never holds the event loop that serves every other caller.
            cls, device = await asyncio.to_thread(self._engine_class_and_device, spec)
            executor = self._executors.lane(device, spec.name)
            engine = cls(spec, device, executor)
            await self._make_room(managed, engine)
            managed.state, managed.progress, managed.unloaded_because = ModelState.LOADING, "", ""
            managed.load_count += 1
            started = time.perf_counter()
            log.info("loading model", extra={"model": spec.name, "backend": spec.backend, "device": device})
            loading = device, executor
            engine.progress = self._progress_sink(managed)
            await executor.run(engine.configure_lane)
            await executor.run(engine.load)
        except RuntimeServiceError as exc:
            await self._load_failed(managed, exc.message, loading)
            if isinstance(exc, ModelNotFoundError):
                raise
            if exc.reason in PREFLIGHT_REASONS and exc.status == "INTERNAL":
                # A source problem found only while loading is still the catalog's, not a server bug.
                raise FailedPreconditionError(exc.message, reason=exc.reason, model=spec.name) from exc
            raise
        except Exception as exc:
            log.exception("model failed to load", extra={"model": spec.name})
            await self._load_failed(managed, f"{type(exc).__name__}: {exc}", loading)
            raise ModelLoadError(f"model {spec.name!r} failed to load", model=spec.name) from exc
        finally:
            # Loaded or failed, its bytes are now measured (or freed): no longer held in reserve.
            self._budget.release(spec.name)
            managed.progress = ""
        managed.engine, managed.device, managed.error = engine, device, ""
        managed.memory = engine.memory_usage()
        managed.loaded_at = time.time()
        managed.last_used = time.monotonic()
        managed.keep_alive_s = (
            parse_keep_alive(spec.keep_alive) if spec.keep_alive else self._default_keep_alive_s
        )
        managed.state = ModelState.READY
        seconds = time.perf_counter() - started
        metrics.model_loaded(spec.name, seconds)
        log.info(
            "model ready",
            extra={
                "model": spec.name,
                "seconds": round(seconds, 3),
                "ram_bytes": managed.memory.ram_bytes,
                "vram_bytes": managed.memory.vram_bytes,
            },
        )

    async def _hub_spec(self, spec: ModelSpec, report: Callable[[str], None]) -> ModelSpec:
        """``spec`` of a client-named hub id, its source the id's snapshot folder in the hub cache.

        Resolved by ``huggingface_hub.snapshot_download`` (the local cache only under
        ``HF_HUB_OFFLINE``), in a worker thread, so the loaders get an absolute path inside the
        cache: a folder that happens to be called ``org/name`` under the server's working
        directory is never read (the loaders take an existing path before a hub id).

        Raises:
            ModelNotFoundError: no such repository, or not cached and not downloadable now
                (reason MODEL_NOT_FOUND).

        """
        try:
            folder = await asyncio.to_thread(_hub_snapshot, spec.source, report)
        except Exception as exc:
            log.warning("hub model not found", extra={"model": spec.name, "error": repr(exc)})
            raise ModelNotFoundError(
                f"model {spec.name!r} is neither in the catalog nor a hub model that could be fetched",
                field="model",
                model=spec.name,
            ) from exc
        return dataclasses.replace(spec, source=folder)

    async def _load_failed(
        self, managed: ManagedModel, error: str, loading: tuple[str, DeviceExecutor] | None
    ) -> None:
        if managed.spec.name in self._hub_names and not managed.active:
            self._forget_hub_model(managed.spec.name)  # a failed hub id holds no entry
        managed.state, managed.error = ModelState.ERROR, error
        if loading is not None:
            # Free whatever the failed load allocated before reporting.
            device, executor = loading
            await executor.run(release_device_memory, device)
            self._executors.retire(executor)

    def _with_overrides(
        self, spec: ModelSpec, overrides: Mapping[str, Any]
    ) -> tuple[ModelSpec, EngineOptions]:
        """``spec`` with LoadModel's option overrides over its options, and those options typed (blocking).

        The entry itself is checked first (:meth:`_preflight`), so a fault of the catalog stays
        FAILED_PRECONDITION; then the merged options go through the backend's options model, and
        the overrides through its allow-list for callers (:func:`engines.options.refuse_operator_options`:
        bounded numbers, booleans and enums; files, folders and sources stay the catalog's). The
        overrides are kept in their typed form (``4096.0`` from a Struct becomes ``4096``).

        Raises:
            FailedPreconditionError: what :meth:`_preflight` raises.
            InvalidArgumentError: reason INVALID_MODEL_OPTION: an override is unknown, of the wrong
                type, out of range or past its bound for callers, or breaks a rule between options;
                reason OPTION_NOT_OVERRIDABLE: an option only the catalog sets (metadata ``option``,
                ``field`` ``options.<name>``).

        """
        cls = self._preflight(spec)
        try:
            refuse_operator_options(cls.options_model, overrides, backend=spec.backend)
            typed = parse_options(cls.options_model, {**spec.options, **overrides}, backend=spec.backend)
            check_override_bounds(
                cls.options_model, overrides, typed, backend=spec.backend, cores=cpu_threads()
            )
        except InvalidArgumentError as exc:
            option = exc.metadata.get("option", "")
            raise InvalidArgumentError(
                exc.message,  # names the option (or "options:" for a rule between them) already
                reason=exc.reason,
                field=f"options.{option}" if option not in ("", "options") else "options",
                option=option,
                backend=spec.backend,
                model=spec.name,
            ) from None
        given = typed.model_dump(mode="json", include=set(overrides))
        return dataclasses.replace(spec, options={**spec.options, **given}), typed

    def _refuse_malformed(self, spec: ModelSpec) -> None:
        """Raise FailedPreconditionError (INVALID_CATALOG_ENTRY, with why) for a malformed entry."""
        why = self._invalid.get(spec.name)
        if why is not None:
            raise FailedPreconditionError(why, reason="INVALID_CATALOG_ENTRY", model=spec.name)

    def _engine_class_and_device(self, spec: ModelSpec) -> tuple[type[Engine], str]:
        """The engine class of ``spec`` (:meth:`_preflight`) and the device it runs on.

        Raises:
            FailedPreconditionError: what :meth:`_preflight` raises, or reason DEVICE_UNAVAILABLE
                for a device this machine lacks.

        """
        cls = self._preflight(spec)
        preference = spec.device if spec.device != "auto" else self._settings.device
        try:
            return cls, cls.select_device(preference)
        except ValueError as exc:
            raise FailedPreconditionError(str(exc), reason="DEVICE_UNAVAILABLE", model=spec.name) from None

    def _preflight(self, spec: ModelSpec) -> type[Engine]:
        """The engine class of ``spec`` once its cheap checks pass (:meth:`Engine.check_spec`).

        Raises:
            FailedPreconditionError: a malformed entry (INVALID_CATALOG_ENTRY), an unknown backend
                or a bad entry, with the check's message; reason UNKNOWN_BACKEND,
                MODEL_SOURCE_MISSING, MODEL_SOURCE_INVALID, INVALID_MODEL_OPTION (any invalid
                option) or MODEL_UNAVAILABLE (anything else).

        """
        self._refuse_malformed(spec)
        try:
            cls = self._engine_factory(spec.backend)
            cls.check_spec(spec)
        except RuntimeServiceError as exc:
            # The operator's catalog, not the request, is at fault: no field, not INTERNAL.
            reason = exc.reason
            if reason not in PREFLIGHT_REASONS:
                invalid = isinstance(exc, InvalidArgumentError)
                reason = "INVALID_MODEL_OPTION" if invalid else "MODEL_UNAVAILABLE"
            raise FailedPreconditionError(exc.message, reason=reason, model=spec.name) from exc
        except Exception as exc:
            # An unexpected failure of a check: its text stays in the log, not in the answer.
            log.warning("catalog entry check failed", exc_info=exc, extra={"model": spec.name})
            raise FailedPreconditionError(
                f"model {spec.name!r} failed its backend's checks ({type(exc).__name__}); see the server log",
                reason="MODEL_UNAVAILABLE",
                model=spec.name,
            ) from exc
        return cls

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
                self._preflight(managed.spec)
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
            self._refuse_malformed(managed.spec)
            cls, device = await asyncio.to_thread(self._engine_class_and_device, managed.spec)
            # An engine is cheap to make (no load) and its lane starts no thread until used.
            engine = cls(managed.spec, device, DeviceExecutor(device, f"estimate:{name}"))
            managed.required = await asyncio.to_thread(engine.required_memory)
        return managed.required

    def _loaded_models(self, loading: ManagedModel) -> list[LoadedModel]:
        """The budget's view of every model holding memory, except ``loading``.

        A model holds the larger of its measured use and its estimate (a backend that cannot
        measure reports 0, and evicting it still frees what it holds). Models unloading still hold
        their memory and cannot be evicted again.
        """
        loaded = []
        for managed in self._models.values():
            if managed is loading or managed.state not in (ModelState.READY, ModelState.UNLOADING):
                continue
            required = managed.required or MemoryUsage()
            held = MemoryUsage(
                max(managed.memory.ram_bytes, required.ram_bytes),
                max(managed.memory.vram_bytes, required.vram_bytes),
            )
            loaded.append(
                LoadedModel(
                    name=managed.spec.name,
                    held=pool_bytes(managed.device, held),
                    last_used=managed.last_used,
                    busy=managed.active > 0 or managed.state is ModelState.UNLOADING,
                    pinned=managed.pinned or math.isinf(managed.keep_alive_s),
                )
            )
        return loaded

    @staticmethod
    def _free_bytes(engine: Engine, pools: Mapping[str, int]) -> dict[str, int]:
        """Bytes free now in each pool of ``pools`` (blocking: reads the cgroup or asks the device)."""
        free = {}
        for pool in pools:
            own = (pool == RAM_POOL and engine.device == "cpu") or pool == engine.device
            free[pool] = engine.free_memory_bytes() if own else available_memory_bytes()
        return free

    async def _make_room(self, managed: ManagedModel, engine: Engine) -> None:
        """Reserve the budget for ``engine``'s load, evicting idle models first if it does not fit.

        The reservation lasts until the load ends (:meth:`_load_engine`). An estimate of 0 bytes
        (a backend that cannot tell) is checked against the count limit only.

        Raises:
            ResourceExhaustedError: it cannot fit with every evictable model gone (reason
                INSUFFICIENT_MEMORY or MAX_LOADED_MODELS, with the figures:
                :meth:`MemoryBudget.plan`), or the models picked to evict kept getting requests.

        """
        name = engine.spec.name
        estimate = await asyncio.to_thread(engine.required_memory)
        needed = pool_bytes(engine.device, estimate)
        async with self._budget_lock:
            # A model picked to evict may get a request before its turn; then plan again (bounded).
            for _ in range(MAKE_ROOM_ATTEMPTS):
                free = await asyncio.to_thread(self._free_bytes, engine, needed)
                plan = self._budget.plan(name, needed, free, self._loaded_models(managed))
                evicted = [await self._evict(victim, reason, name) for victim, reason in plan.victims]
                if all(evicted):
                    self._budget.reserve(name, needed)
                    # Kept only now: a refused load's estimate (its options) is not the entry's.
                    managed.required = estimate
                    return
                await asyncio.sleep(MAKE_ROOM_RETRY_S)  # an unload under way ends, or a request does
        raise ResourceExhaustedError(
            f"cannot make room for model {name!r}: the idle models picked to unload kept getting "
            "requests; retry later",
            reason="INSUFFICIENT_MEMORY",
            model=name,
        )

    async def _evict(self, name: str, reason: str, for_model: str) -> bool:
        """Unload the idle model ``name`` so that ``for_model`` fits; False if it is in use by now."""
        managed = self._models[name]
        if managed.lock.locked():
            # Someone is unloading or loading it (and may wait for the budget this load holds):
            # never wait for its lock here; plan again instead.
            return False
        async with managed.lock:
            if managed.state is not ModelState.READY:
                return True  # already gone
            if not managed.evictable:
                return False
            await self._unload_locked(managed, "evicted")
            managed.unloaded_because = f"evicted to make room for {for_model!r} ({reason})"
        metrics.model_evicted(name, reason)
        log.info("evicted model", extra={"model": name, "for_model": for_model, "reason": reason})
        return True

    def _progress_sink(self, managed: ManagedModel) -> Callable[[str], None]:
        """The ``Engine.progress`` of a load: sets ``managed.progress`` on the event loop, from any thread."""
        loop = asyncio.get_running_loop()

        def report(detail: str) -> None:
            def update() -> None:
                if managed.state is ModelState.LOADING:
                    managed.progress = clip_text(detail, MAX_PROGRESS_CHARS)

            loop.call_soon_threadsafe(update)

        return report

    async def unload(self, name: str, *, force: bool = False) -> ManagedModel:
        """Unload ``name`` once its in-flight requests finish (no-op when not loaded).

        Raises:
            FailedPreconditionError: the model is pinned and ``force`` is false (reason MODEL_PINNED).
            InvalidArgumentError, ModelNotFoundError: see :meth:`get`.

        """
        managed = self.get(name)
        if managed.pinned and not force:
            raise FailedPreconditionError(
                f"model {name!r} is pinned; pass force to unload it", reason="MODEL_PINNED", model=name
            )
        async with managed.lock:
            await managed.idle.wait()
            await self._unload_locked(managed, "explicit")
        return managed

    async def _unload_if_idle(self, managed: ManagedModel, idle_for_s: float) -> None:
        async with managed.lock:
            idle = time.monotonic() - managed.last_used
            if managed.state is ModelState.READY and managed.active == 0 and idle >= idle_for_s:
                await self._unload_locked(managed, "idle")

    async def _unload_locked(self, managed: ManagedModel, reason: str) -> None:
        """Unload a READY model (``reason``: idle, explicit or shutdown, for the metrics)."""
        engine = managed.engine
        if engine is None or managed.state is not ModelState.READY:
            return
        metrics.model_unloaded(managed.spec.name, reason)
        managed.state = ModelState.UNLOADING
        log.info("unloading model", extra={"model": managed.spec.name})
        try:
            await asyncio.wait_for(engine.drain(), DRAIN_TIMEOUT_S)
        except TimeoutError:
            log.warning("engine still busy; unloading anyway", extra={"model": managed.spec.name})
        executor = engine.executor
        try:
            await executor.run(engine.unload)
        except Exception:
            log.exception("engine unload raised; dropping it anyway", extra={"model": managed.spec.name})
        managed.engine = None
        unloaded = weakref.ref(engine)
        del engine
        # On the lane: its one worker has dropped the unload job (which held the engine) by then.
        await executor.run(_release_engine, unloaded, managed.spec.name, managed.device)
        self._executors.retire(executor)
        managed.memory = MemoryUsage()
        managed.loaded_at = 0.0
        managed.state = ModelState.NOT_LOADED

    # -- watching -----------------------------------------------------------------------------

    async def watch(
        self, name: str, loading: asyncio.Future[Any] | None = None
    ) -> AsyncIterator[ManagedModel]:
        """Yield the model ``name`` now and again each time its status string changes, until it settles.

        Settled: READY, ERROR, or NOT_LOADED with no load starting (its lock free), and ``loading``
        (a load the caller started, if any) done. The status is read when it changes
        (``ManagedModel.changed``), when ``loading`` ends, and at least every :data:`WATCH_POLL_S`
        (a lock let go changes no field); the watch ends after :data:`WATCH_MAX_S` whatever the
        state, so no stream outlives its bound.

        Raises:
            InvalidArgumentError, ModelNotFoundError: see :meth:`get`.

        """
        managed = self.get(name)
        last = None
        deadline = time.monotonic() + WATCH_MAX_S
        while True:
            changed = managed.changed  # taken before the read: a change after it sets this one
            detail = managed.status_detail
            if detail != last:
                last = detail
                yield managed
            if ((loading is None or loading.done()) and managed.settled) or time.monotonic() >= deadline:
                return
            waiting = asyncio.ensure_future(changed.wait())
            wake = {waiting} if loading is None or loading.done() else {waiting, loading}
            try:
                await asyncio.wait(wake, timeout=WATCH_POLL_S, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()

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
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_forever(), name="model-reaper")

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.reap_interval_s)
            now = time.monotonic()
            for managed in list(self._models.values()):
                if (
                    managed.state is ModelState.READY
                    and managed.active == 0
                    and not managed.pinned
                    and now - managed.last_used >= managed.keep_alive_s
                ):
                    try:
                        await self._unload_if_idle(managed, managed.keep_alive_s)
                    except Exception:
                        log.exception("idle unload failed", extra={"model": managed.spec.name})

    def spawn(self, coro: object) -> None:
        """Run ``coro`` in the background; :meth:`close` waits for it (once loads are refused)."""
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Refuse new work, stop the reaper and unload every model."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for managed in self._models.values():
            async with managed.lock:
                await self._unload_locked(managed, "shutdown")

    def describe_keep_alive(self, managed: ManagedModel) -> str:
        """The model's keep-alive as a Go duration string ("5m0s"), "0s" or "-1"."""
        return format_keep_alive(managed.keep_alive_s)
