"""A shared KV pool (``kv_pool_tokens``): admission by cells, the over-the-pool error, eviction of
cached prompts, the reported size, and greedy output of a stream alone against per-sequence streams.

The scheduler's rules run on a fake engine (characters are tokens); the rest on the real GGUF
with a 512-cell pool for 4 sequences (``POOL_MODEL`` in tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import grpc
import pytest
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import model_service_pb2 as m

from engines.base import ModelSpec
from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.generation.context_size import kv_bytes_per_token
from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
from engines.generation.prompt_cache import PromptCache
from engines.generation.scheduler import ContinuousBatchScheduler
from engines.types import SamplingParams, Task
from tests.conftest import CHAT_MODEL, COLD_POOL_MODEL, GGUF_SOURCE, POOL_CELLS, POOL_MODEL, error_info
from tests.engines.generation.test_engine_template import FakeEngine, request
from tests.scrape import observations, scrape

#: SmolLM2's end-of-text, im_start and im_end: banned so that exactly max_tokens tokens come out.
END_TOKENS = (0, 1, 2)


# -- the scheduler's admission by cells (fake engine) ---------------------------------------------


@pytest.fixture
def pooled():
    """A fake engine with 3 places and a pool of 11 cells; its reply is long enough to run 6 steps."""
    engine = FakeEngine(reply="abcdefgh")
    engine.context_length = 10
    engine.scheduler = ContinuousBatchScheduler(engine, max_sequences=3, max_waiting=8, kv_pool_cells=11)
    yield engine
    engine.executor.shutdown(wait=False)


async def text_of(engine, req) -> str:
    async with contextlib.aclosing(engine.stream(req)) as deltas:
        return "".join([delta.text async for delta in deltas])


def forwards(engine) -> list[set[str]]:
    return [set(ids) for call, ids in engine.calls if call == "forward"]


async def test_a_sequence_waits_until_its_cells_fit_and_none_overtakes_it(pooled):
    # "ab" + 6 new tokens reserve 8 of the 11 cells: A and B cannot run together, though a place
    # is free. C (2 + 1 cells) would fit beside A, but it queued after B and must not pass it.
    wide = SamplingParams(max_tokens=6)
    answers = await asyncio.gather(
        text_of(pooled, request("A", params=wide)),
        text_of(pooled, request("B", params=wide)),
        text_of(pooled, request("C", params=SamplingParams(max_tokens=1))),
    )
    assert answers == ["abcdef", "abcdef", "a"]
    steps = forwards(pooled)
    assert not any({"A", "B"} <= ids for ids in steps)
    first_b = next(i for i, ids in enumerate(steps) if "B" in ids)
    assert all("C" not in ids for ids in steps[:first_b])
    assert any({"B", "C"} <= ids for ids in steps)  # then it joined B at once: 8 + 3 cells fit
    assert pooled.scheduler.kv_reserved_cells == 0


async def test_sequences_that_fit_together_run_together(pooled):
    small = SamplingParams(max_tokens=3)  # 5 cells each: two fit in 11
    assert await asyncio.gather(*(text_of(pooled, request(f"s{i}", params=small)) for i in range(2))) == [
        "abc",
        "abc",
    ]
    assert any({"s0", "s1"} <= ids for ids in forwards(pooled))


async def test_a_sequence_over_the_whole_pool_is_refused_not_left_blocking_the_queue(pooled):
    pooled.context_length = 16  # the fake engine's prepare does not check the pool: the scheduler does
    with pytest.raises(ResourceExhaustedError) as caught:
        await text_of(pooled, request("huge", params=SamplingParams(max_tokens=12)))
    assert caught.value.reason == "KV_POOL_EXHAUSTED"
    assert caught.value.metadata["kv_pool_tokens"] == "11"
    assert caught.value.metadata["needed_cells"] == "14"
    assert await text_of(pooled, request("after", params=SamplingParams(max_tokens=2))) == "ab"


def test_the_prompt_cache_evicts_least_recently_released_prompts_down_to_a_limit():
    cache = PromptCache(4)
    for slot, length in ((0, 5), (1, 7), (2, 3)):
        cache.free.remove(slot)
        cache.release(slot, list(range(length)))
    # Free now: 3 (empty), 0 (5 cells), 1 (7), 2 (3): 15 cached cells.
    assert cache.cached_cells == 15
    assert cache.evict(15) == []
    assert cache.evict(8) == [0, 1]  # 15 - 5 = 10 > 8, then 10 - 7 = 3
    assert cache.cached_cells == 3
    assert cache.tokens[0] == [] and cache.tokens[2] == [0, 1, 2]
    assert cache.evict(0) == [2] and cache.cached_cells == 0


def test_a_pool_under_256_cells_is_a_bad_catalog_option():
    spec = ModelSpec(
        name="tiny-pool",
        backend="llama_cpp",
        tasks=(Task.GENERATE,),
        source=GGUF_SOURCE,
        options={"kv_pool_tokens": 100},
    )
    with pytest.raises(InvalidArgumentError) as caught:
        LlamaCppGenerationEngine.check_spec(spec)
    assert caught.value.reason == "INVALID_MODEL_OPTION"
    assert caught.value.metadata == {"option": "kv_pool_tokens", "backend": "llama_cpp"}
    assert (
        "option kv_pool_tokens: Input should be greater than or equal to 256 (got 100)"
        in caught.value.message
    )
    LlamaCppGenerationEngine.check_spec(replace(spec, options={"kv_pool_tokens": 256}))


# -- the real GGUF in a 512-cell pool --------------------------------------------------------------


def raw(model: str, prompt: str, max_tokens: int) -> g.GenerateStreamRequest:
    bias = [g.LogitBias(token_id=t, bias=-100) for t in END_TOKENS]
    return g.GenerateStreamRequest(
        model=model,
        prompt=prompt,
        parameters=g.GenerationParameters(
            max_tokens=max_tokens, temperature=0, logprobs=True, logit_bias=bias
        ),
    )


def chat(model: str, question: str, max_tokens: int) -> g.GenerateStreamRequest:
    return g.GenerateStreamRequest(
        model=model,
        messages=[g.ChatMessage(role=g.CHAT_ROLE_USER, content=question)],
        parameters=g.GenerationParameters(max_tokens=max_tokens, temperature=0, logprobs=True),
    )


async def run(inference, req) -> tuple[list[tuple[int, float]], g.Usage]:
    """Greedy tokens with their log probabilities, and the final usage."""
    replies = [reply async for reply in inference.GenerateStream(req, timeout=180)]
    tokens = [t for reply in replies for t in reply.token_ids]
    logprobs = [lp.sampled.logprob for reply in replies for lp in reply.logprobs]
    return list(zip(tokens, logprobs, strict=True)), replies[-1].usage


async def test_prompt_plus_max_tokens_over_the_pool_is_resource_exhausted(inference, server):
    prompt = "Describe the sea. " * 60
    _, usage = await run(inference, raw(POOL_MODEL, prompt, 1))
    room = POOL_CELLS - usage.prompt_tokens
    assert room > 2
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(inference, raw(POOL_MODEL, prompt, room + 1))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = error_info(caught.value)
    assert info.reason == "KV_POOL_EXHAUSTED"
    assert info.metadata["kv_pool_tokens"] == str(POOL_CELLS)
    assert info.metadata["needed_cells"] == str(POOL_CELLS + 1)
    assert f"holds {POOL_CELLS} cells" in caught.value.details()
    # Exactly the pool fits: the sequence takes every cell.
    tokens, usage = await run(inference, raw(POOL_MODEL, prompt, room))
    assert usage.prompt_tokens + usage.completion_tokens == POOL_CELLS == usage.prompt_tokens + len(tokens)


async def test_two_requests_that_together_exceed_the_pool_both_complete_one_after_the_other(
    inference, server
):
    await run(inference, raw(POOL_MODEL, "Warm up.", 1))
    engine = server.manager.get(POOL_MODEL).engine
    await engine.scheduler.drained()
    before = scrape()
    # ~10 prompt tokens + 300 new ones each: 2 x 310 > 512 cells.
    first, second = await asyncio.gather(
        run(inference, raw(POOL_MODEL, "Tell a long story about a cat.", 300)),
        run(inference, raw(POOL_MODEL, "Tell a long story about a dog.", 300)),
    )
    assert len(first[0]) == len(second[0]) == 300
    # Steps by batch size: the second waited for the first's cells.
    after = scrape()
    assert max(observations(before, after, "ur_generation_batch_size", model=POOL_MODEL)) == 1
    # Two that fit together (2 x ~110 cells) do run together.
    await asyncio.gather(
        run(inference, raw(POOL_MODEL, "Tell a long story about a cat.", 100)),
        run(inference, raw(POOL_MODEL, "Tell a long story about a dog.", 100)),
    )
    assert max(observations(after, scrape(), "ur_generation_batch_size", model=POOL_MODEL)) == 2
    assert engine.scheduler.kv_reserved_cells == 0


async def test_cached_prompts_are_evicted_when_a_new_sequence_needs_their_cells(inference, server):
    for i in range(3):  # three ~120-token prompts stay cached in three free slots
        await run(inference, raw(POOL_MODEL, f"{i} " + "apples and pears, " * 30, 2))
    engine = server.manager.get(POOL_MODEL).engine
    await engine.scheduler.drained()
    cached = engine._prompt_cache.cached_cells
    # A ~250-cell sequence does not fit beside them: the oldest are dropped, and it runs (without
    # eviction llama_decode finds no free cells and the step fails).
    tokens, usage = await run(inference, raw(POOL_MODEL, "9 " + "plums and figs, " * 60, 20))
    assert cached + usage.prompt_tokens + 20 > POOL_CELLS
    assert len(tokens) == 20
    used, total = engine.kv_cells()
    assert total == POOL_CELLS and used <= total


async def test_the_pool_is_the_context_getmodel_and_the_kv_gauges_report(inference, models, server):
    await run(inference, raw(POOL_MODEL, "Hello.", 1))
    engine = server.manager.get(POOL_MODEL).engine
    assert engine.context_length == POOL_CELLS  # one sequence may take the whole pool
    assert engine.kv_cells()[1] == POOL_CELLS
    described = (await models.GetModel(m.GetModelRequest(name=POOL_MODEL))).model
    kv_bytes = described.memory.ram_bytes - engine.model.size()
    assert kv_bytes == POOL_CELLS * kv_bytes_per_token(engine._metadata)
    assert described.kv_cache.cells_total == POOL_CELLS
    assert 0 < described.kv_cache.cells_used <= POOL_CELLS  # the prompt the slot keeps cached
    # Models without a KV cache (encoders) and models not loaded have none to report.
    listed = (await models.ListModels(m.ListModelsRequest())).models
    without = [x for x in listed if x.backend != "llama_cpp" or x.status != m.MODEL_STATUS_READY]
    assert without and not any(model.HasField("kv_cache") for model in without)


async def test_a_stream_alone_in_the_pool_matches_per_sequence_streams_bit_for_bit(inference, server):
    # The cold pool keeps no cached prompts: a request alone finds the buffer empty, its cells
    # at the same indices as in its own stream, and attention adds up the same values.
    for question in ("Write a haiku about autumn.", "List three colours and explain each one."):
        streams, _ = await run(inference, chat(CHAT_MODEL, question, 48))
        pooled, _ = await run(inference, chat(COLD_POOL_MODEL, question, 48))
        assert len(streams) >= 20  # an answer, not an immediate end of text
        assert pooled == streams
