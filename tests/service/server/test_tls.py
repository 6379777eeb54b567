"""TLS and mutual TLS of the gRPC server: calls, refusals, certificate reload, bad settings,
the in-process gateway's socket, and the gateway's TLS channel to the server."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from universal_runtime.v1 import encoders_pb2, inference_service_pb2_grpc, model_service_pb2
from universal_runtime.v1 import model_service_pb2_grpc as model_grpc

from gateway.app import create_app
from service.server import RunningServer, start_server
from service.shared.tls import CertificateWatch, TlsConfigError, TlsFiles
from tests.conftest import EMBED_MODEL
from tests.gateway.gateway_fakes import asgi_client
from tests.tls_certs import (
    REFRESH_S,
    CertificateAuthority,
    Pki,
    make_pki,
    replace_files,
    served_certificate,
    wait_for_certificate,
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def own_pki(tmp_path) -> Pki:
    """Files this test alone may replace."""
    return make_pki(tmp_path)


async def start_tls(settings, pki: Pki, **update) -> RunningServer:
    tls = {
        "tls_cert_file": pki.server_cert,
        "tls_key_file": pki.server_key,
        "tls_refresh_interval_s": REFRESH_S,
    }
    return await start_server(settings.model_copy(update={**tls, **update}))


@pytest.fixture(scope="module")
async def tls_server(settings, pki) -> AsyncIterator[RunningServer]:
    running = await start_tls(settings, pki)
    yield running
    await running.stop(grace=0.5)


@pytest.fixture(scope="module")
async def mtls_server(settings, pki) -> AsyncIterator[RunningServer]:
    running = await start_tls(settings, pki, tls_client_ca_file=pki.ca_file)
    yield running
    await running.stop(grace=0.5)


async def health_check(target: str, credentials: grpc.ChannelCredentials | None) -> int:
    """One health check on a new channel; the status, or raises AioRpcError."""
    channel = (
        grpc.aio.insecure_channel(target)
        if credentials is None
        else grpc.aio.secure_channel(target, credentials)
    )
    async with channel:
        response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return response.status


async def refused(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await health_check(target, credentials)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    return caught.value


# --- TLS ---------------------------------------------------------------------------------------


async def test_tls_calls_work(tls_server, pki):
    target = f"localhost:{tls_server.port}"
    async with grpc.aio.secure_channel(target, pki.credentials()) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        models = await model_grpc.ModelServiceStub(channel).ListModels(model_service_pb2.ListModelsRequest())
        assert EMBED_MODEL in [model.name for model in models.models]
        embedded = await inference_service_pb2_grpc.InferenceServiceStub(channel).Embed(
            encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=["over TLS"]), timeout=60
        )
        assert embedded.dimensions == 384 and len(embedded.embeddings) == 1
    # Also by IP address: the certificate names 127.0.0.1 too.
    assert await health_check(f"127.0.0.1:{tls_server.port}", pki.credentials()) == 1


async def test_plaintext_to_the_tls_port_fails_cleanly(tls_server, pki):
    await refused(f"127.0.0.1:{tls_server.port}", None)
    # The server goes on serving TLS clients.
    assert await health_check(f"127.0.0.1:{tls_server.port}", pki.credentials()) == 1


async def test_a_client_that_does_not_trust_the_ca_is_refused(tls_server):
    other_ca = CertificateAuthority("some other CA")
    await refused(f"127.0.0.1:{tls_server.port}", grpc.ssl_channel_credentials(other_ca.pem))


# --- mutual TLS --------------------------------------------------------------------------------


async def test_mtls_refuses_a_client_without_a_certificate(mtls_server, pki):
    await refused(f"127.0.0.1:{mtls_server.port}", pki.credentials())


async def test_mtls_accepts_a_client_certificate_from_the_ca(mtls_server, pki):
    assert await health_check(f"127.0.0.1:{mtls_server.port}", pki.credentials(client=True)) == 1


async def test_mtls_refuses_a_client_certificate_from_another_ca(mtls_server, pki, tmp_path):
    stranger = make_pki(tmp_path)  # its own CA signed its client certificate
    credentials = grpc.ssl_channel_credentials(
        pki.ca.pem,
        private_key=stranger.client_key.read_bytes(),
        certificate_chain=stranger.client_cert.read_bytes(),
    )
    await refused(f"127.0.0.1:{mtls_server.port}", credentials)


# --- certificate reload ------------------------------------------------------------------------


async def test_a_replaced_certificate_is_served_to_new_connections_without_restart(settings, own_pki):
    running = await start_tls(settings, own_pki)
    try:
        target = f"127.0.0.1:{running.port}"
        async with grpc.aio.secure_channel(target, own_pki.credentials()) as old_channel:
            old_health = health_pb2_grpc.HealthStub(old_channel)
            await old_health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert await served_certificate(running.port, own_pki.ca) == "server-one"

            replace_files(
                own_pki.ca.issue("server-two", server=True), own_pki.server_cert, own_pki.server_key
            )
            await wait_for_certificate(running.port, own_pki.ca, "server-two")
            # A new gRPC connection handshakes with the new certificate; the open one goes on.
            assert await health_check(target, own_pki.credentials()) == 1
            await old_health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    finally:
        await running.stop(grace=0.5)


async def test_a_new_client_ca_is_taken_with_the_certificate(settings, own_pki, tmp_path):
    running = await start_tls(settings, own_pki, tls_client_ca_file=own_pki.ca_file)
    try:
        target = f"127.0.0.1:{running.port}"
        (tmp_path / "rotated").mkdir()
        rotated = make_pki(tmp_path / "rotated")
        # The server's files now come from the new CA, which also signs the clients from now on.
        own_pki.ca_file.write_bytes(rotated.ca.pem)
        replace_files(
            rotated.ca.issue("server-rotated", server=True), own_pki.server_cert, own_pki.server_key
        )
        await wait_for_certificate(running.port, rotated.ca, "server-rotated", client=rotated)
        assert await health_check(target, rotated.credentials(client=True)) == 1
        await refused(target, grpc.ssl_channel_credentials(
            rotated.ca.pem, own_pki.client_key.read_bytes(), own_pki.client_cert.read_bytes()
        ))  # fmt: skip
    finally:
        await running.stop(grace=0.5)


def test_a_half_replaced_pair_is_not_taken(own_pki):
    """A new certificate whose key is not there yet is skipped; the pair is taken once complete."""
    now = [0.0]
    files = TlsFiles.server("UR_TLS_", own_pki.server_cert, own_pki.server_key, None)
    watch = CertificateWatch(files, 1.0, clock=lambda: now[0])
    assert watch.poll() is None  # too early, nothing looked at
    now[0] = 1.0
    assert watch.poll() is None  # unchanged
    new = own_pki.ca.issue("server-two", server=True)
    own_pki.server_cert.write_bytes(new.cert)
    now[0] = 2.0
    assert watch.poll() is None  # the old key does not match: rejected (and logged once)
    own_pki.server_key.write_bytes(new.key)
    now[0] = 2.5
    assert watch.poll() is None  # within the interval: not even a stat
    now[0] = 3.0
    material = watch.poll()
    assert material is not None and material.cert == new.cert and material.key == new.key
    now[0] = 4.0
    assert watch.poll() is None  # taken once


# --- bad settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"tls_cert_file": "server.crt"}, "UR_TLS_CERT_FILE is set but UR_TLS_KEY_FILE is not"),
        ({"tls_key_file": "server.key"}, "UR_TLS_KEY_FILE is set but UR_TLS_CERT_FILE is not"),
        ({"tls_client_ca_file": "ca.crt"}, "UR_TLS_CLIENT_CA_FILE needs UR_TLS_CERT_FILE and UR_TLS_KEY_FILE"),
        ({"tls_cert_file": "missing.crt", "tls_key_file": "server.key"}, "UR_TLS_CERT_FILE=.*missing.crt cannot be read"),
        ({"tls_cert_file": "server.crt", "tls_key_file": "missing.key"}, "UR_TLS_KEY_FILE=.*missing.key cannot be read"),
        (
            {"tls_cert_file": "server.crt", "tls_key_file": "server.key", "tls_client_ca_file": "missing.crt"},
            "UR_TLS_CLIENT_CA_FILE=.*missing.crt cannot be read",
        ),
        ({"tls_cert_file": "server.crt", "tls_key_file": "client.key"}, "not a PEM certificate chain and its matching"),
        ({"tls_cert_file": "ca.crt", "tls_key_file": "server.crt"}, "UR_TLS_CERT_FILE=.* and UR_TLS_KEY_FILE="),
        (
            {"tls_cert_file": "server.crt", "tls_key_file": "server.key", "tls_client_ca_file": "server.key"},
            "UR_TLS_CLIENT_CA_FILE=.*server.key holds no PEM CA certificate",
        ),
    ],
    ids=["cert-only", "key-only", "ca-only", "missing-cert", "missing-key", "missing-ca", "wrong-key", "not-a-key", "ca-not-pem"],
)  # fmt: skip
async def test_bad_tls_settings_stop_the_start_with_a_clear_error(settings, pki, update, message):
    paths = {name: pki.folder / value for name, value in update.items()}
    with pytest.raises(TlsConfigError, match=message) as caught:
        await start_server(settings.model_copy(update=paths))
    assert isinstance(caught.value, ValueError)


# --- the in-process gateway's socket -----------------------------------------------------------


async def test_internal_socket_serves_plaintext_to_this_user_only(settings, pki):
    running = await start_server(
        settings.model_copy(update={"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key}),
        internal_socket=True,
    )
    socket = running.internal_socket
    try:
        assert socket is not None
        assert stat.S_IMODE(socket.folder.stat().st_mode) == 0o700
        assert await health_check(socket.target, None) == 1
        await refused(f"127.0.0.1:{running.port}", None)  # the TCP port stays TLS only
    finally:
        await running.stop(grace=0.5)
    assert not socket.folder.exists()


async def test_no_internal_socket_without_tls(settings):
    running = await start_server(settings, internal_socket=True)
    try:
        assert running.internal_socket is None
        assert await health_check(f"127.0.0.1:{running.port}", None) == 1
    finally:
        await running.stop(grace=0.5)


# --- the gateway's channel to a TLS server -----------------------------------------------------


async def test_gateway_reaches_a_tls_server(tls_server, pki):
    app = create_app(f"localhost:{tls_server.port}", grpc_credentials=pki.credentials())
    async with asgi_client(app) as http:
        response = await http.get("/v1/models")
        assert response.status_code == 200, response.text
        assert EMBED_MODEL in [model["id"] for model in response.json()["data"]]


async def test_gateway_reaches_an_mtls_server_with_its_client_certificate(mtls_server, pki):
    target = f"127.0.0.1:{mtls_server.port}"
    async with asgi_client(create_app(target, grpc_credentials=pki.credentials(client=True))) as http:
        assert (await http.get("/v1/models")).status_code == 200
    async with asgi_client(create_app(target, grpc_credentials=pki.credentials())) as http:
        refused_response = await http.get("/v1/models")
        assert refused_response.status_code == 503
