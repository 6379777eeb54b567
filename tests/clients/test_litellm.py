"""LiteLLM (``openai/`` and ``hosted_vllm/`` providers, plus its rerank providers) → gateway → real models.

Offline: ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (set before the import) makes LiteLLM read its
bundled model cost map instead of downloading it; ``litellm.telemetry = False``. Its tokenizer
files are bundled too (it points ``TIKTOKEN_CACHE_DIR`` at them when imported).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.clients.conftest import require
from tests.conftest import CHAT_MODEL, EMBED_MODEL, RERANK_MODEL

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
require("litellm")

import litellm  # noqa: E402

litellm.telemetry = False

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
DOCUMENTS = ["Bananas are yellow.", "Paris is the capital and largest city of France.", "Cats purr."]


async def complete(gateway_url: str, provider: str = "openai", **kwargs):
    """A short, deterministic chat completion through LiteLLM's ``provider``."""
    return await litellm.acompletion(
        model=f"{provider}/{CHAT_MODEL}",
        api_base=f"{gateway_url}/v1",
        api_key="unused",
        messages=QUESTION,
        max_tokens=12,
        temperature=0,
        **kwargs,
    )


@pytest.mark.parametrize("provider", ["openai", "hosted_vllm"])
async def test_completion(gateway_url, provider):
    response = await complete(gateway_url, provider)
    choice = response.choices[0]
    assert choice.message.content.strip()
    assert choice.finish_reason in {"stop", "length"}
    assert response.usage.completion_tokens > 0


async def test_streaming(gateway_url):
    stream = await complete(gateway_url, stream=True)
    chunks = [chunk async for chunk in stream]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3, "tokens must arrive as separate chunks"
    assert "".join(pieces).strip()
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] in (
        ["stop"],
        ["length"],
    )


async def test_embeddings(gateway_url):
    response = await litellm.aembedding(
        model=f"openai/{EMBED_MODEL}",
        api_base=f"{gateway_url}/v1",
        api_key="unused",
        input=["How do I reset my password?", "I forgot my password", "The tide is high today."],
    )
    vectors = np.array([item["embedding"] for item in response.data], dtype=np.float32)
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert response.usage.prompt_tokens > 0


# hosted_vllm posts to {api_base}/rerank (vLLM's path), cohere to {api_base}/v1/rerank or
# /v2/rerank, jina_ai to {api_base}/v1/rerank: every shape the gateway serves.
@pytest.mark.parametrize("provider", ["hosted_vllm", "cohere", "jina_ai"])
async def test_rerank(gateway_url, provider):
    response = await litellm.arerank(
        model=f"{provider}/{RERANK_MODEL}",
        api_base=gateway_url,
        api_key="unused",
        query="What is the capital of France?",
        documents=DOCUMENTS,
        top_n=2,
    )
    results = response.results
    assert len(results) == 2
    assert results[0]["index"] == 1
    assert results[0]["relevance_score"] > results[1]["relevance_score"]


# A prompt of about 3,000 tokens, over SmolLM2's 2,048 (n_ctx in the test catalog); an input of
# about 2,000 tokens, over MiniLM's 256.
LONG_PROMPT = "word " * 3000
LONG_TEXT = "This is a test " * 512


@pytest.mark.parametrize("provider", ["openai", "hosted_vllm"])
async def test_a_prompt_over_the_context_is_context_window_exceeded(gateway_url, provider):
    """LiteLLM's context-window fallbacks key on OpenAI's message ("This model's maximum context
    length is …"), so the gateway answers with it, not with an ``input_too_long`` of its own."""
    with pytest.raises(litellm.ContextWindowExceededError):
        await litellm.acompletion(
            model=f"{provider}/{CHAT_MODEL}",
            api_base=f"{gateway_url}/v1",
            api_key="unused",
            messages=[{"role": "user", "content": LONG_PROMPT}],
            max_tokens=4,
        )


async def test_an_embedding_input_over_the_window_is_context_window_exceeded(gateway_url):
    with pytest.raises(litellm.ContextWindowExceededError):
        await litellm.aembedding(
            model=f"openai/{EMBED_MODEL}", api_base=f"{gateway_url}/v1", api_key="unused", input=[LONG_TEXT]
        )
