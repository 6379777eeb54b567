"""Rerank with MiniLM embeddings (cosine) and with a cross-encoder trained in a fixture."""

from __future__ import annotations

import pytest
from universal_runtime.v1 import encoders_pb2 as e

from tests.engines.encoders.conftest import CROSS_ENCODER, EMBED

QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Bananas are a good source of potassium.",
    "Paris is the capital and largest city of France.",
    "The Eiffel Tower was finished in 1889.",
    "Photosynthesis converts light into chemical energy.",
]


@pytest.mark.parametrize("model", [EMBED, CROSS_ENCODER])
async def test_the_relevant_document_ranks_first(enc, model):
    response = await enc.Rerank(e.RerankRequest(model=model, query=QUERY, documents=DOCUMENTS))
    assert response.results[0].index == 1
    assert len(response.results) == len(DOCUMENTS)
    scores = [r.relevance_score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    assert all(r.document == "" for r in response.results)
    assert response.usage.prompt_tokens > 0
    assert response.model == model


@pytest.mark.parametrize("model", [EMBED, CROSS_ENCODER])
async def test_top_n_and_return_documents(enc, model):
    response = await enc.Rerank(
        e.RerankRequest(model=model, query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    )
    assert len(response.results) == 2
    assert response.results[0].index == 1
    for result in response.results:
        assert result.document == DOCUMENTS[result.index]


async def test_cross_encoder_scores_are_probabilities_that_separate(enc):
    response = await enc.Rerank(e.RerankRequest(model=CROSS_ENCODER, query=QUERY, documents=DOCUMENTS))
    by_index = {r.index: r.relevance_score for r in response.results}
    assert all(0.0 <= s <= 1.0 for s in by_index.values())
    assert by_index[1] > 0.5 > by_index[0]


async def test_cross_encoder_matches_sentence_transformers_predict(enc, cross_encoder_dir):
    from sentence_transformers import CrossEncoder

    expected = CrossEncoder(str(cross_encoder_dir), device="cpu").predict([(QUERY, d) for d in DOCUMENTS])
    response = await enc.Rerank(e.RerankRequest(model=CROSS_ENCODER, query=QUERY, documents=DOCUMENTS))
    for result in response.results:
        assert result.relevance_score == pytest.approx(float(expected[result.index]), abs=1e-4)
