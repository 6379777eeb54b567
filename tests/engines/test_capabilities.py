"""Typed capabilities: every backend provides the capability of each task it declares, and
``ModelManager.acquire(name, Capability)`` refuses models that cannot serve it."""

from __future__ import annotations

import pytest

from engines.base import ModelSpec
from engines.capabilities import CAPABILITY_TASKS, Embedder, Reranker
from engines.errors import TaskNotSupportedError
from engines.executor import ExecutorPool
from engines.registry import registered_backends
from engines.types import EmbeddingRequest, EmbeddingResult, Task
from service.model_manager import ModelManager
from service.settings import Settings
from tests.stand_in_engine import StandInEngine

CAPABILITY_OF = {task: capability for capability, task in CAPABILITY_TASKS.items()}


def test_every_task_has_one_capability():
    assert set(CAPABILITY_OF) == set(Task)


@pytest.mark.parametrize("backend", sorted(registered_backends()))
def test_each_backend_provides_the_capabilities_of_its_tasks(backend):
    cls = registered_backends()[backend]
    for task in cls.tasks:
        assert issubclass(cls, CAPABILITY_OF[task]), f"{backend} declares {task} without its capability"


class _EmbedOnly(StandInEngine):
    """A stand-in engine (isolates the manager's checks from model loading)."""

    backend = "embed_only"

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        raise NotImplementedError


@pytest.fixture
async def manager(tmp_path):
    catalog = {
        "embedder": ModelSpec(name="embedder", backend="embed_only", tasks=(Task.EMBED,), source="x"),
        # A catalog mistake: the entry lists a task its backend cannot do.
        "mislabelled": ModelSpec(
            name="mislabelled", backend="embed_only", tasks=(Task.EMBED, Task.RERANK), source="x"
        ),
    }
    executors = ExecutorPool()
    manager = ModelManager(
        catalog, Settings(data_dir=tmp_path), executors, engine_factory=lambda _: _EmbedOnly
    )
    yield manager
    await manager.close()
    executors.shutdown(wait=True)


async def test_acquire_returns_the_engine_as_the_capability(manager):
    async with manager.acquire("embedder", Embedder) as embedder:
        assert isinstance(embedder, Embedder)
    assert manager.get("embedder").active == 0


async def test_acquire_refuses_a_task_the_model_does_not_list(manager):
    with pytest.raises(TaskNotSupportedError, match="cannot do rerank"):
        async with manager.acquire("embedder", Reranker):
            pass


async def test_acquire_refuses_an_engine_without_the_capability_and_releases_it(manager):
    with pytest.raises(TaskNotSupportedError, match="backend embed_only"):
        async with manager.acquire("mislabelled", Reranker):
            pass
    assert manager.get("mislabelled").active == 0
