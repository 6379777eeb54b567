"""The transformers generation engine on the real SmolLM2-135M-Instruct (GGUF loaded through transformers).

Greedy output is checked token for token against transformers' own ``model.generate`` on a copy
of the model that transformers loads itself from the GGUF file (not from the engine's converted
cache), and eight sequences batched together against their solo runs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import grpc
import jsonschema
import pytest
import torch
from universal_runtime.v1 import generation_pb2 as g

from engines.generation.transformers_engine import TransformersGenerationEngine
from engines.hf_construction import hf_construction
from tests.conftest import HF_CHAT_MODEL, TEST_CATALOG, error_info
from tests.scrape import observations, scrape

PROMPTS = [
    "Name a fruit.",
    "What colour is the sky on a clear day? Answer in one short sentence, please.",
    "Write a haiku about snow.",
    "Hi",
    "What is two plus two?",
    "Explain in two sentences why the sea is salty, as you would to a curious ten year old child.",
    "Say hello in French.",
    "What do bees make?",
]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "mood": {"enum": ["happy", "sad", "calm"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "zip": {"type": "integer"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "mood", "address", "tags"],
    "additionalProperties": False,
}


def chat(prompt: str, max_tokens: int = 16, **params) -> g.GenerateStreamRequest:
    return g.GenerateStreamRequest(
        model=HF_CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=prompt)],
        parameters=g.GenerationParameters(max_tokens=max_tokens, **params),
    )


def unary(prompt: str, max_tokens: int = 16, **params) -> g.GenerateRequest:
    return g.GenerateRequest(
        model=HF_CHAT_MODEL,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=prompt)],
        parameters=g.GenerationParameters(max_tokens=max_tokens, **params),
    )


async def stream(inference, request, delay_s: float = 0.0) -> tuple[list[int], str]:
    await asyncio.sleep(delay_s)
    tokens, text = [], []
    async for message in inference.GenerateStream(request):
        tokens.extend(message.token_ids)
        text.append(message.text)
    return tokens, "".join(text)


@pytest.fixture(scope="module")
async def engine(inference, server) -> TransformersGenerationEngine:
    await inference.Generate(unary("Hi", max_tokens=1, temperature=0))
    loaded = server.manager.get(HF_CHAT_MODEL).engine
    assert isinstance(loaded, TransformersGenerationEngine)
    return loaded


@pytest.fixture(scope="module")
async def reference():
    """An independent copy of the model and tokenizer: transformers itself reads the packaged GGUF.

    Built from the catalog's source file, never from the engine's converted cache, so a bad
    conversion or a stale cache cannot agree with itself.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = TEST_CATALOG["models"][HF_CHAT_MODEL]
    package = entry["source"].removeprefix("pkg://")
    gguf_file = entry["options"]["gguf_file"]
    (folder,) = importlib.util.find_spec(package).submodule_search_locations
    assert (Path(folder) / gguf_file).is_file()

    def load():
        # The server of this process may be building a model meanwhile: one build at a time.
        with hf_construction():
            return (
                AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file, local_files_only=True),
                AutoModelForCausalLM.from_pretrained(
                    folder, gguf_file=gguf_file, dtype=torch.float32, local_files_only=True
                ).eval(),
            )

    return await asyncio.to_thread(load)


async def generate_reference(reference, prompt: str, max_tokens: int) -> list[int]:
    """transformers' own greedy completion of the chat prompt (without the final EOS)."""
    tokenizer, model = reference

    def run() -> list[int]:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_tokens,
                do_sample=False,
            )
        completion = out[0, len(ids) :].tolist()
        return completion[:-1] if completion and completion[-1] == tokenizer.eos_token_id else completion

    return await asyncio.to_thread(run)


async def test_greedy_output_equals_model_generate(inference, reference):
    for prompt in PROMPTS[:3]:
        expected = await generate_reference(reference, prompt, 16)
        tokens, text = await stream(inference, chat(prompt, 16, temperature=0))
        assert tokens == expected, prompt
        assert text == reference[0].decode(expected, skip_special_tokens=True)


async def test_eight_staggered_streams_match_their_solo_runs(inference, engine):
    # Different prompt lengths, joining at different steps and leaving at different steps.
    requests = [chat(p, 4 + i, temperature=0) for i, p in enumerate(PROMPTS)]
    solo = [await stream(inference, r) for r in requests]
    before = scrape()
    together = await asyncio.gather(*(stream(inference, r, 0.1 * i) for i, r in enumerate(requests)))
    assert together == solo
    # Steps by batch size (ur_generation_batch_size has a bucket per size up to 8).
    sizes = observations(before, scrape(), "ur_generation_batch_size", model=engine.model_name)
    assert max(sizes) > 1, "the streams never shared a step"
    assert len(sizes) > 2, f"sequences did not join and leave at different steps: {sizes}"
    assert engine.memory_usage().ram_bytes > 0


async def test_same_seed_gives_same_text(inference):
    params = {"temperature": 1.0, "top_p": 0.95, "top_k": 50, "min_p": 0.02, "repetition_penalty": 1.1}
    first = await inference.Generate(unary("Tell me a story.", 24, seed=1234, **params))
    again = await inference.Generate(unary("Tell me a story.", 24, seed=1234, **params))
    assert first.choices[0].text == again.choices[0].text
    others = [
        (await inference.Generate(unary("Tell me a story.", 24, seed=seed, **params))).choices[0].text
        for seed in (1, 2)
    ]
    assert any(text != first.choices[0].text for text in others), "the seed changes nothing"


async def test_json_schema_output_parses_and_validates(inference):
    response_format = g.ResponseFormat(
        type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=json.dumps(SCHEMA)
    )
    response = await inference.Generate(
        unary("Describe a person as JSON.", 120, temperature=0, response_format=response_format)
    )
    choice = response.choices[0]
    assert choice.finish_reason == g.FINISH_REASON_STOP, choice.text
    jsonschema.validate(json.loads(choice.text), SCHEMA)


async def test_json_object_output_parses(inference):
    response_format = g.ResponseFormat(type=g.RESPONSE_FORMAT_TYPE_JSON_OBJECT)
    response = await inference.Generate(
        unary("Give me a JSON object.", 60, temperature=0.7, seed=3, response_format=response_format)
    )
    choice = response.choices[0]
    if choice.finish_reason == g.FINISH_REASON_STOP:
        assert isinstance(json.loads(choice.text), dict)
    else:  # cut by max_tokens: still a valid prefix of a JSON object
        assert choice.text.startswith("{")


async def test_schema_the_grammar_cannot_enforce_is_invalid_argument(inference, engine):
    # Valid JSON Schema (ECMA-262 look-behind), but not a regular language llguidance can enforce.
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}}
    response_format = g.ResponseFormat(
        type=g.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, json_schema=json.dumps(schema)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(unary("JSON please.", 8, response_format=response_format))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).reason == "INVALID_JSON_SCHEMA"
    assert engine.scheduler.active_count == 0
    healthy = await inference.Generate(unary("Hi", 2, temperature=0))
    assert healthy.usage.completion_tokens >= 1


async def test_logprobs_under_greedy(inference):
    response = await inference.Generate(
        unary("Name a colour.", 8, temperature=0, logprobs=True, top_logprobs=4)
    )
    scored = response.choices[0].logprobs
    assert len(scored) == response.usage.completion_tokens > 0
    for entry in scored:
        assert entry.sampled.logprob <= 0
        values = [t.logprob for t in entry.top_logprobs]
        assert len(values) == 4 and values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert entry.top_logprobs[0].token_id == entry.sampled.token_id
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.sampled.logprob)


async def test_logit_bias_bans_the_greedy_token(inference):
    greedy = await inference.Generate(unary("Name a colour.", 3, temperature=0, logprobs=True))
    first = greedy.choices[0].logprobs[0].sampled.token_id
    banned = await inference.Generate(
        unary(
            "Name a colour.",
            3,
            temperature=0,
            logprobs=True,
            logit_bias=[g.LogitBias(token_id=first, bias=-100)],
        )
    )
    assert banned.choices[0].logprobs[0].sampled.token_id != first


async def test_prompt_longer_than_context_is_input_too_long(inference, engine):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Generate(unary("word " * (engine.context_length + 10), 4))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).reason == "INPUT_TOO_LONG"
    healthy = await inference.Generate(unary("Hi", 2, temperature=0))
    assert healthy.usage.completion_tokens >= 1


def test_token_bytes_rebuild_multibyte_text(engine):
    text = "Zürich 😀 naïve — 東京\n"
    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [engine.token_bytes(i) for i in ids]
    assert b"".join(pieces) == text.encode("utf-8")
    assert any(not _is_utf8(p) for p in pieces), "expected a token holding part of a character"
    assert engine.token_bytes(engine.tokenizer.convert_tokens_to_ids("<|im_end|>")) == b""


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_load_estimate_matches_the_loaded_weights(engine):
    parameters = sum(p.numel() for p in engine.model.parameters())
    # float32 weights on the CPU, plus the KV cache and working memory of one prefill (required_memory)
    assert engine.estimated_load_bytes() > parameters * 4
    assert engine.memory_usage().ram_bytes >= parameters * 4
