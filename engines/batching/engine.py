"""Base class of the batched encoder engines (embeddings, cross-encoders, classifiers, token classifiers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engines.base import Engine, ModelSpec
from engines.batching.batcher import BatchingConfig, DynamicBatcher
from engines.device import torch_module_memory
from engines.sources import path_size_bytes, resolve_source
from engines.types import MemoryUsage


class BatchedEncoderEngine(Engine):
    """An engine whose torch model is ``self.model`` and whose forward passes go through ``self.batcher``.

    Subclasses implement :meth:`load`, which sets ``self.model`` and calls :meth:`make_batcher`;
    size estimate, memory accounting and unloading (batcher closed first, so queued callers get
    UNAVAILABLE instead of waiting) are shared.
    """

    model: Any = None
    batcher: DynamicBatcher | None = None
    runs_torch = True

    @classmethod
    def check_spec(cls, spec: ModelSpec) -> None:
        """The base checks plus the batching limits (see :meth:`Engine.check_spec`).

        Raises:
            ModelLoadError: see :meth:`Engine.check_spec`.
            InvalidArgumentError: an invalid option or batching limit.

        """
        super().check_spec(spec)
        BatchingConfig.from_options(spec.options)

    def estimated_load_bytes(self) -> int:
        """Size of the model folder on disk (a local source), else unknown."""
        resolved = resolve_source(self.spec.source)
        return path_size_bytes(resolved.path) if resolved.path else 0

    def make_batcher(self, run_batch: Callable[[list[Any]], Sequence[Any]]) -> DynamicBatcher:
        """A batcher with the catalog entry's limits (see :class:`BatchingConfig`) running ``run_batch``.

        Raises:
            InvalidArgumentError: an invalid batching option.

        """
        config = BatchingConfig.from_options(self.spec.options)
        return DynamicBatcher(run_batch, self.executor, config, name=self.spec.name)

    def unload(self) -> None:
        """Close the batcher and drop the model (and anything :meth:`release` drops)."""
        if self.batcher is not None:
            self.batcher.close()
        self.model = None
        self.release()

    def release(self) -> None:
        """Drop references besides ``self.model`` (override: tokenizers, pipelines)."""

    def memory_usage(self) -> MemoryUsage:
        """Parameter and buffer bytes of ``self.model`` by device."""
        if self.model is None:
            return MemoryUsage()
        ram, vram = torch_module_memory(self.model)
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram)
