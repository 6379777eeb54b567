"""``UR_GATEWAY_WORKERS``: several gateway processes serve one port and stop together on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys

import httpx

from tests.conftest import REPO_ROOT, child_server_env, free_port
from tests.gateway.gateway_fakes import FakeServer


async def test_two_workers_share_the_port_and_stop_on_sigterm(fake: FakeServer) -> None:
    port = free_port()
    env = child_server_env(
        UR_GATEWAY_WORKERS="2", UR_GATEWAY_GRPC_TARGET=fake.target, UR_GATEWAY_PORT=str(port)
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", cwd=REPO_ROOT, env=env
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(200):  # the workers start in about a second each
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            # Fresh connections: the kernel hands them to either worker; each answers in full.
            for _ in range(6):
                response = await http.get("/v1/models", headers={"connection": "close"})
                assert response.status_code == 200
                assert response.json()["object"] == "list"
                assert response.headers["x-request-id"]
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
