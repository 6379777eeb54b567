from __future__ import annotations

import httpx
import pytest

from gateway import cli
from gateway.app import create_app
from gateway.settings import DEFAULT_MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import FakeServer, asgi_client

CHAT = {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}]}


async def test_request_id_propagated_and_echoed(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "req-abc.123"})
    assert response.headers["x-request-id"] == "req-abc.123"
    assert fake.inference.received[0].metadata["x-request-id"] == "req-abc.123"


async def test_request_id_generated(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.get("/v1/models")
    generated = response.headers["x-request-id"]
    assert len(generated) == 32
    assert fake.models.received[0].metadata["x-request-id"] == generated


async def test_malformed_request_id_replaced(client: httpx.AsyncClient, fake: FakeServer) -> None:
    response = await client.get("/v1/models", headers={"x-request-id": "bad id with spaces"})
    assert response.headers["x-request-id"] != "bad id with spaces"
    assert fake.models.received[0].metadata["x-request-id"] == response.headers["x-request-id"]


async def test_request_id_on_error_responses(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={}, headers={"x-request-id": "err-1"})
    assert response.status_code == 400
    assert response.headers["x-request-id"] == "err-1"


async def test_no_authorization_forwarded_without_api_key(
    client: httpx.AsyncClient, fake: FakeServer
) -> None:
    await client.get("/v1/models", headers={"authorization": "Bearer whatever"})
    assert "authorization" not in fake.models.received[0].metadata


async def test_api_key_required_and_forwarded(fake: FakeServer) -> None:
    async with asgi_client(create_app(fake.target, api_key="sekrit")) as http:
        missing = await http.post("/v1/chat/completions", json=CHAT)
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "invalid_api_key"
        assert missing.json()["error"]["type"] == "authentication_error"
        wrong = await http.get("/v1/models", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert fake.inference.received == [] and fake.models.received == []

        ok = await http.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sekrit"})
        assert ok.status_code == 200
        assert fake.inference.received[0].metadata["authorization"] == "Bearer sekrit"
        # The server compares byte for byte: the canonical form is forwarded.
        lenient = await http.get("/v1/models", headers={"authorization": "bearer  sekrit"})
        assert lenient.status_code == 200
        assert fake.models.received[0].metadata["authorization"] == "Bearer sekrit"
        # Probes do not need the key.
        assert (await http.get("/health")).status_code == 200


async def test_routes_fail_clearly_without_lifespan(fake: FakeServer) -> None:
    app = create_app(fake.target)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        response = await http.get("/v1/models")
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"


def test_invalid_max_message_bytes() -> None:
    with pytest.raises(ValueError, match="positive"):
        create_app("127.0.0.1:1", max_message_bytes=0)


def test_openapi_schema_builds() -> None:
    schema = create_app("127.0.0.1:1").openapi()
    assert {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health"} <= set(
        schema["paths"]
    )


def test_cli_settings_from_env_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UR_GATEWAY_GRPC_TARGET", "10.0.0.1:6000")
    monkeypatch.setenv("UR_GATEWAY_PORT", "9000")
    monkeypatch.setenv("UR_GATEWAY_API_KEY", "from-env")
    settings = cli.load_settings(["--port", "9100", "--host", "0.0.0.0"])
    assert settings.grpc_target == "10.0.0.1:6000"
    assert settings.port == 9100
    assert settings.host == "0.0.0.0"
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "from-env"
    assert settings.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES


def test_cli_rejects_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit):
        cli.load_settings(["--port", "70000"])
    monkeypatch.setenv("UR_GATEWAY_MAX_MESSAGE_BYTES", "-5")
    with pytest.raises(SystemExit):
        cli.load_settings([])


def test_cli_main_runs_uvicorn(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {}

    def fake_run(app, https, **kwargs):
        calls["app"] = app
        calls["https"] = https
        calls.update(kwargs)

    monkeypatch.setattr(cli, "run_uvicorn", fake_run)
    cli.main(["--grpc-target", "127.0.0.1:50051", "--host", "127.0.0.1", "--port", "8123", "--api-key", "k"])
    assert calls["host"] == "127.0.0.1" and calls["port"] == 8123
    assert calls["https"] is None  # no UR_GATEWAY_TLS_* set: plain HTTP
    config = calls["app"].state.config
    assert config.grpc_target == "127.0.0.1:50051"
    assert config.api_key == "k"
