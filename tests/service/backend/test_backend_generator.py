"""A backend process serving the default catalog's SmolLM2-135M GGUF (llama.cpp)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import grpc
import pytest
from universal_runtime.v1 import backend_service_pb2 as b
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import tokenization_pb2 as t

from engines.base import ModelSpec
from engines.executor import DeviceExecutor
from engines.types import Task
from service.convert.generation import generation_request
from tests.conftest import CHAT_MODEL, GGUF_SOURCE, error_info
from tests.service.backend.conftest import load_request, started_backend, wait_exit

pytestmark = pytest.mark.slow

OPTIONS = {"n_ctx": 2048}
QUESTION = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="What is the capital of France?")]
GREEDY = g.GenerationParameters(max_tokens=8, temperature=0)
#: SmolLM2's end-of-text, im_start and im_end: banned so that a long answer runs to max_tokens.
END_TOKENS = (0, 1, 2)
#: Up to 1,900 tokens without an end: seconds of decoding, unless a cancel ends it first.
LONG = g.GenerationParameters(
    max_tokens=1900, temperature=0, logit_bias=[g.LogitBias(token_id=i, bias=-100) for i in END_TOKENS]
)


@pytest.fixture(scope="module")
async def generator():
    """One backend for the module with the GGUF loaded as the default catalog has it."""
    async with started_backend() as backend:
        await backend.control.Load(
            load_request(CHAT_MODEL, "llama_cpp", ["generate"], GGUF_SOURCE, json.dumps(OPTIONS))
        )
        yield backend


async def in_process_text(request: g.GenerateStreamRequest) -> str:
    """The text the same engine gives for ``request`` in this process."""
    from engines.generation.llama_cpp_engine import LlamaCppGenerationEngine

    spec = ModelSpec(CHAT_MODEL, "llama_cpp", (Task.GENERATE,), GGUF_SOURCE, "cpu", dict(OPTIONS))
    executor = DeviceExecutor("cpu", "backend-reference")
    engine = LlamaCppGenerationEngine(spec, "cpu", executor)
    try:
        await executor.run(engine.configure_lane)
        await executor.run(engine.load)
        job = generation_request(request, "reference", max_tokens_limit=4096, max_choices=8)
        async with contextlib.aclosing(engine.stream(job)) as deltas:
            return "".join([delta.text async for delta in deltas])
    finally:
        await engine.drain()
        await executor.run(engine.unload)
        executor.shutdown(wait=False)


async def test_greedy_stream_equals_the_same_engine_in_process(generator):
    request = g.GenerateStreamRequest(model=CHAT_MODEL, messages=QUESTION, parameters=GREEDY)
    messages = [
        m async for m in generator.inference.GenerateStream(request, metadata=[("x-request-id", "gen-1")])
    ]
    final = messages[-1]
    assert final.finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)
    assert all(m.finish_reason == g.FINISH_REASON_UNSPECIFIED for m in messages[:-1])
    assert len({m.id for m in messages}) == 1 and messages[0].id.startswith("gen-")
    assert {m.index for m in messages} == {0}
    token_ids = [i for m in messages for i in m.token_ids]
    assert 0 < final.usage.completion_tokens == len(token_ids) <= 8
    assert final.usage.prompt_tokens > 0 and final.timings.total_ms > 0
    text = "".join(m.text for m in messages)
    assert text.strip()
    assert text == await in_process_text(request)


async def test_cancel_mid_stream_frees_the_slot_and_the_backend_serves_on(generator):
    call = generator.inference.GenerateStream(
        g.GenerateStreamRequest(model=CHAT_MODEL, messages=QUESTION, parameters=LONG)
    )
    received = 0
    async for _ in call:
        received += 1
        if received == 3:
            break
    running = await generator.control.Stats(b.StatsRequest())
    assert running.sequences_running == 1
    call.cancel()
    # The engine's sequence ends with the call, long before it could have run to max_tokens.
    for _ in range(40):
        stats = await generator.control.Stats(b.StatsRequest())
        if stats.sequences_running == 0 and stats.sequences_waiting == 0:
            break
        await asyncio.sleep(0.05)
    assert stats.has_generation
    assert (stats.sequences_running, stats.sequences_waiting) == (0, 0)
    assert stats.kv_cache.cells_total > 0
    # A next call is served in full.
    request = g.GenerateStreamRequest(model=CHAT_MODEL, messages=QUESTION, parameters=GREEDY)
    messages = [m async for m in generator.inference.GenerateStream(request)]
    assert messages[-1].finish_reason in (g.FINISH_REASON_STOP, g.FINISH_REASON_LENGTH)


async def test_tokenize_renders_the_chat_template(generator):
    tokens = await generator.inference.Tokenize(t.TokenizeRequest(model=CHAT_MODEL, messages=QUESTION))
    assert tokens.count == len(tokens.token_ids) > 5
    assert tokens.max_context_tokens == OPTIONS["n_ctx"]


async def test_bad_generation_parameters_are_the_servers_invalid_argument(generator):
    request = g.GenerateStreamRequest(
        model=CHAT_MODEL, messages=QUESTION, parameters=g.GenerationParameters(max_tokens=10**6)
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        [m async for m in generator.inference.GenerateStream(request)]
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(raised.value).metadata["field"] == "parameters.max_tokens"


async def test_embed_on_a_generation_model_is_task_not_supported(generator):
    from universal_runtime.v1 import encoders_pb2 as e

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await generator.inference.Embed(e.EmbedRequest(model=CHAT_MODEL, inputs=["hi"]))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(raised.value).reason == "TASK_NOT_SUPPORTED"


async def test_unload_cancels_a_stream_still_running_after_the_drain_then_exits_0(generator):
    # Last in the module: the backend is gone after it.
    call = generator.inference.GenerateStream(
        g.GenerateStreamRequest(model=CHAT_MODEL, messages=QUESTION, parameters=LONG)
    )
    first = await call.read()
    assert first.token_ids
    await generator.control.Unload(b.UnloadRequest(drain_timeout_ms=200))
    received = 1
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        while await call.read() is not grpc.aio.EOF:
            received += 1
    assert received < LONG.max_tokens
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(raised.value).reason == "MODEL_UNLOADING"
    assert wait_exit(generator.process, timeout=4.0) == 0  # not held up by the cancelled stream
    assert "Traceback" not in generator.log_text(), generator.log_text()[-3000:]
