"""A server killed with kill -9 mid-batch: restarted on the same store, it takes the batch over once
the dead one's lease expires, runs only the lines without a saved result, and completes with each
custom_id exactly once in the output."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import httpx
from universal_runtime.v1 import batch_pb2 as b
from universal_runtime.v1 import batch_pb2_grpc

from tests.conftest import EMBED_MODEL, REPO_ROOT, child_server_env, free_port
from tests.service.batches.helpers import Clock, jsonl, line, make_store, parse_jsonl

LINES = 24
LINES_REAL = 160
CONCURRENCY = 2


def start(data_dir: Path, catalog: Path, run_log: Path, log: Path) -> tuple[subprocess.Popen, int]:
    """A child server on the shared data dir; its gRPC port once it serves."""
    env = child_server_env(
        UR_DATA_DIR=str(data_dir),
        UR_CATALOG_PATH=str(catalog),
        UR_GRPC_PORT="0",
        UR_METRICS_PORT="0",
        UR_BATCH_LEASE_S="2",
        UR_BATCH_SCAN_INTERVAL_S="0.5",
        UR_BATCH_LINE_CONCURRENCY=str(CONCURRENCY),
        LINE_S="0.15",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.service.batches.child_server", str(run_log)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("ab"),
        text=True,
    )
    port = process.stdout.readline().strip()
    assert port.isdigit(), log.read_text()[-3000:]
    return process, int(port)


def tail(log: Path) -> str:
    """The end of a server's log, for a failure's message."""
    return log.read_text()[-3000:]


async def wait_for(predicate, what: str, log: Path) -> None:
    for _ in range(600):  # at most 60 s: the batch takes ~2 s, the takeover ~2 s more
        if await predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} did not happen:\n{tail(log)}")


async def test_kill_9_mid_batch_then_restart_completes_with_each_custom_id_once(tmp_path, catalog_path):
    data_dir, run_log, log = tmp_path / "data", tmp_path / "runs.txt", tmp_path / "server.log"
    run_log.touch()
    first, port = start(data_dir, catalog_path, run_log, log)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = batch_pb2_grpc.BatchServiceStub(channel)
            data = jsonl(*(line(f"line-{i:02d}") for i in range(LINES)))
            file = (
                await stub.CreateFile(iter([b.CreateFileRequest(filename="in", purpose="batch", data=data)]))
            ).file
            batch = (
                await stub.CreateBatch(b.CreateBatchRequest(input_file_id=file.id, endpoint="/v1/embeddings"))
            ).batch

            async def some_ran() -> bool:
                return len(run_log.read_text().split()) >= 8

            await wait_for(some_ran, "8 lines running", log)
    finally:
        first.kill()  # SIGKILL: no shutdown, the lease stays held
        first.wait()
    saved = sorted(make_store(data_dir / "batches", Clock()).results(batch.id))
    runs_before = Counter(run_log.read_text().split())
    assert 1 <= len(saved) < LINES, saved  # killed mid-batch, some results saved
    second, port = start(data_dir, catalog_path, run_log, log)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = batch_pb2_grpc.BatchServiceStub(channel)

            async def done() -> bool:
                got = (await stub.GetBatch(b.GetBatchRequest(id=batch.id))).batch
                return got.status == b.BATCH_STATUS_COMPLETED

            await wait_for(done, "the batch completing", log)
            batch = (await stub.GetBatch(b.GetBatchRequest(id=batch.id))).batch
            content = b"".join(
                [m.data async for m in stub.GetFileContent(b.GetFileContentRequest(id=batch.output_file_id))]
            )
    finally:
        second.terminate()
        assert second.wait(timeout=30) == 0, log.read_text()[-3000:]
    out = parse_jsonl(content)
    assert sorted(x["custom_id"] for x in out) == [f"line-{i:02d}" for i in range(LINES)]  # each exactly once
    assert (batch.request_counts.completed, batch.request_counts.failed, batch.error_file_id) == (
        LINES,
        0,
        "",
    )
    runs = Counter(run_log.read_text().split())
    assert set(runs) == {f"line-{i:02d}" for i in range(LINES)}
    # A line whose result was saved before the kill never ran again; only lines that had started
    # and were not saved at the kill (running, or answered and waiting for their save) ran twice.
    assert all(runs[f"line-{i:02d}"] == 1 for i in saved)
    twice = {name for name, count in runs.items() if count > 1}
    assert twice <= set(runs_before) - {f"line-{i:02d}" for i in saved}
    assert all(count <= 2 for count in runs.values())


def start_cli(data_dir: Path, catalog: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """``universal-runtime`` (the CLI: server, gateway, the real line executor) on ``data_dir``."""
    gateway = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "service.cli",
            "--grpc-host", "127.0.0.1", "--grpc-port", str(free_port()),
            "--gateway-host", "127.0.0.1", "--gateway-port", gateway.rsplit(":", 1)[1],
            "--catalog", str(catalog), "--data-dir", str(data_dir),
        ],
        cwd=REPO_ROOT, env=child_server_env(UR_BATCH_LEASE_S="2", UR_BATCH_SCAN_INTERVAL_S="0.5"),
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    for _ in range(600):  # at most 60 s (READY_S)
        assert process.poll() is None, tail(log)
        try:
            if httpx.get(f"{gateway}/health", timeout=1.0).status_code == 200:
                return process, gateway
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not ready:\n{tail(log)}")


def test_the_real_runtime_killed_mid_batch_resumes_it_without_rerunning_saved_lines(tmp_path, catalog_path):
    """The same with ``universal-runtime`` itself: gateway, real line executor, MiniLM embeddings."""
    data_dir, log = tmp_path / "data", tmp_path / "runtime.log"
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "the",
        "lazy",
        "dog",
        "while",
        "batches",
        "run",
        "at",
        "night",
    ]
    texts = [" ".join(words[(i + j) % len(words)] for j in range(120)) for i in range(LINES_REAL)]
    data = jsonl(*(line(f"emb-{i:03d}", model=EMBED_MODEL, input=text) for i, text in enumerate(texts)))
    store = make_store(data_dir / "batches", Clock())
    first, gateway = start_cli(data_dir, catalog_path, log)
    try:
        file = httpx.post(
            f"{gateway}/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"}
        )
        assert file.status_code == 200, file.text
        batch = httpx.post(
            f"{gateway}/v1/batches",
            json={
                "input_file_id": file.json()["id"],
                "endpoint": "/v1/embeddings",
                "completion_window": "24h",
            },
        ).json()
        for _ in range(1200):  # at most 60 s; the first results come within seconds
            if len(store.results(batch["id"])) >= 8:
                break
            time.sleep(0.05)
    finally:
        first.kill()  # SIGKILL mid-batch
        first.wait()
    saved = store.results(batch["id"])
    assert 8 <= len(saved) < LINES_REAL, len(saved)
    second, gateway = start_cli(data_dir, catalog_path, log)
    try:
        for _ in range(1200):  # at most 120 s for the rest of the lines
            done = httpx.get(f"{gateway}/v1/batches/{batch['id']}").json()
            if done["status"] == "completed":
                break
            time.sleep(0.1)
        assert done["status"] == "completed", done
        out = parse_jsonl(httpx.get(f"{gateway}/v1/files/{done['output_file_id']}/content").content)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0, tail(log)
    assert done["request_counts"] == {"total": LINES_REAL, "completed": LINES_REAL, "failed": 0}
    assert [x["custom_id"] for x in out] == [f"emb-{i:03d}" for i in range(LINES_REAL)]  # each once, in order
    assert all(len(x["response"]["body"]["data"][0]["embedding"]) == 384 for x in out)
    # The lines saved before the kill kept their first run: the same request id, not a second run.
    for index, result in saved.items():
        assert out[index]["response"]["request_id"] == result.request_id
    assert "Traceback" not in log.read_text(), tail(log)
