from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import create_app
from tests.conftest import MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import FakeServer, asgi_client, run_fake_server


@pytest.fixture(scope="session")
async def fake_server() -> AsyncIterator[FakeServer]:
    async with run_fake_server() as server:
        yield server


@pytest.fixture
async def fake(fake_server: FakeServer) -> FakeServer:
    await fake_server.reset()
    return fake_server


@pytest.fixture
async def client(fake: FakeServer) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(create_app(fake.target)) as http:
        yield http


@pytest.fixture(scope="module", params=["grpc", "in-process"])
async def gateway_to_server(server, request) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the gateway in front of the real server: over gRPC (standalone), and with the
    combined process's in-process calls."""
    wrap = server.in_process.channel if request.param == "in-process" else None
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES, wrap_channel=wrap)
    async with asgi_client(app) as client:
        yield client
