"""The embedded default catalog's encoder entries point at installed packages and able backends.

Its MiniLM runs on OpenVINO on the CPU and stays in torch on a GPU.
"""

from __future__ import annotations

import logging

import pytest

from engines.encoder_runtime import ExportedModel, RuntimeChoice
from engines.errors import FailedPreconditionError
from engines.executor import DeviceExecutor, ExecutorPool
from engines.options import parse_options
from engines.registry import engine_class
from engines.sources import resolve_source
from engines.types import Task
from service.catalog import load_catalog
from service.model_manager import ModelManager
from service.settings import Settings

ENCODER_TASKS = {Task.EMBED, Task.RERANK, Task.CLASSIFY, Task.EXTRACT_ENTITIES}


def test_encoder_entries_resolve_and_their_backends_serve_their_tasks():
    catalog = load_catalog().specs
    encoders = {name: spec for name, spec in catalog.items() if set(spec.tasks) & ENCODER_TASKS}
    assert {"all-minilm-l6-v2", "intent-clinc150", "en-core-web-sm"} <= set(encoders)
    assert set(catalog["all-minilm-l6-v2"].tasks) == {Task.EMBED, Task.RERANK, Task.CLASSIFY}
    for spec in encoders.values():
        assert set(spec.tasks) <= engine_class(spec.backend).tasks
        assert resolve_source(spec.source).path is not None
        embedding_source = spec.options.get("embedding_source")
        if embedding_source:
            assert resolve_source(embedding_source).path is not None


def test_minilm_runs_on_openvino():
    spec = load_catalog().specs["all-minilm-l6-v2"]
    options = parse_options(engine_class(spec.backend).options_model, spec.options, backend=spec.backend)
    assert options.runtime_choice == RuntimeChoice("openvino", "none")


async def test_the_default_catalogs_minilm_loads_into_openvino(tmp_path):
    # From the converted cache of this machine (~/.cache): `make install` exported it already.
    try:
        RuntimeChoice("openvino").check_installed()
    except FailedPreconditionError as exc:
        pytest.skip(exc.message)
    executors = ExecutorPool()
    manager = ModelManager(load_catalog().specs, Settings(data_dir=tmp_path, device="cpu"), executors)
    try:
        managed = await manager.load("all-minilm-l6-v2")
        engine = managed.engine
        assert managed.device == "cpu"
        exported = engine.model[0].model  # the sentence-transformers Transformer module's model
        assert isinstance(exported, ExportedModel)
        assert "-openvino-" in exported.path.name and (exported.path / "model.xml").is_file()
        assert engine.runtime_bytes == exported.nbytes > 0
        vectors, tokens = await engine.encode(["The cat sat on the mat."])
        assert vectors.shape == (1, 384) and tokens > 0
    finally:
        await manager.close()
        executors.shutdown()


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_on_a_gpu_the_default_minilm_stays_in_torch(device, caplog):
    # No GPU needed: the engine is placed on the device and asked for its runtime before any load.
    spec = load_catalog().specs["all-minilm-l6-v2"]
    engine = engine_class(spec.backend)(spec, device, DeviceExecutor(device, spec.name))
    with caplog.at_level(logging.WARNING, logger="engines.batching.engine"):
        assert engine.export_for_runtime(object(), None, "last_hidden_state") is None
    assert (
        f"runtime openvino runs on the CPU only; model all-minilm-l6-v2 stays in torch on {device}"
        in caplog.text
    )
    assert engine.runtime_bytes == 0
