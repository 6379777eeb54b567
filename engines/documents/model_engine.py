"""What the model-based document engines (LayoutLMv3, Donut) share: sources, memory, questions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from engines.base import Engine, ModelSpec
from engines.device import torch_module_memory
from engines.documents.options import DocumentModelOptions
from engines.errors import InputTooLongError, InvalidArgumentError, ModelLoadError, TaskNotSupportedError
from engines.process_lane import FairTurns, take_turn
from engines.reasons import Reason
from engines.sources import path_size_bytes, resolve_source
from engines.types import MemoryUsage, Task


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of ``logits`` along ``axis`` in float64 (``-inf`` entries get probability 0)."""
    shifted = np.asarray(logits, dtype=np.float64)
    shifted = shifted - np.max(shifted, axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / np.sum(exp, axis=axis, keepdims=True)


def read_model_config(source: str) -> dict[str, Any] | None:
    """The ``config.json`` of a catalog source without loading weights or using the network.

    A local folder is read directly; a hub id only when the file is in the local hub cache.

    Returns:
        The parsed config, or None when it is not available offline (checked again at load).

    Raises:
        ModelLoadError: a local source with no readable ``config.json`` (MODEL_SOURCE_INVALID).

    """
    resolved = resolve_source(source)
    if resolved.path is not None:
        path = resolved.path / "config.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(
                f"model source {source!r} has no readable config.json ({type(exc).__name__})",
                reason=Reason.MODEL_SOURCE_INVALID,
            ) from None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(resolved.hub_id), "config.json")
    except Exception:  # an id the hub library refuses: the loader reports it at load
        return None
    if not isinstance(cached, str):
        return None
    try:
        return json.loads(Path(cached).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


DocumentModelOptionsT = TypeVar("DocumentModelOptionsT", bound=DocumentModelOptions)
T = TypeVar("T")


class DocumentModelEngine(Engine[DocumentModelOptionsT]):
    """A torch document model: ``self.model`` and ``self.processor`` on ``self.device``.

    Subclasses implement :meth:`load` and the task methods; memory accounting, unloading, the
    size estimate and the question checks are shared.
    """

    runs_torch = True
    options_model = DocumentModelOptions
    model: Any = None
    processor: Any = None
    served: ClassVar[frozenset[Task]] = frozenset()

    @staticmethod
    def refuse_unserved(spec: ModelSpec, served: frozenset[Task], what: str) -> None:
        """Raise when ``spec`` lists a task the model at its source cannot do.

        Args:
            spec: the catalog entry.
            served: the tasks the model's head or prompts can do.
            what: the model's kind for the message (``LayoutLMv3ForTokenClassification``).

        Raises:
            ModelLoadError: reason MODEL_SOURCE_INVALID, naming the tasks it can serve.

        """
        missing = [task for task in spec.tasks if task not in served]
        if missing:
            can = ", ".join(sorted(t.value for t in served)) or "none"
            raise ModelLoadError(
                f"model {spec.name!r} is a {what}, which cannot serve "
                f"{', '.join(t.value for t in missing)} (it serves: {can}); fix the catalog entry's tasks",
                reason=Reason.MODEL_SOURCE_INVALID,
                model=spec.name,
            )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Callers take fair turns for page jobs on the lane (engines.process_lane.take_turn).
        self.turns = FairTurns(self.spec.name)

    async def page_job(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the lane in the caller's fair turn (priority class, then key)."""
        return await take_turn(self.turns, lambda: self.executor.run(function, *args))

    def require(self, task: Task) -> None:
        """Raise TaskNotSupportedError unless the loaded model serves ``task``."""
        if task not in self.served:
            raise TaskNotSupportedError(
                f"model {self.spec.name!r} does not serve {task.value}", model=self.spec.name, task=task.value
            )

    def check_question(self, question: str) -> str:
        """``question`` stripped, once it is non-empty and within ``max_question_chars``.

        Raises:
            InvalidArgumentError: an empty question (field ``question``).
            InputTooLongError: more characters than the catalog option ``max_question_chars``.

        """
        text = question.strip()
        if not text:
            raise InvalidArgumentError("question must not be empty", field="question")
        limit = self.options.max_question_chars
        if len(text) > limit:
            raise InputTooLongError(
                f"question has {len(text)} characters, more than model {self.spec.name!r} accepts ({limit})",
                field="question",
                max_chars=limit,
                model=self.spec.name,
            )
        return text

    def estimated_load_bytes(self) -> int:
        """Size of the model folder on disk (a local source), else unknown."""
        resolved = resolve_source(self.spec.source)
        return path_size_bytes(resolved.path) if resolved.path else 0

    def unload(self) -> None:
        """Drop the model and the processor."""
        self.model = None
        self.processor = None

    def memory_usage(self) -> MemoryUsage:
        """Parameter and buffer bytes of ``self.model`` by device."""
        if self.model is None:
            return MemoryUsage()
        ram, vram = torch_module_memory(self.model)
        return MemoryUsage(ram_bytes=ram, vram_bytes=vram)
