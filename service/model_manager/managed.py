"""The managed-model record: a catalog model's runtime state, and the status string it reads as."""

from __future__ import annotations

import asyncio
import collections
import enum
import math
import time
from dataclasses import dataclass, field
from typing import Any

from engines.base import Engine, ModelSpec
from engines.stats import EngineStats
from engines.types import MemoryUsage
from service.model_manager.backends.remote import BackendProcessInfo, RemoteEngine

#: Backend exits remembered per model for the restart backoff.
RESTART_HISTORY = 8
#: Exits older than this many seconds no longer lengthen the backoff.
RESTART_WINDOW_S = 60.0
#: Backoff before the first restart after an exit, seconds; doubled per recent exit.
RESTART_BACKOFF_S = 0.25
#: Longest backoff before a restart, seconds.
MAX_RESTART_BACKOFF_S = 8.0


def restart_delay_s(exits: collections.deque[float], now: float) -> float:
    """Seconds to wait before starting a model's backend again, after its recent exits.

    ``RESTART_BACKOFF_S * 2**(n-1)`` for ``n`` exits in the last :data:`RESTART_WINDOW_S`
    seconds, at most :data:`MAX_RESTART_BACKOFF_S`, counted from the last exit; 0 without one.
    """
    recent = [at for at in exits if now - at < RESTART_WINDOW_S]
    if not recent:
        return 0.0
    backoff = min(RESTART_BACKOFF_S * 2 ** (len(recent) - 1), MAX_RESTART_BACKOFF_S)
    return max(0.0, backoff - (now - recent[-1]))


class ModelState(enum.Enum):
    """Lifecycle state of a catalog model."""

    NOT_LOADED = "Not Loaded"
    LOADING = "Loading"
    READY = "Running"
    UNLOADING = "Unloading"
    ERROR = "Error"


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
    engine: Engine | RemoteEngine | None = None
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
    #: Monotonic times of its backend process's recent exits that the server did not ask for
    #: (the last :data:`RESTART_HISTORY`; they set the backoff of the next start).
    backend_exits: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=RESTART_HISTORY)
    )
    #: Backend processes started for it since the server started.
    backend_starts: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set, and replaced by a fresh one, when a field of the status string changes
    #: (:meth:`ModelManager.watch` waits on it, so a state shorter than its poll, such as a fast
    #: llama.cpp load, is still seen).
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

    def backend_process(self) -> BackendProcessInfo | None:
        """The backend process serving the loaded model; None in the server's own process or unloaded."""
        engine = self.engine
        return engine.backend_process() if isinstance(engine, RemoteEngine) else None

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
