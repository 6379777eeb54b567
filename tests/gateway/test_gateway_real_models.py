"""The gateway (over uvicorn) in front of the real gRPC server and real models.

``tests/gateway/test_gateway_*.py`` check the gateway's translation against a fake gRPC server;
these check the same routes end to end: streamed legacy completions from the GGUF model, model
lookups from the real catalog, and ``/health`` following the real server's health servicer.
"""

from __future__ import annotations

import httpx
import pytest

from gateway.app import create_app
from service.server import start_server
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import asgi_client, parse_sse, serve_with_uvicorn

# Counting: greedy SmolLM2 keeps counting well past 12 tokens, so both calls stop on "length".
COMPLETION = {"model": CHAT_MODEL, "prompt": "1, 2, 3, 4,", "max_tokens": 12, "temperature": 0}
CHUNK_KEYS = {"id", "object", "created", "model", "system_fingerprint", "choices"}
CHOICE_KEYS = {"index", "text", "finish_reason", "logprobs"}


@pytest.fixture(scope="module")
async def http(server):
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    async with serve_with_uvicorn(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


async def stream_completion(http: httpx.AsyncClient, **extra) -> str:
    """The raw SSE body of a streamed ``/v1/completions`` call."""
    async with http.stream(
        "POST", "/v1/completions", json={**COMPLETION, "stream": True, **extra}
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        return "".join([text async for text in response.aiter_text()])


def check_text_chunks(chunks: list[dict]) -> tuple[str, str]:
    """Assert OpenAI's ``text_completion`` chunk shape; return the joined text and finish reason."""
    assert len({chunk["id"] for chunk in chunks}) == 1
    for chunk in chunks:
        assert set(chunk) - {"usage"} == CHUNK_KEYS and chunk["object"] == "text_completion"
        assert chunk["id"] and chunk["model"] == CHAT_MODEL
        [choice] = chunk["choices"]
        assert set(choice) == CHOICE_KEYS and choice["index"] == 0
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks]
    assert finishes[:-1] == [None] * (len(chunks) - 1), "only the last chunk carries finish_reason"
    assert sum(1 for chunk in chunks if chunk["choices"][0]["text"]) >= 3, "text must arrive in pieces"
    return "".join(chunk["choices"][0]["text"] for chunk in chunks), finishes[-1]


async def test_streamed_completion_equals_the_unary_greedy_one(http):
    unary = await http.post("/v1/completions", json=COMPLETION)
    assert unary.status_code == 200, unary.text
    expected = unary.json()
    assert expected["choices"][0]["finish_reason"] == "length"
    assert "5" in expected["choices"][0]["text"]

    raw = await stream_completion(http, stream_options={"include_usage": True})
    assert raw.rstrip().endswith("data: [DONE]")
    events = parse_sse(raw)
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    *text_chunks, usage_chunk = events[:-1]

    text, finish = check_text_chunks(text_chunks)
    assert text == expected["choices"][0]["text"]
    assert finish == "length"
    # With include_usage every chunk has "usage": null, and one last chunk with no choices has it.
    assert all(chunk["usage"] is None for chunk in text_chunks)
    assert usage_chunk["object"] == "text_completion" and usage_chunk["choices"] == []
    assert usage_chunk["id"] == text_chunks[0]["id"]
    usage = usage_chunk["usage"]
    assert usage["completion_tokens"] == COMPLETION["max_tokens"] == expected["usage"]["completion_tokens"]
    assert usage["prompt_tokens"] == expected["usage"]["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_streamed_completion_without_usage(http):
    events = parse_sse(await stream_completion(http))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    text, finish = check_text_chunks(chunks)
    assert finish == "length" and "5" in text
    assert all("usage" not in chunk for chunk in chunks)


async def test_get_model_by_name(http):
    response = await http.get(f"/v1/models/{EMBED_MODEL}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == EMBED_MODEL
    assert body["object"] == "model" and body["owned_by"] == "universal-runtime"
    assert body["tasks"] == ["embed"]
    listed = {model["id"]: model for model in (await http.get("/v1/models")).json()["data"]}
    assert listed[EMBED_MODEL]["tasks"] == body["tasks"]
    chat = (await http.get(f"/v1/models/{CHAT_MODEL}")).json()
    assert chat["id"] == CHAT_MODEL and chat["tasks"] == ["generate"]


async def test_get_unknown_model_is_404_with_openai_error(http):
    response = await http.get("/v1/models/no-such-model")
    assert response.status_code == 404
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == "model_not_found"
    assert error["type"] == "not_found_error"
    assert "no-such-model" in error["message"]


async def test_health_follows_the_servers_health_servicer(settings):
    """200 while serving; 503 NOT_SERVING once shutdown begins; 503 UNREACHABLE once it is gone."""
    running = await start_server(settings.model_copy(update={"grpc_port": 0}))
    stopped = False
    try:
        async with asgi_client(create_app(f"127.0.0.1:{running.port}")) as client:
            serving = await client.get("/health")
            assert (serving.status_code, serving.json()) == (200, {"status": "SERVING"})

            # The first step of RunningServer.stop(): the health servicer turns NOT_SERVING, so
            # load balancers drain the server before it stops taking calls.
            await running.health.enter_graceful_shutdown()
            draining = await client.get("/health")
            assert (draining.status_code, draining.json()) == (503, {"status": "NOT_SERVING"})

            await running.stop(grace=0.5)
            stopped = True
            gone = await client.get("/health")
            assert gone.status_code == 503
            assert gone.json()["status"] == "UNREACHABLE"
    finally:
        if not stopped:
            await running.stop(grace=0.5)
