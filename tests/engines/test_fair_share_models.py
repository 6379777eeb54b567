"""Priorities and fair share on real models, with deterministic arrivals.

all-minilm-l6-v2's dynamic batcher and SmolLM2-135M's continuous-batching scheduler, built
in-process. The lane is held while the requests arrive in a fixed order (one key's backlog, then
another key's single request, or a batch-class backlog, then an interactive request); then the
order in which the model ran them is the fair queue's, not the arrival order. Each key sets
its :class:`~engines.fair_share.Caller` in ``caller_var`` directly (the server's admission chain
sets it from the call's API key).
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

from engines.base import ModelSpec
from engines.batching.time_slice import CONTENTION_WINDOW_S
from engines.embedding.sentence_transformers_engine import SentenceTransformersEmbeddingEngine
from engines.executor import DeviceExecutor
from engines.fair_share import Caller, Priority, Share, caller_var
from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine
from engines.types import EmbeddingRequest, GenerationRequest, SamplingParams, Task
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE
from tests.engines.generation.test_scheduler_admission import device_held

A, B, C = Share("team-a"), Share("team-b"), Share("team-c")
BULK = Share("nightly", Priority.BATCH)
#: Inputs of the same token count (cost), so that fair shares are whole batches' worth.
WORDS = ["apple", "river", "stone", "cloud", "green", "house", "light", "music", "paper", "table"]


async def until(condition, what: str) -> None:
    for _ in range(1000):  # bounded: 10 s
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# -- all-minilm-l6-v2's batcher ------------------------------------------------------------------


@contextlib.contextmanager
def recorded_embedder(name: str, options: dict):
    """all-minilm-l6-v2 on a lane of its own, recording the texts of each batch it runs (``.batches``)."""
    executor = DeviceExecutor(f"cpu-{name}")
    spec = ModelSpec(
        name=name, backend="sentence_transformers", tasks=(Task.EMBED,), source=MINILM_SOURCE, options=options
    )
    engine = SentenceTransformersEmbeddingEngine(spec, "cpu", executor)
    engine.load()
    batches: list[list[str]] = []
    run = engine.batcher._run_batch

    def recording(items):  # the texts of each batch, decoded from the ids the model runs
        batches.append(
            [engine.model.tokenizer.decode(item.input_ids, skip_special_tokens=True) for item in items]
        )
        return run(items)

    engine.batcher._run_batch = recording
    engine.batches = batches
    try:
        yield engine
    finally:
        engine.unload()
        executor.shutdown()


@pytest.fixture(scope="module")
def embedder():
    # Whole batches in the fair order: time slices (tested below with their own engine) off.
    with recorded_embedder("minilm-fair", {"max_batch_size": 4, "fair_batch_ms": 0}) as engine:
        yield engine


@pytest.fixture(scope="module")
def sliced_embedder():
    # A budget far below one input's device time: while two keys send work, one input per batch.
    with recorded_embedder("minilm-sliced", {"max_batch_size": 4, "fair_batch_ms": 0.001}) as engine:
        yield engine


async def embed_as(engine, share: Share, texts: list[str]) -> list[asyncio.Future]:
    """One single-text request per text under ``share``; returns once all their inputs are queued."""

    async def one(text: str) -> np.ndarray:
        caller_var.set(Caller(name=share.key, share=share, lane=share.key))
        return (await engine.embed(EmbeddingRequest(inputs=[text]))).vectors[0]

    queued = len(engine.batcher._queue)
    futures = [asyncio.ensure_future(one(text)) for text in texts]
    await until(lambda: len(engine.batcher._queue) == queued + len(texts), "the inputs to queue")
    return futures


async def run_batches(engine, arrivals: list[tuple[Share, list[str]]]) -> tuple[list[list[str]], list]:
    """Queue ``arrivals`` in order while the lane is held; the batches that ran and each text's vector."""
    # A job the last test's batches left on the lane takes its batch when it starts: let it go
    # first, so that it cannot take part of what is queued below.
    await engine.executor.run(lambda: None)
    engine.batches.clear()
    futures: list[asyncio.Future] = []
    async with device_held(engine):
        for share, texts in arrivals:
            futures += await embed_as(engine, share, texts)
    vectors = await asyncio.gather(*futures)
    return engine.batches, vectors


async def test_a_keys_single_embedding_runs_in_the_next_batch_beside_another_keys_backlog(embedder):
    lengths = {len(embedder.model.tokenizer(f"team a {w}")["input_ids"]) for w in WORDS}
    assert lengths == {len(embedder.model.tokenizer("team b single")["input_ids"])}  # one cost
    flood = [f"team a {word}" for word in WORDS] * 2
    batches, vectors = await run_batches(embedder, [(A, flood), (B, ["team b single"])])
    assert "team b single" in batches[0], batches  # FIFO would run it in the sixth batch
    assert sorted(text for batch in batches for text in batch) == sorted([*flood, "team b single"])
    alone = (await embedder.embed(EmbeddingRequest(inputs=["team b single"]))).vectors[0]
    assert float(np.dot(vectors[-1], alone)) > 0.9999  # its own vector, whichever batch it ran in


async def test_an_interactive_embedding_runs_before_a_batch_class_backlog(embedder):
    bulk = [f"nightly job {word}" for word in WORDS]
    batches, _ = await run_batches(embedder, [(BULK, bulk), (A, ["team a chat"])])
    assert batches[0] == ["team a chat"], batches  # alone: its class only
    assert sorted(text for batch in batches[1:] for text in batch) == sorted(bulk)


async def test_weights_2_to_1_fill_the_embedding_batches_2_to_1(embedder):
    heavy, light = Share("team-a", weight=2.0), Share("team-b", weight=1.0)
    a_texts, b_texts = [f"team a {w}" for w in WORDS], [f"team b {w}" for w in WORDS]
    batches, _ = await run_batches(embedder, [(heavy, a_texts[:8]), (light, b_texts[:8])])
    served = [text.split()[1] for batch in batches for text in batch]
    assert served[:12].count("a") == 8 and served[:12].count("b") == 4, batches  # both queued


async def test_while_two_keys_send_work_each_batch_is_cut_at_the_time_budget(sliced_embedder):
    await sliced_embedder.embed(EmbeddingRequest(inputs=["a first batch to time"]))  # the estimate
    flood = [f"team a {word}" for word in WORDS[:6]]
    batches, vectors = await run_batches(sliced_embedder, [(A, flood), (B, ["team b single"])])
    # 0.001 ms is less than any input's time: each batch is its first input alone, in the fair
    # order (b's single input second: its start tag equals a's first input's, which came first).
    assert batches == [[text] for text in [flood[0], "team b single", *flood[1:]]], batches
    alone = (await sliced_embedder.embed(EmbeddingRequest(inputs=["team b single"]))).vectors[0]
    assert float(np.dot(vectors[-1], alone)) > 0.9999


async def test_with_one_key_batches_stay_as_large_as_the_limits_allow(sliced_embedder):
    await asyncio.sleep(CONTENTION_WINDOW_S + 0.1)  # b's last input is older than the window
    texts = [f"team a {word}" for word in WORDS[:8]]
    batches, _ = await run_batches(sliced_embedder, [(A, texts)])
    assert [len(batch) for batch in batches] == [4, 4], batches  # max_batch_size, not the budget
    assert sorted(text for batch in batches for text in batch) == sorted(texts)


# -- SmolLM2's scheduler -------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def generator():
    spec = ModelSpec(
        name="smollm2-fair",
        backend="llama_cpp",
        tasks=(Task.GENERATE,),
        source=GGUF_SOURCE,
        options={"n_ctx": 512, "max_sequences": 1},
    )
    LlamaCppGenerationEngine.check_spec(spec)
    engine = LlamaCppGenerationEngine(spec, "cpu", DeviceExecutor("cpu-fair-generate"))
    engine.load()
    yield engine
    await engine.drain()
    await engine.executor.run(engine.unload)
    engine.executor.shutdown(wait=False)


async def start_order(engine, arrivals: list[tuple[str, Share]]) -> tuple[list[str], dict[str, str]]:
    """Stream ``arrivals`` (id, share), submitted in order while the lane is held.

    Returns the order of their first tokens (one slot: the order they were admitted) and each text.
    """
    order: list[str] = []
    texts: dict[str, str] = {}

    async def stream(request_id: str, share: Share) -> None:
        caller_var.set(Caller(name=share.key, share=share, lane=share.key))
        params = SamplingParams(max_tokens=3, temperature=0.0)
        request = GenerationRequest(request_id=request_id, prompt="The capital of France is", params=params)
        parts = []
        async with contextlib.aclosing(engine.stream(request)) as deltas:
            async for delta in deltas:
                if not parts:
                    order.append(request_id)
                parts.append(delta.text)
        texts[request_id] = "".join(parts)

    async with device_held(engine):
        tasks = [asyncio.ensure_future(stream(rid, share)) for rid, share in arrivals]
        await asyncio.sleep(0)  # each waits for its prepare on the lane, in this order
    await asyncio.gather(*tasks)
    return order, texts


async def test_a_keys_single_request_takes_the_next_slot_before_another_keys_backlog(generator):
    # "first" (a third key) takes the slot whenever the loop starts (first by class and arrival);
    # then a0 and b0 have the same start tag, and a0 came first.
    arrivals = [("first", C)] + [(f"a{i}", A) for i in range(5)] + [("b0", B)]
    order, texts = await start_order(generator, arrivals)
    assert order == ["first", "a0", "b0", "a1", "a2", "a3", "a4"]  # FIFO: b0 last
    assert len(set(texts.values())) == 1 and texts["b0"]  # greedy: the same answer for each


async def test_an_interactive_request_takes_the_next_slot_before_a_batch_class_backlog(generator):
    arrivals = [("first", C)] + [(f"bulk{i}", BULK) for i in range(4)] + [("chat", B)]
    order, _ = await start_order(generator, arrivals)
    assert order == ["first", "chat", "bulk0", "bulk1", "bulk2", "bulk3"]
