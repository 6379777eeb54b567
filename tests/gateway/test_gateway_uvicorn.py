"""Tests through a real uvicorn server: the official OpenAI SDK, and client disconnects."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from gateway.app import create_app
from tests.gateway.gateway_fakes import FakeServer, serve_with_uvicorn

CHAT = {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture
async def base_url(fake: FakeServer) -> AsyncIterator[str]:
    async with serve_with_uvicorn(create_app(fake.target)) as url:
        yield url


@pytest.fixture
async def sdk(base_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0) as client:
        yield client


async def test_sdk_streamed_chat(sdk: openai.AsyncOpenAI, fake: FakeServer) -> None:
    stream = await sdk.chat.completions.create(
        model="fake-llm",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Hello there!"
    finish = [
        chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 8


async def test_sdk_chat_and_models(sdk: openai.AsyncOpenAI) -> None:
    completion = await sdk.chat.completions.create(
        model="fake-llm", messages=[{"role": "user", "content": "Hi"}]
    )
    assert completion.choices[0].message.content == "Hello there!"
    assert completion.usage is not None and completion.usage.prompt_tokens == 5
    models = await sdk.models.list()
    assert [model.id for model in models.data] == ["fake-llm", "org/fake-embedder"]


async def test_sdk_stream_error_raises(sdk: openai.AsyncOpenAI, fake: FakeServer) -> None:
    fake.inference.stream_fail_after = 1
    stream = await sdk.chat.completions.create(
        model="fake-llm", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    with pytest.raises(openai.APIError, match="engine crashed"):
        async for _ in stream:
            pass


async def test_sdk_error_status(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.models.retrieve("missing")
    assert caught.value.code == "model_not_found"


async def test_sdk_embeddings_float_and_base64(sdk: openai.AsyncOpenAI, fake: FakeServer) -> None:
    floats = await sdk.embeddings.create(model="fake-embedder", input=["a", "b"], encoding_format="float")
    assert floats.data[0].embedding == [0.5, -0.25, 0.125]
    assert floats.usage.prompt_tokens == 7

    # Without encoding_format the SDK asks for base64 and decodes it itself.
    decoded = await sdk.embeddings.create(model="fake-embedder", input=["a", "b"])
    assert fake.inference.received[-1].request.inputs == ["a", "b"]
    assert [item.embedding for item in decoded.data] == [[0.5, -0.25, 0.125], [1.0, 0.0, -1.0]]

    raw = await sdk.embeddings.create(model="fake-embedder", input="a", encoding_format="base64")
    encoded = raw.data[0].embedding
    assert isinstance(encoded, str)
    assert struct.unpack("<3f", base64.b64decode(encoded)) == (0.5, -0.25, 0.125)


async def test_stream_disconnect_cancels_grpc_call(base_url: str, fake: FakeServer) -> None:
    fake.inference.stream_messages = fake.inference.stream_messages[:1]
    fake.inference.stream_messages[0].ClearField("finish_reason")
    fake.inference.hang = True
    async with (
        httpx.AsyncClient(base_url=base_url) as http,
        http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if '"Hel"' in line:
                break  # leaving the block closes the connection mid-stream
    await asyncio.wait_for(fake.inference.cancelled.wait(), 5)


async def test_unary_disconnect_cancels_grpc_call(base_url: str, fake: FakeServer) -> None:
    fake.inference.hang = True
    async with httpx.AsyncClient(base_url=base_url) as http:
        request = asyncio.create_task(http.post("/v1/chat/completions", json=CHAT))
        await asyncio.wait_for(fake.inference.started.wait(), 5)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    await asyncio.wait_for(fake.inference.cancelled.wait(), 5)


async def test_disconnect_before_first_stream_message_cancels(base_url: str, fake: FakeServer) -> None:
    fake.inference.stream_messages = []
    fake.inference.hang = True
    async with httpx.AsyncClient(base_url=base_url) as http:
        request = asyncio.create_task(http.post("/v1/chat/completions", json={**CHAT, "stream": True}))
        await asyncio.wait_for(fake.inference.started.wait(), 5)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    await asyncio.wait_for(fake.inference.cancelled.wait(), 5)
