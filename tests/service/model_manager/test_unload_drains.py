"""Unloading waits for an engine's own work to end.

A cancelled stream leaves its sequence for the generation batch loop to release at its next
step; an unload that ran before that pulled the llama.cpp context from under the release
(``AttributeError: 'NoneType' object has no attribute 'memory'`` in a shutdown log). The manager
now awaits ``Engine.drain`` (for generation engines: the scheduler's loop stopping) before
``unload``. A stand-in engine makes the order observable; the real loop is exercised by the
shutdown tests.
"""

from __future__ import annotations

import asyncio

from engines.base import ModelSpec
from engines.executor import ExecutorPool
from engines.types import Task
from service.model_manager import ModelManager
from service.settings import Settings
from tests.stand_in_engine import StandInEngine


class _BusyEngine(StandInEngine):
    """An engine with work of its own that ends when the test says so."""

    backend = "busy"
    events: list[str]
    release: asyncio.Event

    def load(self) -> None:
        self.events.append("load")

    def unload(self) -> None:
        self.events.append("unload")

    async def drain(self) -> None:
        await self.release.wait()
        self.events.append("drained")


async def test_unload_waits_for_the_engine_to_drain(tmp_path):
    _BusyEngine.events = []
    _BusyEngine.release = asyncio.Event()
    spec = ModelSpec(name="busy", backend="busy", tasks=(Task.EMBED,), source="x")
    executors = ExecutorPool()
    manager = ModelManager(
        {"busy": spec}, Settings(data_dir=tmp_path), executors, engine_factory=lambda _: _BusyEngine
    )
    try:
        await manager.load("busy")
        unloading = asyncio.create_task(manager.unload("busy"))
        await asyncio.sleep(0.2)
        assert _BusyEngine.events == ["load"], "unload ran while the engine still had work"
        _BusyEngine.release.set()
        await unloading
        assert _BusyEngine.events == ["load", "drained", "unload"]
    finally:
        _BusyEngine.release.set()
        await manager.close()
        executors.shutdown(wait=True)
