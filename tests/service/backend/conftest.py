"""Backend processes (``python -m service.backend``) started as real children, and their channels."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from universal_runtime.v1 import backend_service_pb2 as b
from universal_runtime.v1 import backend_service_pb2_grpc, inference_service_pb2_grpc

from tests.conftest import REPO_ROOT, child_server_env

#: Seconds a backend has to bind its socket, and to exit once told to.
START_S, EXIT_S = 30.0, 30.0


@dataclass
class Backend:
    """A started backend: its process, socket, log and stubs over one channel."""

    process: subprocess.Popen
    socket: Path
    log: Path
    channel: grpc.aio.Channel
    control: backend_service_pb2_grpc.BackendServiceStub
    inference: inference_service_pb2_grpc.InferenceServiceStub

    def log_text(self) -> str:
        """What the backend wrote to stderr so far."""
        return self.log.read_text(errors="replace")


def backend_command(socket: Path, parent_pid: int, settings_json: str | None = None) -> list[str]:
    """The command line that starts a backend on ``socket`` for the server ``parent_pid``."""
    command = [
        sys.executable,
        "-m",
        "service.backend",
        "--socket",
        str(socket),
        "--parent-pid",
        str(parent_pid),
    ]
    return command if settings_json is None else [*command, "--settings-json", settings_json]


def wait_for_socket(process: subprocess.Popen, socket: Path, log: Path) -> None:
    """Wait until the backend's socket exists (fails the test if it exits or takes too long)."""
    deadline = time.monotonic() + START_S
    while not socket.is_socket():
        assert process.poll() is None, f"backend exited with {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no socket in {START_S} s:\n{log.read_text()}"
        time.sleep(0.05)


def spawn_backend(settings_json: str | None = None) -> tuple[subprocess.Popen, Path, Path]:
    """Start a backend as this process's child on a fresh socket: the process, its socket and its log."""
    folder = Path(tempfile.mkdtemp(prefix="ur-b-"))  # short: a socket path holds at most 107 bytes
    socket, log = folder / "b.sock", folder / "stderr.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            backend_command(socket, os.getpid(), settings_json),
            cwd=REPO_ROOT,
            env=child_server_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return process, socket, log


@contextlib.asynccontextmanager
async def started_backend(settings_json: str | None = None) -> AsyncIterator[Backend]:
    """A backend serving on its socket, with a channel to it; killed at the end if still running."""
    process, socket, log = spawn_backend(settings_json)
    try:
        await asyncio.to_thread(wait_for_socket, process, socket, log)
        async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
            yield Backend(
                process,
                socket,
                log,
                channel,
                backend_service_pb2_grpc.BackendServiceStub(channel),
                inference_service_pb2_grpc.InferenceServiceStub(channel),
            )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(socket.parent, ignore_errors=True)


def wait_exit(process: subprocess.Popen, timeout: float = EXIT_S) -> int:
    """The backend's exit status once it has exited (within ``timeout`` seconds)."""
    return process.wait(timeout=timeout)


@pytest.fixture
async def bare_backend() -> AsyncIterator[Backend]:
    """A backend with no model loaded (cheap: no model runtime is imported)."""
    async with started_backend() as backend:
        yield backend


def load_request(
    model: str, backend: str, tasks: list[str], source: str, options_json: str = ""
) -> b.LoadRequest:
    """A LoadRequest for the CPU."""
    return b.LoadRequest(
        model=model, backend=backend, tasks=tasks, source=source, device="cpu", options_json=options_json
    )
