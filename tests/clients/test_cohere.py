"""Cohere's own clients pointed at the gateway: the ``cohere`` SDK (``ClientV2``, ``/v2/rerank``) and
LangChain's ``CohereRerank`` (``langchain-cohere``, built on ``ClientV2``)."""

from __future__ import annotations

import asyncio

from tests.clients.conftest import require
from tests.conftest import RERANK_MODEL

require("cohere")

import cohere  # noqa: E402

QUERY = "What is the capital of France?"
DOCUMENTS = ["Bananas are yellow.", "Paris is the capital and largest city of France.", "Cats purr."]


async def test_cohere_sdk_v2_rerank(gateway_url):
    client = cohere.AsyncClientV2(api_key="unused", base_url=gateway_url)
    response = await client.rerank(model=RERANK_MODEL, query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in response.results][:1] == [1]
    assert len(response.results) == 2
    assert response.results[0].relevance_score > response.results[1].relevance_score
    assert response.meta.billed_units.search_units == 1
    assert response.meta.tokens.input_tokens > 0


async def test_langchain_cohere_rerank_compresses_documents(gateway_url):
    require("langchain_cohere")
    from langchain_cohere import CohereRerank
    from langchain_core.documents import Document

    reranker = CohereRerank(model=RERANK_MODEL, base_url=gateway_url, cohere_api_key="unused", top_n=1)
    documents = [Document(page_content=text, metadata={"n": i}) for i, text in enumerate(DOCUMENTS)]
    # CohereRerank is synchronous: run it off the loop that serves the gateway.
    (best,) = await asyncio.to_thread(reranker.compress_documents, documents, QUERY)
    assert best.metadata["n"] == 1
    assert best.metadata["relevance_score"] > 0
