"""End to end: the official openai SDK → gateway → gRPC server → real SmolLM2 and MiniLM."""

from __future__ import annotations

import base64

import numpy as np
import openai
import pytest

from gateway.app import create_app
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import serve_with_uvicorn


@pytest.fixture(scope="module")
async def sdk(server):
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    async with (
        serve_with_uvicorn(app) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client,
    ):
        yield client


async def test_streamed_chat_completion(sdk):
    stream = await sdk.chat.completions.create(
        model=CHAT_MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(contents) >= 5, "tokens must stream as separate chunks"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish in (["stop"], ["length"])
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_chat_completion_matches_grpc_generate(sdk, inference):
    from universal_runtime.v1 import generation_pb2 as g

    question = "Name a colour."
    completion = await sdk.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0
    )
    direct = await inference.Generate(
        g.GenerateRequest(
            model=CHAT_MODEL,
            messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=question)],
            parameters=g.GenerationParameters(max_tokens=16, temperature=0),
        )
    )
    assert completion.choices[0].message.content == direct.choices[0].text
    assert completion.usage.prompt_tokens == direct.usage.prompt_tokens
    # The gRPC call repeated the prompt: it came from the prompt cache, and the SDK's field
    # for that carries the same count.
    assert direct.usage.cached_prompt_tokens == direct.usage.prompt_tokens - 2
    again = await sdk.chat.completions.create(
        model=CHAT_MODEL, messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0
    )
    assert again.usage.prompt_tokens_details.cached_tokens == direct.usage.cached_prompt_tokens
    assert again.choices[0].message.content == completion.choices[0].message.content


async def test_embeddings_paraphrases_closer_than_unrelated(sdk):
    inputs = [
        "How do I reset my password?",
        "I forgot my password, how can I change it?",
        "The tide is high today.",
    ]
    for encoding in ("float", "base64"):
        response = await sdk.embeddings.create(model=EMBED_MODEL, input=inputs, encoding_format=encoding)
        # With an explicit "base64" the SDK hands back the string: little-endian float32 bytes.
        vectors = np.array(
            [
                np.frombuffer(base64.b64decode(item.embedding), dtype="<f4")
                if isinstance(item.embedding, str)
                else item.embedding
                for item in response.data
            ],
            dtype=np.float32,
        )
        assert vectors.shape == (3, 384)
        cosine = (
            vectors @ vectors.T / np.outer(np.linalg.norm(vectors, axis=1), np.linalg.norm(vectors, axis=1))
        )
        assert cosine[0, 1] > cosine[0, 2] + 0.3
        assert response.usage.prompt_tokens > 0


async def test_unknown_model_is_404(sdk):
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == "model_not_found"


async def test_bad_temperature_is_400(sdk):
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": "hi"}], temperature=3.5
        )
    assert caught.value.status_code == 400


async def test_body_over_the_size_limit_is_413(sdk):
    with pytest.raises(openai.APIStatusError) as caught:
        await sdk.embeddings.create(model=EMBED_MODEL, input=["a" * (MAX_MESSAGE_BYTES + 10)])
    assert caught.value.status_code == 413


async def test_models_and_health_routes(server):
    import httpx

    app = create_app(f"127.0.0.1:{server.port}")
    async with serve_with_uvicorn(app) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/v1/models")
        assert {m["id"] for m in response.json()["data"]} >= {CHAT_MODEL, EMBED_MODEL}
        health = await client.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "SERVING"
