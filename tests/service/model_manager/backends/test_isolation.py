"""A backend process that dies takes only its own calls with it (real models: SmolLM2 GGUF, MiniLM).

While clients embed on MiniLM's backend, the chat model's backend is killed (SIGKILL, SIGSEGV)
during its streams, and a test backend aborts the way a failed ``GGML_ASSERT`` does: every embed
succeeds, the streams end at once with UNAVAILABLE / BACKEND_EXITED, the model's status says
how its backend ended, and its next request starts a fresh backend that serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import grpc
import psutil
import pytest
import yaml
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2, model_service_pb2_grpc

from service.server import start_server
from service.settings import Settings
from tests.conftest import GGUF_SOURCE, MINILM_SOURCE, error_info
from tests.service.model_manager.backends.crash_engine import BACKEND as CRASHING_BACKEND

CHAT, EMBED, CRASHING = "iso-chat", "iso-embed", "iso-crashing"
CATALOG = {
    "models": {
        CHAT: {
            "tasks": ["generate"],
            "backend": "llama_cpp",
            "source": GGUF_SOURCE,
            "options": {"n_ctx": 1024, "max_sequences": 4, "n_threads": 1},
        },
        EMBED: {"tasks": ["embed"], "backend": "sentence_transformers", "source": MINILM_SOURCE},
        CRASHING: {"tasks": ["embed"], "backend": CRASHING_BACKEND, "source": "unused"},
    }
}
USER = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="Count from one to one hundred, in words.")]
#: SmolLM2's end tokens banned: a stream runs to max_tokens, so it is still running at the kill.
NO_END = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]
#: Streams running on the chat model when its backend is killed.
STREAMS = 4
#: Clients embedding meanwhile, and the calls each makes (bounded).
EMBED_CLIENTS, EMBED_CALLS = 8, 40
#: How soon after the kill every stream must have ended, seconds (the issue's goal).
STREAM_END_S = 1.0


@pytest.fixture(scope="module")
async def iso_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("isolation")
    catalog = folder / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(CATALOG))
    settings = Settings(
        grpc_port=0,
        catalog_path=catalog,
        data_dir=folder / "data",
        backend_processes=True,
        engine_modules=["tests.service.model_manager.backends.crash_engine"],
        shutdown_grace_s=2.0,
        reap_interval_s=0.2,
    )
    running = await start_server(settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield channel
    await running.stop(grace=1.0)


async def _model(channel, name: str) -> model_service_pb2.Model:
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    return (await stub.GetModel(model_service_pb2.GetModelRequest(name=name))).model


async def _stream_until_error(inference, started: asyncio.Event) -> tuple[grpc.aio.AioRpcError, float]:
    """Stream a long answer; the error that ended it and when (monotonic)."""
    request = g.GenerateStreamRequest(
        model=CHAT,
        messages=USER,
        parameters=g.GenerationParameters(max_tokens=400, temperature=0.0, logit_bias=NO_END),
    )
    try:
        async for _ in inference.GenerateStream(request):
            started.set()
    except grpc.aio.AioRpcError as exc:
        return exc, time.monotonic()
    raise AssertionError("the stream ended without an error: the backend was not killed during it")


async def _embed_clients(inference, stop: asyncio.Event) -> tuple[int, list[Exception]]:
    """Embed from :data:`EMBED_CLIENTS` clients until ``stop`` (each at most EMBED_CALLS calls)."""
    errors: list[Exception] = []
    done = 0

    async def client(index: int) -> None:
        nonlocal done
        for call in range(EMBED_CALLS):
            if stop.is_set() and call:
                return
            try:
                answer = await inference.Embed(
                    e.EmbedRequest(model=EMBED, inputs=[f"sentence {index} {call}"])
                )
                assert len(answer.embeddings) == 1
                done += 1
            except Exception as exc:  # every failure is the test's finding
                errors.append(exc)

    await asyncio.gather(*(client(i) for i in range(EMBED_CLIENTS)))
    return done, errors


@pytest.mark.parametrize("kill_signal", [signal.SIGKILL, signal.SIGSEGV])
async def test_a_killed_chat_backend_ends_only_its_streams(iso_server, kill_signal):
    channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=EMBED, inputs=["warm"]))  # both backends started
    started = [asyncio.Event() for _ in range(STREAMS)]
    streams = [asyncio.create_task(_stream_until_error(inference, s)) for s in started]
    await asyncio.wait_for(asyncio.gather(*(s.wait() for s in started)), 120)
    before = await _model(channel, CHAT)
    assert before.HasField("backend_process") and before.backend_process.pid != os.getpid()
    pid = before.backend_process.pid

    stop_embedding = asyncio.Event()
    embedding = asyncio.create_task(_embed_clients(inference, stop_embedding))
    await asyncio.sleep(0.3)  # embeds in flight when the chat backend dies
    killed_at = time.monotonic()
    os.kill(pid, kill_signal)
    ended = await asyncio.wait_for(asyncio.gather(*streams), 30)
    stop_embedding.set()
    embeds, embed_errors = await embedding

    assert embed_errors == [] and embeds >= EMBED_CLIENTS
    for error, at in ended:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        assert error_info(error).reason == "BACKEND_EXITED"
        assert at - killed_at < STREAM_END_S
    after = await _model(channel, CHAT)
    assert after.status_detail == f"Error: backend exited (signal {int(kill_signal)})"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    # The next request starts a fresh backend, which answers.
    answer = await inference.Generate(
        g.GenerateRequest(model=CHAT, messages=USER, parameters=g.GenerationParameters(max_tokens=4))
    )
    assert answer.choices[0].text
    again = await _model(channel, CHAT)
    assert again.status_detail.startswith("Running") and again.backend_process.pid != pid
    assert again.backend_process.starts >= 2


async def test_a_ggml_abort_is_contained_like_a_kill(iso_server):
    channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["ggml-abort"]))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(caught.value).reason == "BACKEND_EXITED"
    assert error_info(caught.value).metadata["exit"] == f"signal {int(signal.SIGABRT)}"
    model = await _model(channel, CRASHING)
    assert model.status_detail == f"Error: backend exited (signal {int(signal.SIGABRT)})"
    # The other models never noticed; the crashed one serves again on its next call.
    assert len((await inference.Embed(e.EmbedRequest(model=EMBED, inputs=["still here"]))).embeddings) == 1
    assert len((await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["again"]))).embeddings) == 1


async def test_backend_output_and_exit_reach_the_server_log(iso_server, caplog):
    channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
    with caplog.at_level("INFO", logger="service"), contextlib.suppress(grpc.aio.AioRpcError):
        await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["ggml-abort"]))
    exits = [r for r in caplog.records if r.getMessage() == "backend process exited"]
    assert exits and exits[-1].signal == "SIGABRT"
    # ggml_abort's own message, as the backend printed it, is among its last lines.
    assert "provoked by the test" in exits[-1].last_output


async def test_unloading_a_model_ends_its_backend(iso_server):
    channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
    pid = (await _model(channel, CRASHING)).backend_process.pid
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    await stub.UnloadModel(model_service_pb2.UnloadModelRequest(name=CRASHING))
    process = psutil.Process(pid) if psutil.pid_exists(pid) else None
    if process is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            assert process.status() == psutil.STATUS_ZOMBIE
    assert not (await _model(channel, CRASHING)).HasField("backend_process")


async def test_stopping_the_server_ends_every_backend(tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(yaml.safe_dump({"models": {CRASHING: CATALOG["models"][CRASHING]}}))
    settings = Settings(
        grpc_port=0,
        catalog_path=catalog,
        data_dir=tmp_path / "data",
        backend_processes=True,
        engine_modules=["tests.service.model_manager.backends.crash_engine"],
    )
    running = await start_server(settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
        await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
        pid = (await _model(channel, CRASHING)).backend_process.pid
    assert psutil.Process(pid).ppid() == os.getpid()
    await running.stop(grace=1.0)
    assert not psutil.pid_exists(pid)
