"""Hub ids clients name (setting ``allow_hub_models``): their admission as entries, and their download.

An unknown ``org/name`` asked for with a task becomes an entry backed by the task's default hub
backend; at most ``hub_max_models`` such entries exist at once. Its load resolves the id to its
snapshot folder in the hub cache, downloading it unless offline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from engines.base import ModelSpec
from engines.errors import ModelNotFoundError, ResourceExhaustedError
from engines.reasons import Reason
from engines.types import Task
from service.model_manager.managed import ManagedModel, ModelState
from service.settings import Settings

# The package's logger: the manager's records keep one logger name whichever module writes them.
log = logging.getLogger("service.model_manager")

# Backend used for a hub id that is not in the catalog, by task.
HUB_DEFAULT_BACKENDS: dict[Task, str] = {
    Task.GENERATE: "transformers",
    Task.EMBED: "sentence_transformers",
}

# Weights of other frameworks and runtimes that the default hub backends never read.
_HUB_IGNORE_PATTERNS = ("*.h5", "*.msgpack", "*.ot", "*.onnx", "onnx/*", "openvino/*", "*.tflite", "*.gguf")


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


class HubModels:
    """The entries clients added by naming hub ids, oldest first; at most ``hub_max_models``.

    Args:
        models: the manager's managed models by name, which admitted entries join and forgotten
            ones leave (the same dict the manager reads).
        settings: server settings (``allow_hub_models``, ``hub_max_models``).

    """

    def __init__(self, models: dict[str, ManagedModel], settings: Settings) -> None:
        self._models = models
        self._settings = settings
        self._names: dict[str, None] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def admits(self, name: str, task: Task | None) -> bool:
        """Whether ``name``, not in the catalog, may become an entry for ``task``."""
        return self._settings.allow_hub_models and "/" in name and task in HUB_DEFAULT_BACKENDS

    def admit(self, name: str, task: Task, managed: Callable[[ModelSpec], ManagedModel]) -> ManagedModel:
        """Add the hub id ``name`` as an entry backed by ``task``'s default hub backend.

        ``managed`` makes the entry's record of its spec.

        Raises:
            ResourceExhaustedError: every hub entry is loaded or in use (reason HUB_MODELS_LIMIT).

        """
        self._make_room()
        spec = ModelSpec(name=name, backend=HUB_DEFAULT_BACKENDS[task], tasks=(task,), source=name)
        added = self._models[name] = managed(spec)
        self._names[name] = None
        return added

    def _make_room(self) -> None:
        """Keep the hub entries clients add under ``hub_max_models``.

        When full, entries that are neither loaded, loading nor in use are dropped (the oldest
        first); a hub entry that failed to load is dropped at once (:meth:`forget`).

        Raises:
            ResourceExhaustedError: every hub entry is loaded or in use (reason HUB_MODELS_LIMIT).

        """
        limit = self._settings.hub_max_models
        for name in list(self._names):  # insertion order: the oldest first
            if len(self._names) < limit:
                return
            managed = self._models[name]
            if managed.state in (ModelState.NOT_LOADED, ModelState.ERROR) and not managed.active:
                self.forget(name)
        if len(self._names) >= limit:
            raise ResourceExhaustedError(
                f"{limit} hub models are loaded or in use (setting hub_max_models); "
                "unload one first or name a catalog model",
                reason=Reason.HUB_MODELS_LIMIT,
                hub_max_models=limit,
            )

    def forget(self, name: str) -> None:
        """Drop the hub entry ``name``: from the hub ids and from the managed models."""
        self._names.pop(name, None)
        self._models.pop(name, None)

    async def resolve(self, spec: ModelSpec, report: Callable[[str], None]) -> ModelSpec:
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
