"""A server killed with kill -9 mid-batch: restarted on the same store, it takes the batch over once
the dead one's lease expires, runs only the lines without a saved result, and completes with each
custom_id exactly once in the output."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grpc
from universal_runtime.v1 import batch_pb2 as b
from universal_runtime.v1 import batch_pb2_grpc

from tests.batches.helpers import Clock, jsonl, line, make_store, parse_jsonl
from tests.conftest import REPO_ROOT, child_server_env

LINES = 24
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
        [sys.executable, "-m", "tests.batches.child_server", str(run_log)],
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
