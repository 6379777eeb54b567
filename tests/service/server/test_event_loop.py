"""The event loop of the `universal-runtime` process: uvloop by default, asyncio's own
with UR_EVENT_LOOP=asyncio; gRPC calls and gateway calls work on either. The server fixture of
tests/conftest.py runs on pytest-asyncio's loop, so these start the real process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
import uvloop
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc

from service import cli
from service.event_loop import EventLoopError, loop_factory, loop_name
from tests.conftest import EMBED_MODEL, REPO_ROOT, child_server_env, free_port
from tests.launched import serving


def log_records(log: Path) -> list[dict]:
    """The JSON log lines of the process (other output, e.g. from native libraries, skipped)."""
    records = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(line))
    return records


@pytest.mark.parametrize(("env", "expected"), [({}, "uvloop"), ({"UR_EVENT_LOOP": "asyncio"}, "asyncio")])
def test_the_process_runs_both_faces_on_the_chosen_loop(
    env: dict[str, str], expected: str, catalog_path: Path, tmp_path: Path
) -> None:
    grpc_port, gateway_port = free_port(), free_port()
    gateway = f"http://127.0.0.1:{gateway_port}"
    log = tmp_path / "log"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "service.cli",
            "--grpc-host", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--gateway-host", "127.0.0.1", "--gateway-port", str(gateway_port),
            "--catalog", str(catalog_path), "--data-dir", str(tmp_path / "data"),
            "--metrics-port", "0", "--log-level", "INFO",
        ],
        cwd=REPO_ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=child_server_env(UR_SHUTDOWN_GRACE_S="1", **env),
    )  # fmt: skip
    with serving(process, log, f"{gateway}/health"):
        loops = [r["event_loop"] for r in log_records(log) if r.get("message") == "event loop"]
        assert loops == [expected], log.read_text()[-3000:]

        # gRPC face: health, and an inference call that goes through a model lane and back.
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            embedded = inference_service_pb2_grpc.InferenceServiceStub(channel).Embed(
                encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=["a cat"], normalize=True), timeout=60
            )
            assert len(embedded.embeddings) == 1 and len(embedded.embeddings[0].values) == 384
        # Gateway face: the same, over HTTP and the gateway's own channel.
        models = httpx.get(f"{gateway}/v1/models", timeout=5.0)
        assert models.status_code == 200 and EMBED_MODEL in [m["id"] for m in models.json()["data"]]
        answer = httpx.post(
            f"{gateway}/v1/embeddings", json={"model": EMBED_MODEL, "input": "a cat"}, timeout=60.0
        )
        assert answer.status_code == 200, answer.text
        vector = answer.json()["data"][0]["embedding"]
        assert vector == pytest.approx(list(embedded.embeddings[0].values), abs=1e-5)


def test_loop_names() -> None:
    for make, name in ((uvloop.new_event_loop, "uvloop"), (asyncio.new_event_loop, "asyncio")):
        loop = make()
        try:
            assert loop_name(loop) == name
        finally:
            loop.close()


def test_the_factories() -> None:
    assert loop_factory("asyncio") is asyncio.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop
    with pytest.raises(ValueError, match="'uvloop' or 'asyncio'"):
        loop_factory("trio")  # type: ignore[arg-type]


def test_without_uvloop_the_default_falls_back_and_an_explicit_choice_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    with caplog.at_level(logging.WARNING, logger="service.event_loop"):
        assert loop_factory("uvloop", explicit=False) is asyncio.new_event_loop
    assert "uvloop is not installed" in caplog.text
    with pytest.raises(EventLoopError, match="UR_EVENT_LOOP=asyncio"):
        loop_factory("uvloop", explicit=True)


def test_the_command_refuses_an_explicit_uvloop_it_cannot_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    monkeypatch.setenv("UR_EVENT_LOOP", "uvloop")
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)  # keep pytest's log capture
    # Stopped before anything starts: no forkserver, no server.
    monkeypatch.setattr(cli, "preload_modules", lambda name: pytest.fail("went past the loop check"))
    with pytest.raises(SystemExit, match="uvloop is not installed"):
        cli.main(["--no-gateway"])
