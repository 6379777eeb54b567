"""A backend process that dies takes only its own calls with it (real models: SmolLM2 GGUF, MiniLM).

While clients embed on MiniLM's backend, the chat model's backend is killed (SIGKILL, SIGSEGV)
during its streams, and a test backend aborts the way a failed ``GGML_ASSERT`` does: every embed
succeeds, the streams end at once with UNAVAILABLE / BACKEND_EXITED, the model's status says
how its backend ended, and its next request starts a fresh backend that serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc, model_service_pb2, model_service_pb2_grpc

from tests.conftest import GGUF_SOURCE, MINILM_SOURCE, REPO_ROOT, child_server_env, error_info, free_port

CHAT, EMBED, CRASHING, NEVER_LOADS = "iso-chat", "iso-embed", "iso-crashing", "iso-never-loads"
#: The crash engine's module and backend name (not imported here: it registers in the child server).
CRASH_ENGINE_MODULE = "tests.service.model_manager.backends.crash_engine"
CRASHING_BACKEND = "test_crashing_embedder"
#: Seconds the child server has to serve.
READY_S = 120.0
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
        NEVER_LOADS: {
            "tasks": ["embed"],
            "backend": CRASHING_BACKEND,
            "source": "unused",
            "options": {"abort_on_load": True},
        },
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


class ChildServer:
    """``python -m service.cli`` in a child process, with backend processes and the crash engine.

    A child, so that the crash engine registers in that server only (the pytest process's
    registry stays the shipped backends) and the server's own death can be tested.
    """

    def __init__(self, workdir: Path, **env: str) -> None:
        catalog = workdir / "catalog.yaml"
        catalog.write_text(yaml.safe_dump(CATALOG))
        self.port = free_port()
        self.log = workdir / "server.log"
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "service.cli", "--grpc-host", "127.0.0.1",
                "--grpc-port", str(self.port), "--gateway-port", str(free_port()),
                "--catalog", str(catalog), "--data-dir", str(workdir / "data"), "--metrics-port", "0",
            ],
            cwd=REPO_ROOT, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            env=child_server_env(
                UR_BACKEND_PROCESSES="true",
                UR_ENGINE_MODULES=json.dumps([CRASH_ENGINE_MODULE]),
                UR_SHUTDOWN_GRACE_S="2",
                **env,
            ),
        )  # fmt: skip

    async def ready(self) -> None:
        """Wait until gRPC health says SERVING (at most :data:`READY_S`)."""
        deadline = time.monotonic() + READY_S
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            while True:
                assert self.process.poll() is None, f"the server exited: {self.log_tail()}"
                try:
                    reply = await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=1
                    )
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                assert time.monotonic() < deadline, f"not ready in {READY_S} s: {self.log_tail()}"
                await asyncio.sleep(0.2)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended in 30 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture(scope="module")
async def iso_server(tmp_path_factory):
    server = ChildServer(tmp_path_factory.mktemp("isolation"))
    try:
        await server.ready()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield server, channel
    finally:
        server.stop()


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
    server, channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=EMBED, inputs=["warm"]))  # both backends started
    started = [asyncio.Event() for _ in range(STREAMS)]
    streams = [asyncio.create_task(_stream_until_error(inference, s)) for s in started]
    await asyncio.wait_for(asyncio.gather(*(s.wait() for s in started)), 120)
    before = await _model(channel, CHAT)
    assert psutil.Process(before.backend_process.pid).ppid() == server.process.pid
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
    assert not _alive(pid)

    # The next request starts a fresh backend, which answers.
    answer = await inference.Generate(
        g.GenerateRequest(model=CHAT, messages=USER, parameters=g.GenerationParameters(max_tokens=4))
    )
    assert answer.choices[0].text
    again = await _model(channel, CHAT)
    assert again.status_detail.startswith("Running") and again.backend_process.pid != pid
    assert again.backend_process.starts >= 2


async def test_a_ggml_abort_is_contained_like_a_kill(iso_server):
    _server, channel = iso_server
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


async def test_backend_output_and_exit_reach_the_server_log(iso_server):
    server, channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
    pid = (await _model(channel, CRASHING)).backend_process.pid
    with contextlib.suppress(grpc.aio.AioRpcError):
        await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["ggml-abort"]))
    records = [json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]
    exits = [
        r for r in records if r.get("message") == "backend process exited" and r.get("backend_pid") == pid
    ]
    assert exits and exits[-1]["signal"] == "SIGABRT" and exits[-1]["exit"] == "signal 6"
    # ggml_abort's own message, as the backend printed it, is among its last lines, and every
    # line the backend wrote is in the server's log, prefixed with its model and pid.
    assert "provoked by the test" in exits[-1]["last_output"]
    prefix = f"[backend {CRASHING} pid {pid}]"
    assert any(prefix in r.get("message", "") and "provoked by the test" in r["message"] for r in records)


async def test_unloading_a_model_ends_its_backend(iso_server):
    _server, channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
    pid = (await _model(channel, CRASHING)).backend_process.pid
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    await stub.UnloadModel(model_service_pb2.UnloadModelRequest(name=CRASHING))
    assert not _alive(pid)
    assert not (await _model(channel, CRASHING)).HasField("backend_process")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent's wait counts as ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _backends_of(server: ChildServer, channel) -> list[int]:
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))
    pid = (await _model(channel, CRASHING)).backend_process.pid
    assert psutil.Process(pid).ppid() == server.process.pid
    return [pid]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_no_backend_outlives_its_server(tmp_path, how):
    server = ChildServer(tmp_path)
    try:
        await server.ready()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            pids = await _backends_of(server, channel)
        server.process.send_signal(getattr(signal, how))
        server.process.wait(30)
        processes = []
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                processes.append(psutil.Process(pid))
        # PR_SET_PDEATHSIG kills them as the server ends; 5 s bounds the kernel's part.
        _, running = await asyncio.to_thread(psutil.wait_procs, processes, 5.0)
        assert not [p for p in running if _alive(p.pid)]
    finally:
        server.stop()


async def test_an_unresponsive_backend_is_killed_and_its_calls_end(tmp_path):
    server = ChildServer(tmp_path, UR_BACKEND_UNRESPONSIVE_S="2")
    try:
        await server.ready()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            pid = (await _backends_of(server, channel))[0]
            os.kill(pid, signal.SIGSTOP)  # answers nothing from now on, as a deadlocked backend
            inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                # The deadline only bounds the test: the backend is killed long before it.
                await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["stopped"]), timeout=60)
            assert error_info(caught.value).reason == "BACKEND_EXITED", caught.value.details()
            model = await _model(channel, CRASHING)
            assert model.status_detail == f"Error: backend exited (signal {int(signal.SIGKILL)})"
            again = await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["again"]))
            assert len(again.embeddings) == 1
    finally:
        server.stop()


async def test_a_backend_that_dies_loading_leaves_the_model_in_error_until_asked_again(iso_server):
    server, channel = iso_server
    inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
    for _ in range(2):  # each request tries again (after the backoff), and fails the same way
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await inference.Embed(e.EmbedRequest(model=NEVER_LOADS, inputs=["x"]))
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert error_info(caught.value).reason == "MODEL_LOAD_FAILED"
        details = caught.value.details()
        assert f"exited while loading (signal {int(signal.SIGABRT)})" in details
        assert "provoked by the test" not in details  # its output stays in the server's log
        assert (await _model(channel, NEVER_LOADS)).status_detail.startswith("Error:")
    assert "provoked by the test" in server.log.read_text()
    # The others serve on.
    assert len((await inference.Embed(e.EmbedRequest(model=CRASHING, inputs=["fine"]))).embeddings) == 1
