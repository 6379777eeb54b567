"""Memory residency: room made in the memory budget for a load, evictions, and unloads.

A load reserves its estimate in the budget (:class:`service.memory_budget.MemoryBudget`) before it
starts, evicting idle models first when it does not fit; an unload drains the engine, unloads it on
its lane and gives its memory back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from collections.abc import Mapping

from engines.base import Engine
from engines.device import available_memory_bytes, release_device_memory
from engines.errors import ResourceExhaustedError
from engines.executor import ExecutorPool
from engines.reasons import Reason
from engines.types import MemoryUsage
from service import metrics
from service.garbage_collector import reclaim_if_cyclic
from service.memory_budget import RAM_POOL, LoadedModel, MemoryBudget, pool_bytes
from service.model_manager.managed import ManagedModel, ModelState
from service.settings import Settings

# The package's logger: the manager's records keep one logger name whichever module writes them.
log = logging.getLogger("service.model_manager")

# Plans of a load's room at most, this far apart (seconds): a model picked to evict that gets a
# request or is being unloaded first is skipped, and the room planned again
# (at most ``MAKE_ROOM_ATTEMPTS x MAKE_ROOM_RETRY_S``).
MAKE_ROOM_ATTEMPTS = 10
MAKE_ROOM_RETRY_S = 0.1

# Longest wait for an engine's own work (a batch loop releasing cancelled sequences) before unload;
# one step of a batch is far shorter, so only a wedged device job reaches it.
DRAIN_TIMEOUT_S = 10.0


def _release_engine(engine: weakref.ref, name: str, device: str) -> None:
    """After an unload (blocking, on the engine's lane), give the engine's memory back.

    First end the engine if a cycle still holds it (:func:`reclaim_if_cyclic`; before the cache
    is emptied, since the cycle may hold its tensors), then return the device's cached blocks.
    """
    reclaim_if_cyclic(engine, name)
    release_device_memory(device)


class Residency:
    """Which models hold memory: the budget's reservations, evictions and unloads.

    Args:
        models: the manager's managed models by name (the same dict the manager reads).
        settings: server settings (memory budgets, headroom, most models loaded).
        executors: the lanes engines run on; an unloaded model's lane is retired.

    """

    def __init__(
        self, models: Mapping[str, ManagedModel], settings: Settings, executors: ExecutorPool
    ) -> None:
        self._models = models
        self._executors = executors
        self.budget = MemoryBudget(
            budgets={RAM_POOL: settings.memory_budget_bytes},
            device_budget=settings.device_memory_budget_bytes,
            headroom=settings.memory_headroom_bytes,
            max_loaded=settings.max_loaded_models,
        )
        # Held while a load is checked against the budget and its room made: two loads cannot
        # both pass the check, nor pick the same model to evict.
        self._budget_lock = asyncio.Lock()

    def _loaded_models(self, exclude: ManagedModel) -> list[LoadedModel]:
        """The budget's view of every model holding memory, except ``exclude`` (the one loading).

        A model holds the larger of its measured use and its estimate (a backend that cannot
        measure reports 0, and evicting it still frees what it holds). Models unloading still hold
        their memory and cannot be evicted again.
        """
        loaded = []
        for managed in self._models.values():
            if managed is exclude or managed.state not in (ModelState.READY, ModelState.UNLOADING):
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

    async def make_room(self, managed: ManagedModel, engine: Engine) -> None:
        """Reserve the budget for ``engine``'s load, evicting idle models first if it does not fit.

        The reservation lasts until the load ends (the loader gives it back with
        ``budget.release``). An estimate of 0 bytes (a backend that cannot tell) is checked
        against the count limit only.

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
                plan = self.budget.plan(name, needed, free, self._loaded_models(managed))
                evicted = [await self._evict(victim, cause, name) for victim, cause in plan.victims]
                if all(evicted):
                    self.budget.reserve(name, needed)
                    # Kept only now: a refused load's estimate (its options) is not the entry's.
                    managed.required = estimate
                    return
                await asyncio.sleep(MAKE_ROOM_RETRY_S)  # an unload under way ends, or a request does
        raise ResourceExhaustedError(
            f"cannot make room for model {name!r}: the idle models picked to unload kept getting "
            "requests; retry later",
            reason=Reason.INSUFFICIENT_MEMORY,
            model=name,
        )

    async def _evict(self, name: str, cause: str, for_model: str) -> bool:
        """Unload the idle model ``name`` so that ``for_model`` fits; False if it is in use by now.

        ``cause`` is the budget's (``EVICTED_FOR_*``: the ``reason`` label of the eviction metric).
        """
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
            await self.unload_locked(managed, "evicted")
            managed.unloaded_because = f"evicted to make room for {for_model!r} ({cause})"
        metrics.model_evicted(name, cause)
        log.info("evicted model", extra={"model": name, "for_model": for_model, "reason": cause})
        return True

    async def unload_if_idle(self, managed: ManagedModel, idle_for_s: float) -> None:
        """Unload ``managed`` if it is loaded and has had no request for ``idle_for_s`` seconds."""
        async with managed.lock:
            idle = time.monotonic() - managed.last_used
            if managed.state is ModelState.READY and managed.active == 0 and idle >= idle_for_s:
                await self.unload_locked(managed, "idle")

    async def unload_locked(self, managed: ManagedModel, cause: str) -> None:
        """Unload a READY model, its lock held (``cause``: idle, explicit, evicted or shutdown; metrics)."""
        engine = managed.engine
        if engine is None or managed.state is not ModelState.READY:
            return
        metrics.model_unloaded(managed.spec.name, cause)
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
