"""Model lifecycle: keep-alive, concurrent first loads, status and memory, load/unload, pinning."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import model_service_pb2 as m

from tests.conftest import error_info


async def status_of(models, name: str) -> m.Model:
    return (await models.GetModel(m.GetModelRequest(name=name))).model


async def wait_for_status(models, name: str, status: int, timeout_s: float = 10.0) -> m.Model:
    deadline = time.monotonic() + timeout_s
    while True:
        model = await status_of(models, name)
        if model.status == status or time.monotonic() > deadline:
            return model
        await asyncio.sleep(0.05)


async def embed_once(inference, model: str, keep_alive: str = "") -> None:
    response = await inference.Embed(
        e.EmbedRequest(model=model, inputs=["keep alive"], keep_alive=keep_alive)
    )
    assert len(response.embeddings) == 1


async def test_keep_alive_zero_unloads_after_the_request(inference, models):
    await embed_once(inference, "minilm-ephemeral")
    model = await wait_for_status(models, "minilm-ephemeral", m.MODEL_STATUS_NOT_LOADED)
    assert model.status == m.MODEL_STATUS_NOT_LOADED
    assert model.memory.ram_bytes == 0


async def test_keep_alive_forever_stays_loaded(inference, models, server):
    await embed_once(inference, "minilm-forever")
    await asyncio.sleep(5 * server.settings.reap_interval_s)
    model = await status_of(models, "minilm-forever")
    assert model.status == m.MODEL_STATUS_READY
    assert model.keep_alive == "-1"
    assert model.expires_at_unix_ms == 0


async def test_short_keep_alive_expires_and_per_request_override_wins(inference, models):
    await embed_once(inference, "minilm-short")
    model = await wait_for_status(models, "minilm-short", m.MODEL_STATUS_NOT_LOADED)
    assert model.status == m.MODEL_STATUS_NOT_LOADED
    # The same model with a request-level keep_alive of -1 stays past its configured 300ms.
    await embed_once(inference, "minilm-short", keep_alive="-1")
    await asyncio.sleep(1.0)
    assert (await status_of(models, "minilm-short")).status == m.MODEL_STATUS_READY
    await models.UnloadModel(m.UnloadModelRequest(name="minilm-short"))


async def test_eight_concurrent_first_requests_load_once(inference, server):
    managed = server.manager.get("minilm-concurrent")
    assert managed.load_count == 0
    await asyncio.gather(*(embed_once(inference, "minilm-concurrent") for _ in range(8)))
    assert managed.load_count == 1


async def test_list_models_reports_status_device_and_memory(inference, models):
    await embed_once(inference, "all-minilm-l6-v2")
    listing = await models.ListModels(m.ListModelsRequest())
    by_name = {model.name: model for model in listing.models}
    loaded = by_name["all-minilm-l6-v2"]
    assert loaded.status == m.MODEL_STATUS_READY
    assert loaded.status_detail == "Running: sentence_transformers on cpu"
    assert loaded.device == "cpu"
    assert 80_000_000 < loaded.memory.ram_bytes < 200_000_000  # 22.7M fp32 parameters
    assert loaded.loaded_at_unix_ms > 0
    assert by_name["tiny-ctx-chat"].status in (m.MODEL_STATUS_NOT_LOADED, m.MODEL_STATUS_READY)
    only_embed = await models.ListModels(m.ListModelsRequest(task=m.TASK_EMBED))
    assert all(m.TASK_EMBED in model.tasks for model in only_embed.models)


async def test_load_and_unload_model(models):
    loaded = (await models.LoadModel(m.LoadModelRequest(name="minilm-concurrent", keep_alive="10m"))).model
    assert loaded.status == m.MODEL_STATUS_READY
    assert loaded.keep_alive == "10m0s"
    unloaded = (await models.UnloadModel(m.UnloadModelRequest(name="minilm-concurrent"))).model
    assert unloaded.status == m.MODEL_STATUS_NOT_LOADED
    assert unloaded.memory.ram_bytes == 0


async def test_pinned_model_refuses_unload_without_force(models):
    await models.LoadModel(m.LoadModelRequest(name="minilm-pinned"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await models.UnloadModel(m.UnloadModelRequest(name="minilm-pinned"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == "MODEL_PINNED"
    forced = (await models.UnloadModel(m.UnloadModelRequest(name="minilm-pinned", force=True))).model
    assert forced.status == m.MODEL_STATUS_NOT_LOADED


async def test_unload_releases_the_engine(models, server):
    import gc
    import weakref

    managed = server.manager.get("minilm-concurrent")
    await models.LoadModel(m.LoadModelRequest(name="minilm-concurrent"))
    assert managed.engine is not None
    engine = weakref.ref(managed.engine)
    assert (await status_of(models, "minilm-concurrent")).memory.ram_bytes > 0
    unloaded = (await models.UnloadModel(m.UnloadModelRequest(name="minilm-concurrent"))).model
    assert unloaded.status == m.MODEL_STATUS_NOT_LOADED
    assert unloaded.memory.ram_bytes == 0
    gc.collect()
    # Nothing holds the engine (and with it the weights) once the model is unloaded.
    assert engine() is None, gc.get_referrers(engine())
