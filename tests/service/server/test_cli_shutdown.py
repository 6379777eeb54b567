"""SIGTERM on the `universal-runtime` process: streams on both faces get the grace, then end with
an error event (SSE) or a status (gRPC), never a silent cut; no traceback; an idle server exits
quickly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import CHAT_MODEL, REPO_ROOT, child_server_env, free_port


class Runtime:
    """The CLI in a child process, with its log captured to a file."""

    def __init__(self, catalog_path: Path, data_dir: Path, log: Path, grace_s: float) -> None:
        self.gateway = f"http://127.0.0.1:{free_port()}"
        env = child_server_env(UR_SHUTDOWN_GRACE_S=str(grace_s))
        self.log = log
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "service.cli",
                "--grpc-host", "127.0.0.1", "--grpc-port", str(free_port()),
                "--gateway-host", "127.0.0.1", "--gateway-port", self.gateway.rsplit(":", 1)[1],
                "--catalog", str(catalog_path), "--data-dir", str(data_dir),
            ],
            cwd=REPO_ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.gateway}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready in {timeout_s}s:\n{self.log.read_text()}")

    def terminate(self) -> float:
        """SIGTERM, then the seconds until the process exited (killed after 30 s)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        return time.monotonic() - started


@pytest.fixture
def runtime_factory(catalog_path, tmp_path):
    started: list[Runtime] = []

    def start(grace_s: float) -> Runtime:
        runtime = Runtime(
            catalog_path, tmp_path / f"data{len(started)}", tmp_path / f"log{len(started)}", grace_s
        )
        started.append(runtime)
        runtime.wait_ready()
        return runtime

    yield start
    for runtime in started:
        if runtime.process.poll() is None:
            runtime.process.kill()
            runtime.process.wait()


def stream_through_sigterm(runtime: Runtime, body: dict) -> list[str]:
    """Open an SSE chat stream, send SIGTERM after its first event, and read it to its end."""
    events: list[str] = []
    with httpx.stream("POST", f"{runtime.gateway}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
                break
        runtime.process.send_signal(signal.SIGTERM)
        events += [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    runtime.process.wait(timeout=30)
    return events


def test_an_idle_server_exits_promptly_and_cleanly(runtime_factory):
    runtime = runtime_factory(grace_s=10.0)
    seconds = runtime.terminate()
    assert runtime.process.returncode == 0
    assert "Traceback" not in runtime.log.read_text()
    print(f"idle shutdown: {seconds:.2f} s")
    assert seconds <= 2.0, f"idle shutdown took {seconds:.1f}s"


def test_an_sse_stream_cut_by_shutdown_ends_with_an_error_event(runtime_factory):
    runtime = runtime_factory(grace_s=1.0)
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Tell a very long story."}],
        "max_tokens": 1800,  # far more than the grace period lets it produce
        # The end-of-text tokens (<|endoftext|>, <|im_start|>, <|im_end|>: ids 0-2) are banned, so
        # the story cannot end on its own within the grace.
        "logit_bias": {"0": -100, "1": -100, "2": -100},
        "stream": True,
    }
    events = stream_through_sigterm(runtime, body)
    assert runtime.process.returncode == 0
    last = events[-1]
    assert last != "[DONE]", "1,800 tokens cannot finish within a 1 s grace"
    assert "error" in json.loads(last), f"the stream was cut silently; last event: {last[:200]}"
    assert len(events) > 2  # it went on streaming during the grace
    assert "Traceback" not in runtime.log.read_text(), runtime.log.read_text()[-3000:]


def test_an_sse_stream_that_fits_the_grace_finishes(runtime_factory):
    runtime = runtime_factory(grace_s=20.0)
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 40,
        "stream": True,
    }
    events = stream_through_sigterm(runtime, body)
    assert events[-1] == "[DONE]"
    assert runtime.process.returncode == 0
    assert "Traceback" not in runtime.log.read_text(), runtime.log.read_text()[-3000:]
