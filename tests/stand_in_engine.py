"""A do-nothing engine for tests that isolate the model manager from real models."""

from __future__ import annotations

from engines.base import Engine
from engines.types import MemoryUsage, Task


class StandInEngine(Engine):
    """Loads and unloads nothing, on the CPU; subclasses add the behaviour a test observes."""

    backend = "stand_in"
    tasks = frozenset({Task.EMBED})

    def load(self) -> None:
        pass

    def unload(self) -> None:
        pass

    def memory_usage(self) -> MemoryUsage:
        return MemoryUsage()

    @classmethod
    def select_device(cls, preference: str) -> str:
        return "cpu"
