"""The memory budget (``service/memory_budget.py``) and the manager's evictions, reservations and preloads.

The plan is tested as bookkeeping; the manager with stand-in engines whose size is their source
(MiB), so that the budget's decisions are exact; the evictions of real default models under a
budget, and preloading behind health, on the real server.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from engines.base import ModelSpec
from engines.capabilities import Embedder
from engines.errors import ResourceExhaustedError
from engines.executor import ExecutorPool
from engines.types import MemoryUsage, Task
from service.memory_budget import RAM_POOL, LoadedModel, MemoryBudget
from service.model_manager import ModelManager, ModelState
from service.server import INFERENCE_SERVICE, start_server
from service.settings import Settings
from tests.conftest import TEST_CATALOG
from tests.stand_in_engine import StandInEngine

MIB = 1 << 20


def loaded(name: str, mib: int, last_used: float, **flags) -> LoadedModel:
    return LoadedModel(name=name, held={RAM_POOL: mib * MIB}, last_used=last_used, **flags)


# -- the plan ------------------------------------------------------------------------------------


def test_a_load_that_fits_evicts_nothing():
    budget = MemoryBudget(budgets={RAM_POOL: 1000 * MIB})
    plan = budget.plan("new", {RAM_POOL: 300 * MIB}, {RAM_POOL: 10_000 * MIB}, [loaded("a", 600, 1.0)])
    assert plan.victims == ()


def test_idle_models_go_least_recently_used_first_and_only_as_many_as_needed():
    budget = MemoryBudget(budgets={RAM_POOL: 1000 * MIB})
    models = [loaded("newer", 300, 3.0), loaded("oldest", 300, 1.0), loaded("older", 300, 2.0)]
    plan = budget.plan("new", {RAM_POOL: 500 * MIB}, {RAM_POOL: 10_000 * MIB}, models)
    assert plan.victims == (("oldest", "memory"), ("older", "memory"))


def test_pinned_and_busy_models_are_never_evicted():
    budget = MemoryBudget(budgets={RAM_POOL: 1000 * MIB})
    models = [
        loaded("pinned", 300, 1.0, pinned=True),
        loaded("busy", 300, 2.0, busy=True),
        loaded("idle", 300, 3.0),
    ]
    plan = budget.plan("new", {RAM_POOL: 300 * MIB}, {RAM_POOL: 10_000 * MIB}, models)
    assert plan.victims == (("idle", "memory"),)


def test_a_load_that_cannot_fit_names_its_figures():
    budget = MemoryBudget(budgets={RAM_POOL: 1000 * MIB})
    models = [
        loaded("pinned", 300, 1.0, pinned=True),
        loaded("busy", 400, 2.0, busy=True),
        loaded("idle", 200, 3.0),
    ]
    with pytest.raises(ResourceExhaustedError) as caught:
        budget.plan("new", {RAM_POOL: 500 * MIB}, {RAM_POOL: 10_000 * MIB}, models)
    error = caught.value
    assert error.reason == "INSUFFICIENT_MEMORY"
    assert error.metadata["needed_bytes"] == str(500 * MIB)
    assert error.metadata["free_bytes"] == str(300 * MIB)  # 1000 - 300 pinned - 400 busy
    assert error.metadata["busy_bytes"] == str(400 * MIB)
    assert error.metadata["pinned_bytes"] == str(300 * MIB)
    assert "in use hold" in error.message


def test_free_memory_bounds_the_load_as_well_as_the_budget():
    # No budget: what is free now, less the headroom, is the limit; the idle model frees its bytes.
    budget = MemoryBudget(headroom=100 * MIB)
    plan = budget.plan("new", {RAM_POOL: 500 * MIB}, {RAM_POOL: 400 * MIB}, [loaded("idle", 300, 1.0)])
    assert plan.victims == (("idle", "memory"),)


def test_evicting_a_model_that_frees_nothing_where_it_is_short_is_not_done():
    budget = MemoryBudget(device_budget=1000 * MIB)
    on_cpu = loaded("cpu-model", 900, 1.0)
    on_gpu = LoadedModel("gpu-model", {RAM_POOL: 10 * MIB, "cuda:0": 900 * MIB}, 2.0)
    free = {RAM_POOL: 10_000 * MIB, "cuda:0": 10_000 * MIB}
    plan = budget.plan("new", {RAM_POOL: 1 * MIB, "cuda:0": 500 * MIB}, free, [on_cpu, on_gpu])
    assert plan.victims == (("gpu-model", "memory"),)


def test_reservations_of_loads_under_way_count_against_the_budget():
    budget = MemoryBudget(budgets={RAM_POOL: 1000 * MIB})
    budget.reserve("first", {RAM_POOL: 600 * MIB})
    with pytest.raises(ResourceExhaustedError):
        budget.plan("second", {RAM_POOL: 600 * MIB}, {RAM_POOL: 10_000 * MIB}, [])
    budget.release("first")
    assert budget.plan("second", {RAM_POOL: 600 * MIB}, {RAM_POOL: 10_000 * MIB}, []).victims == ()


def test_the_count_limit_evicts_the_least_recently_used_idle_model():
    budget = MemoryBudget(max_loaded=2)
    models = [loaded("recent", 1, 2.0), loaded("old", 1, 1.0)]
    plan = budget.plan("new", {RAM_POOL: 1 * MIB}, {RAM_POOL: 10_000 * MIB}, models)
    assert plan.victims == (("old", "max_loaded_models"),)
    with pytest.raises(ResourceExhaustedError) as caught:
        budget.plan("new", {}, {}, [loaded("a", 1, 1.0, busy=True), loaded("b", 1, 2.0, pinned=True)])
    assert caught.value.reason == "MAX_LOADED_MODELS"


# -- the manager, with sized stand-ins ----------------------------------------------------------

#: Loads of the model named ``gated`` wait on this (set by the test); ``LOADING`` is set first.
GATE = threading.Event()
LOADING = threading.Event()


class SizedEngine(StandInEngine):
    """Holds as many MiB as its source says, estimated and measured alike, in 4 GiB of free RAM."""

    backend = "sized"

    def required_memory(self) -> MemoryUsage:
        return MemoryUsage(ram_bytes=int(self.spec.source) * MIB)

    def memory_usage(self) -> MemoryUsage:
        return self.required_memory()

    def free_memory_bytes(self) -> int:
        return 4096 * MIB

    def load(self) -> None:
        if self.spec.name.startswith("gated"):
            self.report_progress("converting")
            LOADING.set()
            GATE.wait(timeout=30)

    async def embed(self, request):
        raise AssertionError("not called")


def sized_catalog(**sizes: int) -> dict[str, ModelSpec]:
    return {
        name: ModelSpec(name=name, backend="sized", tasks=(Task.EMBED,), source=str(mib))
        for name, mib in sizes.items()
    }


@pytest.fixture
async def make_manager(tmp_path):
    made: list[tuple[ModelManager, ExecutorPool]] = []
    GATE.clear()
    LOADING.clear()

    def make(catalog: dict[str, ModelSpec], **settings) -> ModelManager:
        executors = ExecutorPool()
        options = {"memory_headroom_bytes": 0, "data_dir": tmp_path, **settings}
        manager = ModelManager(catalog, Settings(**options), executors, engine_factory=lambda _: SizedEngine)
        made.append((manager, executors))
        return manager

    yield make
    GATE.set()
    for manager, executors in made:
        await manager.close()
        executors.shutdown(wait=True)


def evictions(model: str, reason: str) -> float:
    return REGISTRY.get_sample_value("ur_model_evictions_total", {"model": model, "reason": reason}) or 0.0


def states(manager: ModelManager) -> dict[str, str]:
    return {managed.spec.name: managed.state.name for managed in manager.models()}


async def test_a_load_past_the_budget_evicts_the_least_recently_used_idle_model(make_manager):
    manager = make_manager(sized_catalog(a=400, b=400, c=400), memory_budget_bytes=1000 * MIB)
    before = evictions("a", "memory")
    await manager.load("a")
    await manager.load("b")
    async with manager.acquire("a", Embedder):  # a is now the more recently used
        pass
    await manager.load("c")
    assert states(manager) == {"a": "READY", "b": "NOT_LOADED", "c": "READY"}
    assert manager.get("b").status_detail == "Not Loaded: evicted to make room for 'c' (memory)"
    await manager.load("b")
    assert states(manager) == {"a": "NOT_LOADED", "b": "READY", "c": "READY"}
    assert evictions("a", "memory") == before + 1
    assert manager.get("b").status_detail.startswith("Running")


async def test_pinned_and_kept_forever_models_stay_and_the_load_is_refused_with_figures(make_manager):
    manager = make_manager(sized_catalog(a=400, b=400, c=400), memory_budget_bytes=1000 * MIB)
    await manager.load("a", pinned=True)
    await manager.load("b", keep_alive="-1")
    with pytest.raises(ResourceExhaustedError) as caught:
        await manager.load("c")
    assert caught.value.reason == "INSUFFICIENT_MEMORY"
    assert caught.value.metadata["pinned_bytes"] == str(800 * MIB)
    assert caught.value.metadata["free_bytes"] == str(200 * MIB)
    assert states(manager) == {"a": "READY", "b": "READY", "c": "ERROR"}


async def test_a_model_with_a_request_in_flight_is_not_evicted(make_manager):
    manager = make_manager(sized_catalog(a=400, b=400, c=400), memory_budget_bytes=1000 * MIB)
    await manager.load("b")
    async with manager.acquire("a", Embedder):  # a is the newer but busy; b, idle, goes
        await manager.load("c")
        assert states(manager) == {"a": "READY", "b": "NOT_LOADED", "c": "READY"}
        async with manager.acquire("c", Embedder):
            with pytest.raises(ResourceExhaustedError) as caught:
                await manager.load("b")
    assert caught.value.metadata["busy_bytes"] == str(800 * MIB)


async def test_two_concurrent_loads_cannot_both_take_the_same_room(make_manager):
    manager = make_manager(sized_catalog(gated=600, other=600), memory_budget_bytes=1000 * MIB)
    first = asyncio.create_task(manager.load("gated"))
    assert await asyncio.to_thread(LOADING.wait, 10), "the first load never started"
    with pytest.raises(ResourceExhaustedError) as caught:
        await manager.load("other")  # the first holds its reservation; a loading model is not evictable
    assert caught.value.reason == "INSUFFICIENT_MEMORY"
    GATE.set()
    await first
    assert states(manager) == {"gated": "READY", "other": "ERROR"}


async def test_the_count_limit_evicts_for_max_loaded_models(make_manager):
    manager = make_manager(sized_catalog(a=1, b=1, c=1), max_loaded_models=2)
    before = evictions("a", "max_loaded_models")
    for name in ("a", "b", "c"):
        await manager.load(name)
    assert states(manager) == {"a": "NOT_LOADED", "b": "READY", "c": "READY"}
    assert evictions("a", "max_loaded_models") == before + 1
    assert "(max_loaded_models)" in manager.get("a").status_detail


async def test_preload_names_come_from_the_catalog_then_the_setting(make_manager):
    catalog = sized_catalog(a=1, b=1, c=1)
    catalog["b"] = ModelSpec(name="b", backend="sized", tasks=(Task.EMBED,), source="1", preload=True)
    manager = make_manager(catalog, preload=["c", "b"])
    assert manager.preload_names() == ["b", "c"]
    await manager.preload(manager.preload_names())
    assert states(manager) == {"a": "NOT_LOADED", "b": "READY", "c": "READY"}
    with pytest.raises(ValueError, match="UR_PRELOAD names model 'nope', which is not in the catalog"):
        make_manager(catalog, preload=["nope"]).preload_names()


def test_the_preload_setting_reads_comma_separated_names(monkeypatch):
    monkeypatch.setenv("UR_PRELOAD", " chat , embed,,")
    assert Settings().preload == ["chat", "embed"]


async def test_the_estimate_is_known_before_a_load_and_the_status_follows_the_load(make_manager):
    manager = make_manager(sized_catalog(gated=300))
    assert await manager.required_memory("gated") == MemoryUsage(ram_bytes=300 * MIB)
    assert manager.get("gated").state is ModelState.NOT_LOADED
    seen: list[str] = []

    async def watch() -> None:
        async for managed in manager.watch("gated", loading=load):
            seen.append(managed.status_detail)

    load = asyncio.ensure_future(manager.load("gated"))
    watching = asyncio.create_task(watch())
    assert await asyncio.to_thread(LOADING.wait, 10)
    for _ in range(100):  # the watch reads the status every 0.1 s: within 10 s
        if "Installing: converting" in seen:
            break
        await asyncio.sleep(0.1)
    GATE.set()
    await load
    await asyncio.wait_for(watching, 10)
    assert seen[0] in ("Not Loaded", "Loading")
    assert "Installing: converting" in seen
    assert seen[-1] == "Running: sized on cpu"
    assert seen.index("Installing: converting") < len(seen) - 1


# -- real models on the real server ----------------------------------------------------------------


BUDGET_MODELS = ("all-minilm-l6-v2", "minilm-rerank", "smollm2-135m-instruct")


@pytest.fixture
async def budget_server(tmp_path):
    """A server whose RAM budget holds the two larger of three default models, never all three.

    The budget is the sum of the two larger estimates: any two fit (each model's measured use is
    within its estimate's margin), three never do.
    """
    catalog = {"models": {name: TEST_CATALOG["models"][name] for name in BUDGET_MODELS}}
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    settings = Settings(
        grpc_port=0,
        catalog_path=path,
        data_dir=tmp_path / "data",
        reap_interval_s=0.1,
        memory_headroom_bytes=0,
    )
    probe = ModelManager({}, settings, ExecutorPool())
    sizes = []
    for name, entry in catalog["models"].items():
        spec = ModelSpec(
            name=name,
            backend=entry["backend"],
            tasks=tuple(Task(t) for t in entry["tasks"]),
            source=entry["source"],
            options=entry.get("options", {}),
        )
        probe._models[name] = probe._managed(spec)
        sizes.append((await probe.required_memory(name)).ram_bytes)
    budget = sum(sorted(sizes)[1:])
    running = await start_server(settings.model_copy(update={"memory_budget_bytes": budget}))
    yield running
    await running.stop(grace=1.0)


async def test_requests_cycling_over_three_models_in_a_budget_of_two_are_all_served(budget_server):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{budget_server.port}")
    inference, models = isg.InferenceServiceStub(channel), msg.ModelServiceStub(channel)
    before = sum(evictions(name, "memory") for name in BUDGET_MODELS)

    try:
        for _ in range(2):
            for name in BUDGET_MODELS:
                if name.startswith("smollm2"):
                    request = g.GenerateRequest(
                        model=name, prompt="Hi", parameters=g.GenerationParameters(max_tokens=2)
                    )
                    assert (await inference.Generate(request, timeout=120)).usage.completion_tokens >= 1
                else:
                    answer = await inference.Embed(e.EmbedRequest(model=name, inputs=["x"]), timeout=120)
                    assert len(answer.embeddings) == 1
                listed = await models.ListModels(m.ListModelsRequest(loaded_only=True))
                assert len(listed.models) <= 2, [model.name for model in listed.models]
    finally:
        await channel.close()
    assert sum(evictions(name, "memory") for name in BUDGET_MODELS) - before >= 4


async def test_preloads_hold_readiness_until_loaded_and_a_failed_one_is_an_error(tmp_path, monkeypatch):
    catalog = {
        "models": {
            "smollm2-135m-instruct": {**TEST_CATALOG["models"]["smollm2-135m-instruct"], "preload": True},
            "broken": {
                "backend": "llama_cpp",
                "tasks": ["generate"],
                "source": str(tmp_path / "missing.gguf"),
            },
        }
    }
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(catalog))
    gate = asyncio.Event()
    original = ModelManager.preload

    async def gated(self, names):
        await gate.wait()
        await original(self, names)

    monkeypatch.setattr(ModelManager, "preload", gated)
    settings = Settings(grpc_port=0, catalog_path=path, data_dir=tmp_path / "data", preload=["broken"])
    running = await start_server(settings)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    health = health_pb2_grpc.HealthStub(channel)

    async def status(service: str) -> int:
        return (await health.Check(health_pb2.HealthCheckRequest(service=service))).status

    try:
        assert await status(INFERENCE_SERVICE) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert await status("") == health_pb2.HealthCheckResponse.SERVING  # alive: probes never restart it
        assert await status("universal_runtime.v1.ModelService") == health_pb2.HealthCheckResponse.SERVING
        gate.set()
        watch = health.Watch(health_pb2.HealthCheckRequest(service=INFERENCE_SERVICE), timeout=120)
        async for answer in watch:
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                watch.cancel()
                break
        models = msg.ModelServiceStub(channel)
        chat = (await models.GetModel(m.GetModelRequest(name="smollm2-135m-instruct"))).model
        assert chat.status == m.MODEL_STATUS_READY  # loaded with no request
        broken = (await models.GetModel(m.GetModelRequest(name="broken"))).model
        assert broken.status == m.MODEL_STATUS_ERROR
        assert broken.status_detail.startswith("Error: ")
    finally:
        await channel.close()
        await running.stop(grace=0)


async def test_an_unknown_preload_stops_start_up(settings):
    with pytest.raises(ValueError, match="UR_PRELOAD names model 'no-such-model'"):
        await start_server(settings.model_copy(update={"preload": ["no-such-model"]}))
