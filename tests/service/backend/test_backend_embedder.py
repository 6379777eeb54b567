"""A backend process serving the default catalog's MiniLM embedder (sentence-transformers, torch)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from universal_runtime.v1 import backend_service_pb2 as b
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import tokenization_pb2 as t

from tests.conftest import MINILM_SOURCE, error_info
from tests.service.backend.conftest import load_request, started_backend, wait_exit

pytestmark = pytest.mark.slow

MODEL = "all-minilm-l6-v2"
#: all-MiniLM-L6-v2's vector size.
DIMENSIONS = 384
SENTENCES = ["The cat sat on the mat.", "Quarterly revenue grew by twelve percent."]


@pytest.fixture(scope="module")
async def embedder():
    """One backend for the module with MiniLM loaded (torch: no OpenVINO export to make)."""
    async with started_backend() as backend:
        loaded = await backend.control.Load(
            load_request(MODEL, "sentence_transformers", ["embed", "rerank", "classify"], MINILM_SOURCE)
        )
        assert loaded.pid == backend.process.pid
        assert loaded.memory.ram_bytes > 0
        yield backend


async def test_embed_gives_normalized_vectors_of_the_models_dimension(embedder):
    response = await embedder.inference.Embed(
        e.EmbedRequest(model=MODEL, inputs=SENTENCES, normalize=True), metadata=[("x-request-id", "embed-1")]
    )
    vectors = np.array([list(x.values) for x in response.embeddings], dtype=np.float32)
    assert response.model == MODEL
    assert response.dimensions == DIMENSIONS
    assert vectors.shape == (len(SENTENCES), DIMENSIONS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert response.usage.prompt_tokens > 0


async def test_rerank_and_zero_shot_classify_through_the_same_engine(embedder):
    ranked = await embedder.inference.Rerank(
        e.RerankRequest(model=MODEL, query="a pet on a rug", documents=list(reversed(SENTENCES)))
    )
    assert [r.index for r in ranked.results] == [1, 0]
    classified = await embedder.inference.Classify(
        e.ClassifyRequest(
            model=MODEL, inputs=["Revenue grew"], candidate_labels=["finance", "animals"], all_scores=True
        )
    )
    scores = {s.label: s.score for s in classified.classifications[0].scores}
    assert scores["finance"] > scores["animals"]


async def test_tokenize_and_detokenize(embedder):
    tokens = await embedder.inference.Tokenize(t.TokenizeRequest(model=MODEL, prompt="hello world"))
    assert tokens.count == len(tokens.token_ids) == 4  # [CLS] hello world [SEP]
    text = await embedder.inference.Detokenize(
        t.DetokenizeRequest(model=MODEL, token_ids=tokens.token_ids, skip_special_tokens=True)
    )
    assert text.text == "hello world"


async def test_health_and_stats(embedder):
    assert (await embedder.control.Health(b.HealthRequest())).serving
    stats = await embedder.control.Stats(b.StatsRequest())
    assert stats.memory.ram_bytes > 0
    assert stats.has_encoder and not stats.has_generation
    assert stats.encoder_requests_running == 0


async def test_empty_inputs_are_invalid_argument_as_the_server_answers(embedder):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await embedder.inference.Embed(e.EmbedRequest(model=MODEL), metadata=[("x-request-id", "empty-1")])
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(raised.value)
    assert (info.reason, info.domain, info.metadata["field"]) == (
        "INVALID_ARGUMENT",
        "universal-runtime",
        "inputs",
    )
    assert ("x-request-id", "empty-1") in tuple(raised.value.trailing_metadata())


async def test_a_task_the_model_does_not_serve_is_refused(embedder):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await embedder.inference.ExtractEntities(e.ExtractEntitiesRequest(model=MODEL, inputs=["Paris"]))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(raised.value).reason == "TASK_NOT_SUPPORTED"


async def test_rpcs_the_backend_does_not_serve_are_unimplemented(embedder):
    for call, request in (
        (embedder.inference.Generate, g.GenerateRequest(model=MODEL, prompt="hi")),
        (embedder.inference.ListClassifiers, e.ListClassifiersRequest()),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(request)
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_a_second_load_is_refused(embedder):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await embedder.control.Load(load_request("other", "sentence_transformers", ["embed"], MINILM_SOURCE))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(raised.value).reason == "FAILED_PRECONDITION"


async def test_unload_ends_the_process_with_status_0(embedder):
    # Last in the module: the backend is gone after it.
    await embedder.control.Unload(b.UnloadRequest(drain_timeout_ms=2000))
    assert wait_exit(embedder.process) == 0
    assert not embedder.socket.exists()
    assert "Traceback" not in embedder.log_text(), embedder.log_text()[-3000:]
