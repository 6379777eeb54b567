"""A test backend that fails natively on request, to prove a backend's fault stays in its process.

Imported by the server and by its backend processes through the ``engine_modules`` setting. With
the option ``abort_on_load`` it dies while loading. Its ``embed`` answers 4-dimensional ones,
except for one input that names a way to die:

- ``ggml-abort``: llama.cpp's own ``ggml_abort`` (what a failed ``GGML_ASSERT`` calls): SIGABRT;
- ``segfault``: a read of address 0: SIGSEGV;
- ``exit``: ``os._exit(3)``.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np

from engines.base import Engine, ModelSpec
from engines.options import EngineOptions
from engines.registry import register_backend
from engines.types import EmbeddingRequest, EmbeddingResult, MemoryUsage, Task

BACKEND = "test_crashing_embedder"
DIMENSIONS = 4


def ggml_abort() -> None:
    """Call llama.cpp's ``ggml_abort``, as a failed ``GGML_ASSERT`` does (prints, then ``abort()``)."""
    import llama_cpp

    library = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    library.ggml_abort(b"crash_engine.py", 1, b"GGML_ASSERT(%s) failed", b"provoked by the test")


class CrashingOptions(EngineOptions):
    """``abort_on_load``: die by ``ggml_abort`` while loading (a model that can never load)."""

    abort_on_load: bool = False


@register_backend
class CrashingEmbedder(Engine[CrashingOptions]):
    """Embeds every input as ones; dies as its input names (see the module)."""

    backend = BACKEND
    tasks = frozenset({Task.EMBED})
    runs_in_backend_process = True

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """No source to check."""

    @classmethod
    def select_device(cls, preference: str) -> str:
        """Always the CPU."""
        return "cpu"

    def load(self) -> None:
        """Nothing to load, unless ``abort_on_load``: then ``ggml_abort``."""
        if self.options.abort_on_load:
            ggml_abort()

    def unload(self) -> None:
        """Nothing to unload."""

    def memory_usage(self) -> MemoryUsage:
        """Holds nothing."""
        return MemoryUsage()

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Ones of shape (len(inputs), 4), unless an input names a way to die."""
        if "ggml-abort" in request.inputs:
            ggml_abort()
        if "segfault" in request.inputs:
            ctypes.string_at(0)
        if "exit" in request.inputs:
            os._exit(3)
        return EmbeddingResult(np.ones((len(request.inputs), DIMENSIONS), np.float32), len(request.inputs))
