"""The backend process's life: it dies with its server, stops on SIGTERM, and reports failed loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import pytest
from universal_runtime.v1 import backend_service_pb2 as b
from universal_runtime.v1 import encoders_pb2 as e

from service.backend.process import ORPHANED_EXIT_CODE
from service.backend.settings import settings_from_json
from service.model_manager.backends.launcher import BACKEND_SETTINGS, backend_settings_json
from service.settings import Settings
from tests.conftest import REPO_ROOT, child_server_env, error_info
from tests.service.backend.conftest import backend_command, load_request, started_backend, wait_exit

#: A server stand-in: starts a backend for itself, prints its pid, then waits to be killed.
INTERMEDIATE = """
import os, subprocess, sys, time
backend = subprocess.Popen(sys.argv[1:] + ["--parent-pid", str(os.getpid())])
print(backend.pid, flush=True)
time.sleep(600)
"""


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_backend_dies_within_2_s_when_its_server_is_killed():
    socket = Path(tempfile.mkdtemp(prefix="ur-b-")) / "b.sock"
    command = [sys.executable, "-m", "service.backend", "--socket", str(socket)]
    parent = subprocess.Popen(
        [sys.executable, "-c", INTERMEDIATE, *command],
        cwd=REPO_ROOT,
        env=child_server_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        backend_pid = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while not socket.is_socket():  # serving: past its set-up
            assert not gone(backend_pid), "the backend exited on its own"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        parent.kill()  # SIGKILL: the server gets no chance to stop its backends
        parent.wait()
        deadline = time.monotonic() + 2.0
        while not gone(backend_pid):
            assert time.monotonic() < deadline, "the backend outlived its server by 2 s"
            time.sleep(0.02)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_backend_whose_server_is_gone_already_exits_at_once():
    socket = Path(tempfile.mkdtemp(prefix="ur-b-")) / "b.sock"
    # Not this process's pid: as if the server died before the backend could watch it.
    process = subprocess.run(
        backend_command(socket, os.getpid() + 1_000_000),
        cwd=REPO_ROOT,
        env=child_server_env(),
        capture_output=True,
        timeout=30,
    )
    assert process.returncode == ORPHANED_EXIT_CODE
    assert not socket.exists()


async def test_sigterm_stops_the_backend_with_status_0(bare_backend):
    assert not (await bare_backend.control.Health(b.HealthRequest())).serving
    bare_backend.process.send_signal(signal.SIGTERM)
    assert wait_exit(bare_backend.process) == 0
    assert "Traceback" not in bare_backend.log_text(), bare_backend.log_text()[-3000:]


async def test_calls_before_a_load_are_unavailable(bare_backend):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await bare_backend.inference.Embed(e.EmbedRequest(model="m", inputs=["hi"]))
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    stats = await bare_backend.control.Stats(b.StatsRequest())
    assert stats.memory.ram_bytes == 0 and not stats.has_encoder


async def test_an_unknown_backend_is_failed_precondition_and_the_backend_loads_no_more(bare_backend):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await bare_backend.control.Load(load_request("m", "no_such_backend", ["embed"], "/nowhere"))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(raised.value).reason == "UNKNOWN_BACKEND"
    assert not (await bare_backend.control.Health(b.HealthRequest())).serving
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await bare_backend.control.Load(load_request("m", "no_such_backend", ["embed"], "/nowhere"))
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await bare_backend.control.Unload(b.UnloadRequest())
    assert wait_exit(bare_backend.process) == 0


async def test_a_malformed_load_request_is_invalid_argument(bare_backend):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await bare_backend.control.Load(load_request("m", "sentence_transformers", ["embed"], "/x", "[1]"))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(raised.value).metadata["field"] == "options_json"


@pytest.mark.slow
async def test_a_load_that_raises_is_internal_with_the_exception_in_the_message():
    folder = tempfile.mkdtemp(prefix="ur-empty-")  # a folder with no model in it
    async with started_backend() as backend:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await backend.control.Load(load_request("m", "sentence_transformers", ["embed"], folder))
        assert raised.value.code() == grpc.StatusCode.INTERNAL
        assert error_info(raised.value).reason == "MODEL_LOAD_FAILED"
        details = raised.value.details()
        assert details.startswith("model 'm' failed to load: ") and "Error" in details, details


def test_backend_settings_carry_the_limits_and_no_secret(monkeypatch):
    monkeypatch.delenv("UR_API_KEY", raising=False)
    settings = Settings(api_key="secret-key", max_tokens_limit=64, max_choices=2, max_batch_inputs=16)
    text = backend_settings_json(settings)
    assert "secret-key" not in text
    assert set(json.loads(text)) == BACKEND_SETTINGS
    parsed = settings_from_json(text)
    assert (parsed.max_tokens_limit, parsed.max_choices, parsed.max_batch_inputs) == (64, 2, 16)
    # A whole settings dump passed by mistake still hands the backend no key.
    dump = json.dumps({**settings.model_dump(mode="json"), "api_key": "secret-key"})
    assert settings_from_json(dump).api_key is None
