"""The engine base class: what the model manager loads, measures and unloads."""

from __future__ import annotations

import abc
import logging
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, cast

from engines.device import (
    cpu_threads,
    device_free_bytes,
    lower_thread_priority,
    resolve_device,
    resolve_device_without_torch,
    set_torch_threads,
)
from engines.executor import DeviceExecutor
from engines.options import EngineOptions, OptionsT, TorchEngineOptions, parse_options
from engines.sources import resolve_source
from engines.stats import EngineStats
from engines.types import MemoryUsage, Task

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A catalog entry: how to build one engine.

    Attributes:
        name: catalog name clients use.
        backend: registry key of the engine class (e.g. ``"llama_cpp"``).
        tasks: tasks the model serves; a subset of its engine class's tasks.
        source: resolved weights location: a local path, or a hub id when allowed.
        device: ``"auto"`` or an explicit device.
        options: backend-specific options (e.g. ``n_ctx`` for llama.cpp).
        keep_alive: Go-style duration string, ``"0"`` or ``"-1"`` (see ``service.keep_alive``).
        pinned: never unloaded on idle, nor evicted to make room.
        preload: loaded when the server starts (health NOT_SERVING until it is).

    """

    name: str
    backend: str
    tasks: tuple[Task, ...]
    source: str
    device: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    keep_alive: str | None = None
    pinned: bool = False
    preload: bool = False


class Engine(abc.ABC, Generic[OptionsT]):
    """A loaded model behind one backend.

    Subclasses set ``backend`` and ``tasks`` and implement :meth:`load`, :meth:`unload` and
    :meth:`memory_usage`. ``load``/``unload`` are blocking and are called on the engine's
    lane (its executor); task methods are ``async`` and submit their blocking parts to
    ``self.executor``.
    """

    backend: ClassVar[str]
    tasks: ClassVar[frozenset[Task]]
    options_model: ClassVar[type[EngineOptions]] = EngineOptions
    """The backend's typed catalog options (:mod:`engines.options`): the class's type parameter,
    ``class TesseractEngine(OcrEngine[TesseractOptions])``; ``self.options`` is one."""
    options: OptionsT
    runs_torch: ClassVar[bool] = False
    """Whether the engine computes with torch on its lane (see :meth:`configure_lane`); such a
    backend's :attr:`options_model` has the ``threads`` option (:class:`TorchEngineOptions`)."""
    runs_in_backend_process: ClassVar[bool] = False
    """Whether the model manager runs this backend's models in their own backend processes
    (``service.model_manager.backends``): every capability it has crosses the backend's socket."""
    default_niceness: ClassVar[int] = 0
    """Nice value of the lane's threads unless the catalog option ``niceness`` sets one: 0 for
    models that answer interactive calls; batch work (OCR pages) yields the cores to them."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            parameter = next(iter(typing.get_args(base)), None)
            if isinstance(parameter, type) and issubclass(parameter, EngineOptions):
                cls.options_model = parameter
        if cls.runs_torch and not issubclass(cls.options_model, TorchEngineOptions):
            raise TypeError(
                f"{cls.__qualname__} runs torch: its options_model must have threads (TorchEngineOptions)"
            )

    def __init__(self, spec: ModelSpec, device: str, executor: DeviceExecutor) -> None:
        """Keep ``spec`` and parse its options (:meth:`check_spec` has accepted them).

        Raises:
            InvalidArgumentError: an invalid option (reason INVALID_MODEL_OPTION).

        """
        self.spec = spec
        self.device = device
        self.executor = executor
        self.options = parse_options(self.options_model, spec.options, backend=self.backend)
        self.progress: Callable[[str], None] = _no_progress

    @property
    def engine_class(self) -> type[Engine]:
        """The class whose capabilities this engine has: its own (a backend's proxy names another)."""
        return type(self)

    @abc.abstractmethod
    def load(self) -> None:
        """Load weights onto ``self.device`` (blocking).

        Raises:
            Exception: any load failure; the manager records it and answers ModelLoadError.

        """

    @abc.abstractmethod
    def unload(self) -> None:
        """Drop every reference to weights and caches (blocking); the manager then frees device memory."""

    def configure_lane(self) -> None:
        """Set up the lane's thread for this engine (blocking; called on the lane before :meth:`load`).

        The lane's nice value: the ``niceness`` option (0-19), else :attr:`default_niceness`.

        For a torch engine on the CPU, the lane's torch intra-op threads: the ``threads`` option,
        else every core the process may use. One thread keeps a model's small calls quick beside
        busy neighbours (a team of OpenMP threads spin-waits at its barriers, and a busy core
        stalls the team) at the cost of throughput on large batches; ``bench/README.md``
        (isolation) has the figures. Every torch lane sets its count, because the count that
        ``torch.set_num_threads`` sets is also the default of threads that start torch later.
        """
        if self.runs_torch and self.device == "cpu":
            threads = cast(TorchEngineOptions, self.options).threads  # checked in __init_subclass__
            set_torch_threads(threads or cpu_threads())
        niceness = self.options.niceness
        lower_thread_priority(self.default_niceness if niceness is None else niceness)

    async def drain(self) -> None:
        """Return once no job of this engine is queued or running (called before :meth:`unload`).

        The default has nothing to wait for: task calls hold the model until they return. Engines
        with work of their own beyond a call (a batch loop releasing cancelled sequences) wait for
        it here, so that unload never pulls weights from under a job.
        """
        return None

    @abc.abstractmethod
    def memory_usage(self) -> MemoryUsage:
        """Bytes held by the loaded model in host and accelerator memory."""

    def stats(self) -> EngineStats:
        """The engine's figures for metrics and ``GetModel``, one field per capability it has.

        The default has none (an empty :class:`~engines.stats.EngineStats`); generation and
        batched encoder engines fill theirs. Called from any thread (metrics scrapes) while the
        lane runs: answers from Python-level bookkeeping, never by calling into the runtime.
        """
        return EngineStats()

    def estimated_load_bytes(self) -> int:
        """Bytes the model is expected to need once loaded, checked against free memory before load.

        The default is 0 (unknown, no check); file-backed engines return their weights' size.
        """
        return 0

    def required_memory(self) -> MemoryUsage:
        """Bytes the model will hold once loaded, in host RAM and on its device, known before the load.

        backend.go's ``RequiredMemory{RAM, VRAM}``: estimated from files and options only (no
        weights read, no device touched), cheap enough to run before every load (blocking; run in
        a worker thread). The model manager checks it against the memory budget and makes room
        for it. The default puts :meth:`estimated_load_bytes` on the engine's device: RAM on the
        CPU, VRAM elsewhere; backends override it with their own split.
        """
        needed = max(0, self.estimated_load_bytes())
        if self.device == "cpu":
            return MemoryUsage(ram_bytes=needed)
        return MemoryUsage(vram_bytes=needed)

    def report_progress(self, detail: str) -> None:
        """Say what the load is doing now (``"downloading 42%"``, ``"converting"``), from any thread.

        The model manager sets :attr:`progress` before :meth:`load` and shows ``detail`` in the
        model's status (``Installing: downloading 42%``) and its ``WatchModel`` stream; without
        a manager it goes nowhere. Cheap: call it as often as progress changes.
        """
        self.progress(detail)

    def free_memory_bytes(self) -> int:
        """Bytes free for this model on its device now (:func:`engines.device.device_free_bytes`).

        Compared with :meth:`estimated_load_bytes` before a load. Engines whose runtime has its own
        view of the device (llama.cpp's ggml) override it, so that asking starts no other runtime.
        """
        return device_free_bytes(self.device)

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """Cheap checks of a catalog entry for this backend: no weights read, no device probed, no network.

        Run for every entry when the server starts and again before each load, so a bad entry
        is reported up front and a fixed one (a package installed since) loads. The default
        resolves the source (a hub id passes unchecked: it may only exist in the loader's cache
        or online) and validates the options against :attr:`options_model`; backends override it
        to check more (a package installed, a file present), calling ``super().check_spec(spec)``.

        Raises:
            ModelLoadError: the source is missing (reason MODEL_SOURCE_MISSING) or of the wrong
                kind (MODEL_SOURCE_INVALID).
            InvalidArgumentError: an invalid option (reason INVALID_MODEL_OPTION).

        """
        resolve_source(spec.source)
        parse_options(cls.options_model, spec.options, backend=cls.backend)

    @classmethod
    def select_device_without_runtime(cls, preference: str) -> str:
        """:meth:`select_device`'s answer, from a process that will not run this engine.

        The server of a backend process chooses the device before the backend starts, importing
        no device runtime (torch costs hundreds of MB in every process that imports it). The
        default answers without torch (:func:`engines.device.resolve_device_without_torch`);
        backends whose :meth:`select_device` imports no torch keep their own.

        Raises:
            ValueError: an explicit device that is not available on this machine.

        """
        if cls.select_device.__func__ is not Engine.select_device.__func__:  # type: ignore[attr-defined]
            return cls.select_device(preference)
        return resolve_device_without_torch(preference)

    @classmethod
    def select_device(cls, preference: str) -> str:
        """The device this backend runs on for ``preference`` (``auto``, ``cpu``, ``cuda[:N]``, ``mps``).

        The default probes the machine through torch (:func:`engines.device.resolve_device`).
        Backends that do not run on torch override it, so that choosing their device never
        imports torch (hundreds of MB of RSS and seconds of start-up for a process that serves
        only GGUF or OCR models).

        Raises:
            ValueError: an explicit device that is not available on this machine.

        """
        return resolve_device(preference)


def _no_progress(detail: str) -> None:
    """The progress sink of an engine no manager watches: drops ``detail``."""
