"""Encoders run by ONNX Runtime and OpenVINO (catalog ``runtime``/``quantize``) through the normal RPCs.

Each runtime embeds, reranks and classifies like torch does (the session's torch entries are the
reference); the exported copies are made once per session in a temporary cache and reused by a
second load; bad runtime names are found at start-up. A runtime whose packages are not installed
is skipped with the reason.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import yaml
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2_grpc
from universal_runtime.v1 import model_service_pb2 as m

from engines.encoder_runtime import RuntimeChoice
from engines.errors import FailedPreconditionError
from service.server import start_server
from service.settings import Settings
from tests.conftest import MINILM_SOURCE, error_info
from tests.converted_copies import converted_copies
from tests.engines.encoders.conftest import CROSS_ENCODER, EMBED, TEXT_CLASSIFIER
from tests.engines.encoders.test_rerank import DOCUMENTS, QUERY
from tests.engines.encoders.training import CLASSIFIER_EXAMPLES

VARIANTS = [("onnx", "none"), ("onnx", "int8"), ("openvino", "none"), ("openvino", "int8")]
SENTENCES = [
    "The striker scored twice in the second half.",
    "How do I reset my password?",
    "Paris is the capital and largest city of France.",
    "Photosynthesis converts light into chemical energy.",
]
BAD = {
    "bad-runtime": (
        {"runtime": "tensorrt"},
        "option runtime: Input should be 'torch', 'onnx' or 'openvino' (got 'tensorrt')",
    ),
    "bad-quantize": (
        {"runtime": "onnx", "quantize": "int4"},
        "option quantize: Input should be 'none' or 'int8' (got 'int4')",
    ),
    "int8-torch": ({"quantize": "int8"}, "option quantize: int8 needs runtime onnx or openvino, not torch"),
}


def name(task: str, runtime: str, quantize: str = "none") -> str:
    return f"{task}-{runtime}" + ("-int8" if quantize == "int8" else "")


def skip_unless_installed(runtime: str, quantize: str = "none") -> None:
    try:
        RuntimeChoice(runtime, quantize).check_installed()
    except FailedPreconditionError as exc:
        pytest.skip(exc.message)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("converted")


@pytest.fixture(scope="module")
async def runtime_stubs(tmp_path_factory, cache_dir, cross_encoder_dir, text_classifier_dir):
    def entry(tasks, source, **options):
        backend = {
            "embed": "sentence_transformers",
            "rerank": "cross_encoder",
            "classify": "transformers_classifier",
        }
        return {
            "tasks": tasks,
            "backend": backend[tasks[0]],
            "source": str(source),
            "options": {"cache_dir": str(cache_dir), "max_wait_ms": 5, **options},
        }

    models = {}
    for runtime, quantize in VARIANTS:
        models[name("embed", runtime, quantize)] = entry(
            ["embed"], MINILM_SOURCE, runtime=runtime, quantize=quantize
        )
    for runtime in ("onnx", "openvino"):
        models[name("rerank", runtime)] = entry(["rerank"], cross_encoder_dir, runtime=runtime)
        models[name("classify", runtime)] = entry(["classify"], text_classifier_dir, runtime=runtime)
    for bad, (options, _) in BAD.items():
        models[bad] = entry(["embed"], MINILM_SOURCE, **options)
    catalog = tmp_path_factory.mktemp("runtime-catalog") / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"models": models}))
    settings = Settings(grpc_port=0, catalog_path=catalog, data_dir=tmp_path_factory.mktemp("runtime-data"))
    running = await start_server(settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield (
            model_service_pb2_grpc.ModelServiceStub(channel),
            inference_service_pb2_grpc.InferenceServiceStub(channel),
        )
    await running.stop(grace=1.0)


def vectors(response) -> np.ndarray:
    return np.array([list(x.values) for x in response.embeddings], dtype=np.float32)


@pytest.mark.parametrize(("runtime", "quantize"), VARIANTS)
async def test_embeddings_match_torch(runtime_stubs, enc, runtime, quantize):
    skip_unless_installed(runtime, quantize)
    _, inference = runtime_stubs
    model = name("embed", runtime, quantize)
    got = vectors(await inference.Embed(e.EmbedRequest(model=model, inputs=SENTENCES, normalize=True)))
    want = vectors(await enc.Embed(e.EmbedRequest(model=EMBED, inputs=SENTENCES, normalize=True)))
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= (0.98 if quantize == "int8" else 0.999), cosines


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
async def test_rerank_order_and_scores_match_torch(runtime_stubs, enc, runtime):
    skip_unless_installed(runtime)
    _, inference = runtime_stubs
    request = {"query": QUERY, "documents": DOCUMENTS}
    got = await inference.Rerank(e.RerankRequest(model=name("rerank", runtime), **request))
    want = await enc.Rerank(e.RerankRequest(model=CROSS_ENCODER, **request))
    assert [r.index for r in got.results] == [r.index for r in want.results]
    for a, b in zip(got.results, want.results, strict=True):
        assert a.relevance_score == pytest.approx(b.relevance_score, abs=1e-3)


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
async def test_classify_labels_match_torch(runtime_stubs, enc, runtime):
    skip_unless_installed(runtime)
    _, inference = runtime_stubs
    texts = [text for text, _ in CLASSIFIER_EXAMPLES]
    got = await inference.Classify(e.ClassifyRequest(model=name("classify", runtime), inputs=texts))
    want = await enc.Classify(e.ClassifyRequest(model=TEXT_CLASSIFIER, inputs=texts))
    assert [c.label for c in got.classifications] == [c.label for c in want.classifications]
    for a, b in zip(got.classifications, want.classifications, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-3)


async def test_second_load_reuses_the_cached_export(runtime_stubs, cache_dir):
    skip_unless_installed("onnx")
    models, inference = runtime_stubs
    model = name("embed", "onnx")
    await inference.Embed(e.EmbedRequest(model=model, inputs=["warm"]))
    before = converted_copies(cache_dir)
    assert any("-last_hidden_state-onnx-" in n for n in before)
    used_before = {p.name: p.stat().st_mtime_ns for p in cache_dir.iterdir() if p.is_dir()}
    await models.UnloadModel(m.UnloadModelRequest(name=model))
    loaded = await models.LoadModel(m.LoadModelRequest(name=model))
    assert loaded.model.status == m.MODEL_STATUS_READY
    assert converted_copies(cache_dir) == before  # nothing exported again, no folder or file replaced
    used_after = {p.name: p.stat().st_mtime_ns for p in cache_dir.iterdir() if p.is_dir()}
    # The load marked its copy used (the folder's mtime), so no build removes it as superseded.
    assert any(used_after[n] > used_before[n] for n in before)
    assert len((await inference.Embed(e.EmbedRequest(model=model, inputs=["again"]))).embeddings) == 1


async def test_bad_runtime_names_are_errors_from_start_up(runtime_stubs):
    models, inference = runtime_stubs
    listed = {x.name: x for x in (await models.ListModels(m.ListModelsRequest())).models}
    for bad, (_, message) in BAD.items():
        assert listed[bad].status == m.MODEL_STATUS_ERROR
        assert message in listed[bad].status_detail
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await inference.Embed(e.EmbedRequest(model=bad, inputs=["hello"]))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(caught.value).reason == "INVALID_MODEL_OPTION"
        assert message in caught.value.details()


def test_a_missing_runtime_package_is_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "openvino" else real(n, *a))
    with pytest.raises(FailedPreconditionError) as caught:
        RuntimeChoice("openvino").check_installed()
    assert caught.value.reason == "RUNTIME_NOT_INSTALLED"
    assert "openvino" in caught.value.message and "universal-runtime[openvino]" in caught.value.message
