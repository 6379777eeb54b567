"""The memory budget: whether a model fits, which idle models make room for it, and reservations.

A *pool* is a memory a model holds bytes in: host RAM (``"ram"``) and each accelerator by its device
name (``"cuda:0"``, ``"mps"``). A load needs bytes in one or more pools
(:meth:`engines.base.Engine.required_memory`: RAM and, off the CPU, its device). In each pool the
bytes a load may take are the smaller of

* what is free now (``free``, measured: the cgroup/host limit on the CPU, the device's free memory
  elsewhere) minus ``headroom`` minus the reservations of other loads under way, and
* with a budget set for the pool, the budget minus what loaded models hold (their measured use)
  minus those reservations.

When a load does not fit, idle models are evicted, least recently used first, until it fits: never a
pinned model, never one with requests in flight or queued, and only models that hold bytes in a pool
that is short (evicting a CPU model frees no GPU memory). The optional count limit
(``max_loaded_models``, as Ollama's ``OLLAMA_MAX_LOADED_MODELS``) evicts the same way. The plan is
pure bookkeeping; :class:`service.model_manager.ModelManager` measures, evicts and reserves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engines.errors import ResourceExhaustedError
from engines.reasons import Reason
from engines.types import MemoryUsage

RAM_POOL = "ram"

#: Why a model was evicted (``ur_model_evictions_total{reason}``).
EVICTED_FOR_MEMORY = "memory"
EVICTED_FOR_COUNT = "max_loaded_models"


def pool_bytes(device: str, usage: MemoryUsage) -> dict[str, int]:
    """``usage`` by pool: RAM under ``"ram"``, device memory under ``device`` (none on the CPU)."""
    pools = {RAM_POOL: max(0, usage.ram_bytes)}
    if device != "cpu" and usage.vram_bytes > 0:
        pools[device] = usage.vram_bytes
    return pools


@dataclass(frozen=True)
class LoadedModel:
    """What the budget knows of one loaded model.

    Attributes:
        name: catalog name.
        held: bytes by pool (:func:`pool_bytes` of its measured use).
        last_used: monotonic seconds of its last request (the LRU order).
        busy: requests in flight or queued: never evicted.
        pinned: pinned (``keep_alive: -1`` or ``pinned``): never evicted.

    """

    name: str
    held: Mapping[str, int]
    last_used: float
    busy: bool = False
    pinned: bool = False


@dataclass(frozen=True)
class EvictionPlan:
    """Idle models to evict, in order, as ``(name, reason)`` pairs (reason: ``EVICTED_FOR_*``)."""

    victims: tuple[tuple[str, str], ...] = ()


@dataclass
class MemoryBudget:
    """Budgets by pool, the reserve kept free, the count limit, and the loads under way.

    Args:
        budgets: most bytes the loaded models may hold by pool (a missing pool or 0: no budget
            beyond free memory). Pools of accelerators not named here use ``device_budget``.
        device_budget: the budget of every accelerator pool not in ``budgets`` (0: none).
        headroom: bytes kept free in every pool (setting ``memory_headroom_bytes``).
        max_loaded: most models loaded at once, loads under way included (0: no limit).

    """

    budgets: Mapping[str, int] = field(default_factory=dict)
    device_budget: int = 0
    headroom: int = 0
    max_loaded: int = 0
    reserved: dict[str, dict[str, int]] = field(default_factory=dict)

    def budget_of(self, pool: str) -> int:
        """The pool's budget in bytes (0: none)."""
        if pool in self.budgets:
            return self.budgets[pool]
        return 0 if pool == RAM_POOL else self.device_budget

    def reserve(self, name: str, needed: Mapping[str, int]) -> None:
        """Hold ``needed`` for the load of ``name`` until :meth:`release` (after it loads or fails)."""
        self.reserved[name] = dict(needed)

    def release(self, name: str) -> None:
        """Drop the reservation of ``name`` (no-op without one)."""
        self.reserved.pop(name, None)

    def _reserved(self, pool: str, excluding: str) -> int:
        return sum(needed.get(pool, 0) for name, needed in self.reserved.items() if name != excluding)

    def available(
        self, name: str, needed: Mapping[str, int], free: Mapping[str, int], loaded: Sequence[LoadedModel]
    ) -> dict[str, int]:
        """Bytes a load of ``name`` may take now in each pool it needs (may be negative)."""
        room = {}
        for pool in needed:
            reserved = self._reserved(pool, name)
            bytes_free = free.get(pool, 0) - self.headroom - reserved
            budget = self.budget_of(pool)
            if budget:
                held = sum(model.held.get(pool, 0) for model in loaded)
                bytes_free = min(bytes_free, budget - held - reserved)
            room[pool] = bytes_free
        return room

    def plan(
        self, name: str, needed: Mapping[str, int], free: Mapping[str, int], loaded: Sequence[LoadedModel]
    ) -> EvictionPlan:
        """The idle models to evict so that a load of ``name`` fits (none when it fits as it is).

        Args:
            name: the model to load (its own reservation, if any, is not counted against it).
            needed: bytes by pool it will hold (:func:`pool_bytes` of its estimate).
            free: bytes free now by pool, measured.
            loaded: the loaded models (``name`` itself is not among them).

        Raises:
            ResourceExhaustedError: it cannot fit even with every evictable model gone (reason
                INSUFFICIENT_MEMORY with ``needed_bytes``, ``free_bytes`` (after evicting all idle
                models), ``busy_bytes``, ``pinned_bytes`` and ``pool``; or reason
                MAX_LOADED_MODELS with ``max_loaded_models``).

        """
        needed = {pool: bytes_needed for pool, bytes_needed in needed.items() if bytes_needed > 0}
        room = self.available(name, needed, free, loaded)
        # Loads under way count against the limit too: two loads cannot both take the last place.
        excess = (
            len(loaded) + len([n for n in self.reserved if n != name]) + 1 - self.max_loaded
            if self.max_loaded
            else 0
        )
        victims: list[tuple[str, str]] = []
        for model in sorted(loaded, key=lambda m: m.last_used):
            short = [pool for pool, bytes_needed in needed.items() if room[pool] < bytes_needed]
            if not short and excess <= 0:
                break
            if model.busy or model.pinned:
                continue
            if short and any(model.held.get(pool, 0) > 0 for pool in short):
                reason = EVICTED_FOR_MEMORY
            elif excess > 0:
                reason = EVICTED_FOR_COUNT
            else:
                continue  # frees nothing where it is short
            victims.append((model.name, reason))
            excess -= 1
            for pool in room:
                room[pool] += model.held.get(pool, 0)
        short = [pool for pool, bytes_needed in needed.items() if room[pool] < bytes_needed]
        if short:
            pool = short[0]
            busy = sum(m.held.get(pool, 0) for m in loaded if m.busy)
            pinned = sum(m.held.get(pool, 0) for m in loaded if m.pinned and not m.busy)
            raise ResourceExhaustedError(
                f"not enough memory to load model {name!r}: it needs about {needed[pool]} bytes of "
                f"{_pool_text(pool)}, {max(0, room[pool])} bytes are free with every idle model "
                f"unloaded; models in use hold {busy} bytes and pinned models {pinned}",
                reason=Reason.INSUFFICIENT_MEMORY,
                model=name,
                pool=pool,
                needed_bytes=needed[pool],
                free_bytes=max(0, room[pool]),
                busy_bytes=busy,
                pinned_bytes=pinned,
            )
        if excess > 0:
            raise ResourceExhaustedError(
                f"{self.max_loaded} models are loaded or loading and none is idle and unpinned "
                f"(setting max_loaded_models); cannot load model {name!r} now",
                reason=Reason.MAX_LOADED_MODELS,
                model=name,
                max_loaded_models=self.max_loaded,
            )
        return EvictionPlan(tuple(victims))


def _pool_text(pool: str) -> str:
    return "host RAM" if pool == RAM_POOL else f"{pool} memory"
