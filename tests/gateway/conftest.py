from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import create_app
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
