"""The REST gateway's encoder routes end to end: uvicorn → gateway → gRPC server → real models."""

from __future__ import annotations

import asyncio
import base64

import httpx
import numpy as np
import pytest

from gateway.app import create_app
from tests.engines.encoders.conftest import CROSS_ENCODER, EMBED, INTENT, SPACY, TINY_QUEUE
from tests.gateway.gateway_fakes import serve_with_uvicorn


@pytest.fixture(scope="module")
async def http(encoder_server):
    async with (
        serve_with_uvicorn(create_app(f"127.0.0.1:{encoder_server.port}")) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=120) as client,
    ):
        yield client


async def test_embeddings_dimensions_and_base64(http):
    floats = (
        await http.post(
            "/v1/embeddings", json={"model": EMBED, "input": ["hello", "world"], "dimensions": 128}
        )
    ).json()
    packed = (
        await http.post(
            "/v1/embeddings",
            json={
                "model": EMBED,
                "input": ["hello", "world"],
                "dimensions": 128,
                "encoding_format": "base64",
            },
        )
    ).json()
    for as_float, as_b64 in zip(floats["data"], packed["data"], strict=True):
        vector = np.asarray(as_float["embedding"], dtype=np.float32)
        assert vector.shape == (128,)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
        decoded = np.frombuffer(base64.b64decode(as_b64["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, vector)


@pytest.mark.parametrize("model", [EMBED, CROSS_ENCODER])
async def test_rerank_in_the_cohere_and_jina_shape(http, model):
    documents = [
        "Bananas are yellow.",
        {"text": "Paris is the capital and largest city of France."},
        "Cats purr.",
    ]
    response = await http.post(
        "/v1/rerank",
        json={
            "model": model,
            "query": "What is the capital of France?",
            "documents": documents,
            "top_n": 2,
            "return_documents": True,
        },
        headers={"x-request-id": "rerank-1"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == "rerank-1" and body["model"] == model
    assert [r["index"] for r in body["results"]][:1] == [1]
    assert len(body["results"]) == 2
    assert body["results"][0]["document"] == {"text": documents[1]["text"]}
    assert body["usage"]["total_tokens"] > 0


async def test_classify_intent_and_zero_shot(http):
    body = (
        await http.post(
            "/v1/classify", json={"model": INTENT, "input": "Move 50 euros to my savings account please"}
        )
    ).json()
    assert body["data"][0]["label"] == "transfer"
    assert "scores" not in body["data"][0]
    body = (
        await http.post(
            "/v1/classify",
            json={
                "model": EMBED,
                "input": ["Preheat the oven to 180 degrees."],
                "candidate_labels": ["cooking", "astronomy"],
                "all_scores": True,
            },
        )
    ).json()
    assert body["data"][0]["label"] == "cooking"
    assert [s["label"] for s in body["data"][0]["scores"]] == ["cooking", "astronomy"]


async def test_fit_list_classify_delete_classifier(http):
    examples = [
        {"text": "I love this product, it works great", "label": "positive"},
        {"text": "Fantastic quality, very happy", "label": "positive"},
        {"text": "Excellent service and fast delivery", "label": "positive"},
        {"text": "This is terrible, it broke after a day", "label": "negative"},
        {"text": "Awful experience, I want a refund", "label": "negative"},
        {"text": "Very disappointed with the quality", "label": "negative"},
    ]
    fitted = await http.post(
        "/v1/classifiers", json={"name": "http-sentiment", "embedding_model": EMBED, "examples": examples}
    )
    assert fitted.status_code == 200, fitted.text
    assert fitted.json()["labels"] == ["negative", "positive"]
    listed = (await http.get("/v1/classifiers")).json()
    assert "http-sentiment" in [c["name"] for c in listed["data"]]
    body = (
        await http.post("/v1/classify", json={"model": "http-sentiment", "input": ["Absolutely wonderful!"]})
    ).json()
    assert body["data"][0]["label"] == "positive"
    deleted = await http.delete("/v1/classifiers/http-sentiment")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    missing = await http.delete("/v1/classifiers/http-sentiment")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "classifier_not_found"


async def test_ner(http):
    body = (
        await http.post(
            "/v1/ner", json={"model": SPACY, "input": "Tim Cook visited Paris on Monday for Apple"}
        )
    ).json()
    assert [(x["text"], x["label"], x["start"], x["end"]) for x in body["data"][0]["entities"]] == [
        ("Tim Cook", "PERSON", 0, 8),
        ("Paris", "GPE", 17, 22),
        ("Monday", "DATE", 26, 32),
        ("Apple", "ORG", 37, 42),
    ]


@pytest.mark.parametrize(
    "path,payload,status,code",
    [
        ("/v1/rerank", {"model": EMBED, "query": "q", "documents": []}, 400, "invalid_argument"),
        ("/v1/rerank", {"model": EMBED, "query": "q", "documents": ["d"], "top_n": 0}, 400, "invalid_value"),
        ("/v1/classify", {"model": INTENT, "input": []}, 400, "invalid_argument"),
        ("/v1/classify", {"model": "no-such", "input": ["x"]}, 404, "model_not_found"),
        ("/v1/classify", {"model": EMBED, "input": ["x"]}, 400, "candidate_labels_required"),
        ("/v1/ner", {"model": EMBED, "input": ["x"]}, 400, "task_not_supported"),
        (
            "/v1/embeddings",
            {"model": EMBED, "input": ["word " * 600], "truncation": "error"},
            400,
            "context_length_exceeded",
        ),
        (
            "/v1/classifiers",
            {"name": "../x", "embedding_model": EMBED, "examples": [{"text": "a", "label": "b"}]},
            400,
            "invalid_classifier_name",
        ),
    ],
)
async def test_bad_requests_map_to_http_errors(http, path, payload, status, code):
    response = await http.post(path, json=payload)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def test_overload_is_429(http):
    await http.post("/v1/embeddings", json={"model": TINY_QUEUE, "input": "load"})
    responses = await asyncio.gather(
        *(http.post("/v1/embeddings", json={"model": TINY_QUEUE, "input": f"text {i}"}) for i in range(6))
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(429) >= 3 and 200 in statuses
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 429} == {"overloaded"}
