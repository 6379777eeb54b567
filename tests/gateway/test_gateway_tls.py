"""HTTPS and mutual TLS of the gateway through a real uvicorn, certificate reload in place, and the
gateway's TLS settings. The gateway's TLS channel to a real server: tests/service/server/test_tls.py."""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest

from gateway import cli
from gateway.app import create_app
from gateway.https import Https, gateway_tls
from gateway.settings import GatewaySettings
from service.shared.tls import TlsConfigError
from tests.gateway.gateway_fakes import FakeServer, serve_with_uvicorn
from tests.tls_certs import REFRESH_S, Pki, make_pki, replace_files, served_certificate, wait_for_certificate


@pytest.fixture
def pki(tmp_path) -> Pki:
    return make_pki(tmp_path)


def client_context(pki: Pki, *, with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca_file)
    if with_certificate:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


def https_of(pki: Pki, *, client_ca: bool) -> Https:
    https = Https.from_settings(
        "UR_GATEWAY_TLS_", pki.server_cert, pki.server_key, pki.ca_file if client_ca else None, REFRESH_S
    )
    assert https is not None
    return https


async def test_https_serves_the_gateway(fake: FakeServer, pki: Pki) -> None:
    async with (
        serve_with_uvicorn(create_app(fake.target), https_of(pki, client_ca=False)) as url,
        httpx.AsyncClient(verify=client_context(pki, with_certificate=False)) as http,
    ):
        assert url.startswith("https://")
        response = await http.get(f"{url}/v1/models")
        assert response.status_code == 200
        assert [model["id"] for model in response.json()["data"]] == ["fake-llm", "org/fake-embedder"]


async def test_https_with_a_client_ca_refuses_a_client_without_a_certificate(
    fake: FakeServer, pki: Pki
) -> None:
    async with serve_with_uvicorn(create_app(fake.target), https_of(pki, client_ca=True)) as url:
        async with httpx.AsyncClient(verify=client_context(pki, with_certificate=False)) as http:
            # TLS 1.3: the handshake ends on the client's side, then the server's alert closes it.
            with pytest.raises(httpx.TransportError):
                await http.get(f"{url}/health")
        assert fake.models.received == [] and fake.inference.received == []
        async with httpx.AsyncClient(verify=client_context(pki, with_certificate=True)) as http:
            assert (await http.get(f"{url}/v1/models")).status_code == 200


async def test_https_certificate_reloads_in_place(fake: FakeServer, pki: Pki) -> None:
    async with serve_with_uvicorn(create_app(fake.target), https_of(pki, client_ca=False)) as url:
        port = int(url.rsplit(":", 1)[1])
        assert await served_certificate(port, pki.ca) == "server-one"
        replace_files(pki.ca.issue("server-two", server=True), pki.server_cert, pki.server_key)
        await wait_for_certificate(port, pki.ca, "server-two")
        async with httpx.AsyncClient(verify=client_context(pki, with_certificate=False)) as http:
            assert (await http.get(f"{url}/v1/models")).status_code == 200


async def test_https_keeps_its_certificate_when_the_new_files_are_broken(
    fake: FakeServer, pki: Pki, caplog
) -> None:
    async with serve_with_uvicorn(create_app(fake.target), https_of(pki, client_ca=False)) as url:
        port = int(url.rsplit(":", 1)[1])
        pki.server_key.write_bytes(b"not a key")
        for _ in range(100):  # 5 s at most: the watcher finds the broken files and skips them
            if "new TLS files rejected" in caplog.text:
                break
            await asyncio.sleep(REFRESH_S)
        assert "new TLS files rejected" in caplog.text
        assert await served_certificate(port, pki.ca) == "server-one"


# --- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tls_cert_file": "server.crt"}, "UR_GATEWAY_TLS_CERT_FILE is set but UR_GATEWAY_TLS_KEY_FILE is not"),
        ({"tls_client_ca_file": "ca.crt"}, "UR_GATEWAY_TLS_CLIENT_CA_FILE needs UR_GATEWAY_TLS_CERT_FILE"),
        ({"tls_cert_file": "server.crt", "tls_key_file": "gone.key"}, "UR_GATEWAY_TLS_KEY_FILE=.*gone.key cannot be read"),
        ({"grpc_tls_cert_file": "client.crt"}, "UR_GATEWAY_GRPC_TLS_CERT_FILE is set but UR_GATEWAY_GRPC_TLS_KEY_FILE is not"),
        ({"grpc_tls_ca_file": "gone.crt"}, "UR_GATEWAY_GRPC_TLS_CA_FILE=.*gone.crt cannot be read"),
        (
            {"grpc_tls_ca_file": "ca.crt", "grpc_tls_cert_file": "client.crt", "grpc_tls_key_file": "server.key"},
            "UR_GATEWAY_GRPC_TLS_CERT_FILE=.* and UR_GATEWAY_GRPC_TLS_KEY_FILE=.* are not",
        ),
    ],
    ids=["cert-only", "ca-only", "missing-key", "grpc-cert-only", "grpc-missing-ca", "grpc-wrong-key"],
)  # fmt: skip
def test_bad_tls_settings_name_the_setting(pki: Pki, fields: dict[str, str], message: str) -> None:
    settings = GatewaySettings(**{name: pki.folder / value for name, value in fields.items()})
    with pytest.raises(TlsConfigError, match=message):
        gateway_tls(settings)


def test_tls_settings_come_from_the_environment(pki: Pki, monkeypatch) -> None:
    monkeypatch.setenv("UR_GATEWAY_TLS_CERT_FILE", str(pki.server_cert))
    monkeypatch.setenv("UR_GATEWAY_TLS_KEY_FILE", str(pki.server_key))
    monkeypatch.setenv("UR_GATEWAY_TLS_CLIENT_CA_FILE", str(pki.ca_file))
    monkeypatch.setenv("UR_GATEWAY_GRPC_TLS_CA_FILE", str(pki.ca_file))
    https, credentials = gateway_tls(GatewaySettings())
    assert https is not None and https.uvicorn_options() == {
        "ssl_certfile": pki.server_cert,
        "ssl_keyfile": pki.server_key,
        "ssl_ca_certs": pki.ca_file,
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
    assert credentials is not None
    assert gateway_tls(GatewaySettings(_env_prefix="NONE_")) == (None, None)


def test_cli_reports_a_bad_tls_setting_in_one_line(pki: Pki, monkeypatch) -> None:
    monkeypatch.setenv("UR_GATEWAY_TLS_CERT_FILE", str(pki.server_cert))
    with pytest.raises(SystemExit) as caught:
        cli.main([])
    assert caught.value.code == (
        "universal-runtime-gateway: UR_GATEWAY_TLS_CERT_FILE is set but UR_GATEWAY_TLS_KEY_FILE is not: "
        "set both (or neither)"
    )
