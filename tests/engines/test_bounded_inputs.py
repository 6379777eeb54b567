"""Work is bounded by the model's window, not by the input.

A tokenizer reads the whole string even when told to truncate, so a huge input costs gigabytes and
holds the device for many seconds (see
docs/architecture/design-notes.md#work-bounded-by-the-models-window). Texts are cut (or refused) by
character count before anything tokenizes them.
"""

from __future__ import annotations

import grpc
import numpy as np
import psutil
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g

from engines.batching.tokens import character_limit
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES, error_info

# Just under the test server's message limit: ~3.5 MB of text, ~700k tokens.
HUGE = ("word " * (MAX_MESSAGE_BYTES // 5))[: MAX_MESSAGE_BYTES - 512 * 1024]
MINILM_WINDOW = 256  # all-MiniLM-L6-v2's max_seq_length, special tokens included


async def embed(inference, text: str, truncation: int) -> e.EmbedResponse:
    return await inference.Embed(
        e.EmbedRequest(model=EMBED_MODEL, inputs=[text], truncation=truncation), timeout=60
    )


def vector(response: e.EmbedResponse) -> np.ndarray:
    return np.asarray(response.embeddings[0].values, dtype=np.float32)


async def test_a_huge_input_is_cut_to_the_window_without_holding_its_size_in_memory(inference):
    prefix = HUGE[:4000]  # 800 words: already more than the window
    expected = await embed(inference, prefix, e.TRUNCATION_POLICY_END)
    rss_before = psutil.Process().memory_info().rss
    response = await embed(inference, HUGE, e.TRUNCATION_POLICY_END)
    grown_mib = (psutil.Process().memory_info().rss - rss_before) / 2**20
    assert response.usage.prompt_tokens == MINILM_WINDOW
    # Truncation keeps the first tokens: the same vector as any prefix longer than the window.
    np.testing.assert_allclose(vector(response), vector(expected), atol=1e-6)
    assert grown_mib < 256, f"embedding a {len(HUGE)}-character input grew the server by {grown_mib:.0f} MiB"


async def test_a_huge_input_cut_from_the_start_keeps_its_last_tokens(inference):
    response = await embed(inference, HUGE, e.TRUNCATION_POLICY_START)
    expected = await embed(inference, HUGE[-4000:], e.TRUNCATION_POLICY_START)
    assert response.usage.prompt_tokens == MINILM_WINDOW
    np.testing.assert_allclose(vector(response), vector(expected), atol=1e-6)


async def test_a_huge_input_with_truncation_error_is_refused_by_its_length(inference):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await embed(inference, HUGE, e.TRUNCATION_POLICY_ERROR)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INPUT_TOO_LONG"
    assert info.metadata["field"] == "inputs[0]"
    assert int(info.metadata["max_characters"]) == character_limit(MINILM_WINDOW)


@pytest.mark.parametrize("as_chat", [False, True])
async def test_a_huge_prompt_is_refused_before_tokenizing(inference, as_chat):
    if as_chat:
        request = g.GenerateRequest(
            model=CHAT_MODEL, messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=HUGE)]
        )
    else:
        request = g.GenerateRequest(model=CHAT_MODEL, prompt=HUGE)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(request, timeout=60)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INPUT_TOO_LONG"
    assert int(info.metadata["prompt_characters"]) == len(HUGE)
    # A prompt within the window still works.
    small = await inference.Generate(
        g.GenerateRequest(model=CHAT_MODEL, prompt="Hello", parameters=g.GenerationParameters(max_tokens=2)),
        timeout=60,
    )
    assert small.usage.completion_tokens >= 1


async def test_a_message_over_the_receive_limit_is_refused_before_it_is_parsed(inference):
    """gRPC core refuses it by its length prefix: RESOURCE_EXHAUSTED, and the server keeps serving."""
    over = "word " * (MAX_MESSAGE_BYTES // 5 + 1024)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await embed(inference, over, e.TRUNCATION_POLICY_END)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in caught.value.details()
    assert (await embed(inference, "still serving", e.TRUNCATION_POLICY_END)).usage.prompt_tokens > 0


@pytest.mark.parametrize("rpc", ["Tokenize", "Generate"])
async def test_huge_tools_count_toward_the_prompts_character_limit(inference, rpc):
    """Tools are rendered into the prompt: 128 tools of 16 KB (Anthropic count_tokens)
    are refused by their size, not tokenized on the model's lane for seconds."""
    from universal_runtime.v1 import tokenization_pb2 as t

    schema = '{"type": "object", "description": "' + "x" * 16_000 + '"}'
    tools = [
        g.ToolDefinition(name=f"tool_{i}", description="d", parameters_json_schema=schema) for i in range(128)
    ]
    messages = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="Hi")]
    if rpc == "Tokenize":
        call = inference.Tokenize(
            t.TokenizeRequest(model=CHAT_MODEL, messages=messages, tools=tools), timeout=60
        )
    else:
        parameters = g.GenerationParameters(max_tokens=2, tools=tools)
        call = inference.Generate(
            g.GenerateRequest(model=CHAT_MODEL, messages=messages, parameters=parameters)
        )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(caught.value)
    assert info.reason == "INPUT_TOO_LONG"
    assert int(info.metadata["prompt_characters"]) > 128 * 16_000
