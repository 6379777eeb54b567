"""CORS: off by default; allowed origins get the preflight and response headers, others do not."""

from __future__ import annotations

import pytest
from starlette.middleware.cors import CORSMiddleware

from gateway import cli
from gateway.app import create_app
from gateway.cors import parse_cors_origins
from service import cli as service_cli
from service.settings import Settings
from tests.gateway.gateway_fakes import FakeServer, asgi_client

ALLOWED = "https://app.example.com"
OTHER = "https://evil.example.net"
CHAT = {"model": "fake-llm", "messages": [{"role": "user", "content": "Hi"}]}
# What the browser build of the OpenAI SDK asks for before a chat call.
PREFLIGHT = {
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type, x-request-id, x-stainless-os",
}


async def test_cors_is_off_by_default(fake: FakeServer) -> None:
    async with asgi_client(create_app(fake.target)) as http:
        preflight = await http.options("/v1/chat/completions", headers={"origin": ALLOWED, **PREFLIGHT})
        answer = await http.get("/v1/models", headers={"origin": ALLOWED})
    assert "access-control-allow-origin" not in preflight.headers
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers
    assert cli.load_settings([]).cors_origins == ""
    assert Settings().gateway_cors_origins == ""


async def test_preflight_from_an_allowed_origin_gets_the_headers(fake: FakeServer) -> None:
    # With an API key: a preflight carries no credentials and must still pass.
    app = create_app(fake.target, api_key="k", cors_origins=[ALLOWED, "http://localhost:3000"])
    async with asgi_client(app) as http:
        preflight = await http.options("/v1/chat/completions", headers={"origin": ALLOWED, **PREFLIGHT})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == ALLOWED
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed_headers = preflight.headers["access-control-allow-headers"].lower()
        for header in ("authorization", "content-type", "x-request-id", "x-stainless-os"):
            assert header in allowed_headers

        answer = await http.post(
            "/v1/chat/completions", json=CHAT, headers={"origin": ALLOWED, "authorization": "Bearer k"}
        )
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == ALLOWED
        assert "x-request-id" in answer.headers["access-control-expose-headers"].lower()
        # Errors carry the headers too, so a browser client can read them.
        refused = await http.post("/v1/chat/completions", json=CHAT, headers={"origin": ALLOWED})
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == ALLOWED


async def test_preflight_from_another_origin_gets_no_headers(fake: FakeServer) -> None:
    async with asgi_client(create_app(fake.target, cors_origins=[ALLOWED])) as http:
        preflight = await http.options("/v1/chat/completions", headers={"origin": OTHER, **PREFLIGHT})
        answer = await http.get("/v1/models", headers={"origin": OTHER})
        odd_header = await http.options(
            "/v1/models",
            headers={
                "origin": ALLOWED,
                "access-control-request-method": "GET",
                "access-control-request-headers": "x-not-allowed",
            },
        )
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in answer.headers
    assert odd_header.status_code == 400


async def test_star_allows_any_origin(fake: FakeServer) -> None:
    async with asgi_client(create_app(fake.target, cors_origins=["*"])) as http:
        preflight = await http.options("/v1/chat/completions", headers={"origin": OTHER, **PREFLIGHT})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] in ("*", OTHER)


def test_parse_cors_origins() -> None:
    assert parse_cors_origins("") == ()
    assert parse_cors_origins(" , ") == ()
    assert parse_cors_origins(f" {ALLOWED} ,http://localhost:3000,http://[::1]:8080") == (
        ALLOWED,
        "http://localhost:3000",
        "http://[::1]:8080",
    )


BAD_ORIGINS = [
    "https://app.example.com/",  # trailing slash: a browser never sends one
    "https://app.example.com/path",
    "app.example.com",
    "ftp://app.example.com",
    "https://app.example.com:port",
    "https://",
    "*,https://app.example.com",
]


@pytest.mark.parametrize("value", BAD_ORIGINS)
def test_malformed_origins_are_refused_everywhere(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="CORS origin"):
        parse_cors_origins(value)
    with pytest.raises(ValueError, match="CORS origin"):
        create_app("127.0.0.1:1", cors_origins=value.split(","))
    monkeypatch.setenv("UR_GATEWAY_CORS_ORIGINS", value)
    with pytest.raises(SystemExit):
        cli.load_settings([])
    with pytest.raises(SystemExit, match="universal-runtime: CORS origin"):
        service_cli.check_startup_settings(Settings(), with_gateway=True)
    service_cli.check_startup_settings(Settings(), with_gateway=False)  # no gateway: not read


def test_both_command_lines_wire_cors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UR_GATEWAY_CORS_ORIGINS", f"{ALLOWED},http://localhost:3000")
    assert Settings().gateway_cors_origins == f"{ALLOWED},http://localhost:3000"
    served = {}
    monkeypatch.setattr(cli, "run_uvicorn", lambda app, https, **kwargs: served.update(app=app))
    cli.main([])
    [cors] = [entry for entry in served["app"].user_middleware if entry.cls is CORSMiddleware]
    assert cors.kwargs["allow_origins"] == [ALLOWED, "http://localhost:3000"]
    cli.main(["--cors-origins", "http://localhost:5173"])
    [cors] = [entry for entry in served["app"].user_middleware if entry.cls is CORSMiddleware]
    assert cors.kwargs["allow_origins"] == ["http://localhost:5173"]


async def test_in_process_gateway_takes_cors_and_keys_from_server_settings(
    fake: FakeServer, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text('team-a: "key-of-team-a"\n')
    monkeypatch.setenv("UR_GATEWAY_CORS_ORIGINS", ALLOWED)
    monkeypatch.setenv("UR_API_KEYS_FILE", str(keys))
    monkeypatch.setenv("UR_AUTH_PUBLIC_HEALTH", "false")
    app = service_cli.gateway_app(Settings(), fake.target)
    assert app.state.config.api_keys.names == ("team-a",)
    async with asgi_client(app) as http:
        preflight = await http.options("/v1/chat/completions", headers={"origin": ALLOWED, **PREFLIGHT})
        assert preflight.headers["access-control-allow-origin"] == ALLOWED
        assert (await http.get("/health")).status_code == 401
        answer = await http.get("/health", headers={"authorization": "Bearer key-of-team-a"})
        assert answer.status_code == 200
        assert (
            await http.get("/v1/models", headers={"authorization": "Bearer key-of-team-a"})
        ).status_code == 200
    assert fake.models.received[0].metadata["authorization"] == "Bearer key-of-team-a"
