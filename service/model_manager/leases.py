"""Leases: a request's hold on a loaded model, and the background work that unloads idle ones.

A request holds a model from :meth:`Leases.begin` to :meth:`Leases.end` (its ``active`` count);
nothing unloads a model with active requests. Keep-alive follows docker/model-runner's backend
interface (``pkg/inference/backend.go``; see :mod:`service.keep_alive`): a background reaper
unloads models idle past their keep-alive, a keep-alive of 0 unloads as the last request ends, and
pinned models never unload on idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from engines.base import Engine
from engines.errors import UnavailableError
from engines.reasons import Reason
from service.model_manager.loading import Loader
from service.model_manager.managed import ManagedModel, ModelState
from service.model_manager.residency import Residency
from service.settings import Settings

# The package's logger: the manager's records keep one logger name whichever module writes them.
log = logging.getLogger("service.model_manager")


class Leases:
    """Requests' holds on models, the idle reaper, and background work the manager's close waits for.

    Args:
        models: the manager's managed models by name (the same dict the manager reads).
        settings: server settings (``reap_interval_s``).
        loader: loads a model a lease finds not loaded.
        residency: unloads idle models.

    """

    def __init__(
        self, models: Mapping[str, ManagedModel], settings: Settings, loader: Loader, residency: Residency
    ) -> None:
        self._models = models
        self._settings = settings
        self._loader = loader
        self._residency = residency
        self._reaper: asyncio.Task[None] | None = None
        self._background: set[asyncio.Future[None]] = set()
        self._closing = False

    def refuse_if_closing(self) -> None:
        """Raise UnavailableError (SHUTTING_DOWN) once :meth:`close` has begun."""
        if self._closing:
            raise UnavailableError("server is shutting down", reason=Reason.SHUTTING_DOWN)

    async def begin(self, managed: ManagedModel) -> Engine:
        """Count a request on ``managed``, loading it first if it is not loaded; its engine.

        Raises:
            UnavailableError: the server is shutting down.
            RuntimeServiceError: what :meth:`Loader.load_locked` raises.

        """
        self.refuse_if_closing()
        # Fast path: no await between the check and the increment, so no unload can slip in.
        if managed.state is ModelState.READY and managed.engine is not None:
            managed.active += 1
            managed.idle.clear()
            return managed.engine
        async with managed.lock:
            if managed.state is not ModelState.READY or managed.engine is None:
                await self._loader.load_locked(managed)
            assert managed.engine is not None
            managed.active += 1
            managed.idle.clear()
            return managed.engine

    def end(self, managed: ManagedModel, keep_alive_override: float | None) -> None:
        """End a request's hold on ``managed`` (its keep-alive from now on: ``keep_alive_override``)."""
        managed.active -= 1
        managed.last_used = time.monotonic()
        if keep_alive_override is not None:
            managed.keep_alive_s = keep_alive_override
        if managed.active == 0:
            managed.idle.set()
            if managed.keep_alive_s == 0 and not managed.pinned:
                self.spawn(self._residency.unload_if_idle(managed, 0.0))

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
                        await self._residency.unload_if_idle(managed, managed.keep_alive_s)
                    except Exception:
                        log.exception("idle unload failed", extra={"model": managed.spec.name})

    def spawn(self, coro: object) -> None:
        """Run ``coro`` in the background; :meth:`close` waits for it."""
        spawned = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._background.add(spawned)
        spawned.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Refuse new leases and loads, stop the reaper and wait for the background work."""
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
