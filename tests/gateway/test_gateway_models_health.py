from __future__ import annotations

import socket

import httpx
from grpc_health.v1 import health_pb2

from gateway.app import create_app
from tests.gateway.gateway_fakes import FakeServer, asgi_client


async def test_list_models(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert body["data"][0] == {
        "id": "fake-llm",
        "object": "model",
        "created": 1_700_000_000,
        "owned_by": "universal-runtime",
        "status": "ready",
        "status_detail": "Ready: loaded",
        "tasks": ["generate"],
        "device": "cpu",
        "memory": {"ram_bytes": 1234, "vram_bytes": 0},
        "required_memory": None,
        "kv_cache": {"cells_used": 53, "cells_total": 16384},
    }
    assert body["data"][1]["status"] == "not_loaded"
    assert body["data"][1]["kv_cache"] is None
    assert body["data"][1]["tasks"] == ["embed"]
    assert body["data"][1]["created"] == 0


async def test_get_model_with_slash_in_name(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.get("/v1/models/org/fake-embedder")
    assert response.status_code == 200
    assert response.json()["id"] == "org/fake-embedder"
    assert fake.models.received[-1].request.name == "org/fake-embedder"


async def test_get_unknown_model_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/models/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert response.json()["error"]["type"] == "not_found_error"


async def test_health_serving(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "SERVING"}


async def test_health_not_serving(client: httpx.AsyncClient, fake: FakeServer) -> None:
    await fake.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    response = await client.get("/health")
    assert response.status_code == 503
    assert response.json() == {"status": "NOT_SERVING"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_health_unreachable(fake: FakeServer) -> None:
    async with asgi_client(create_app(f"127.0.0.1:{closed_port()}")) as http:
        response = await http.get("/health")
        assert response.status_code == 503
        assert response.json()["status"] == "UNREACHABLE"
        # Other routes answer 503 too when the server is down.
        models = await http.get("/v1/models")
        assert models.status_code == 503
        assert models.json()["error"]["code"] == "unavailable"
