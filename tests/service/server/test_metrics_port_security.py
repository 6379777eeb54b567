"""The gRPC server's metrics port follows the gRPC port's security, and no series names a key unasked.

With API keys on, a scrape needs ``Authorization: Bearer <key>``; with TLS on the port speaks
HTTPS with the server's certificate, and with a client CA (mutual TLS) it requires a client
certificate. ``metrics_public`` opens it on purpose (TLS stays). ``ur_requests_by_api_key_total``
is recorded only with ``metrics_key_names``.
"""

from __future__ import annotations

import ssl

import grpc
import httpx
import pytest
from prometheus_client import REGISTRY, generate_latest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import inference_service_pb2_grpc
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from service.server import start_server
from tests.conftest import EMBED_MODEL, free_port
from tests.tls_certs import Pki, make_pki

KEY = "metrics-scrape-key-0123456789"
KEY_NAME = "metrics-probe-team"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("metrics-pki"))


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("metrics-keys") / "keys.yaml"
    path.write_text(f'{KEY_NAME}: "{KEY}"\n')
    return path


async def started(settings, **update):
    return await start_server(
        settings.model_copy(update={"grpc_port": 0, "metrics_port": free_port(), **update})
    )


def https(pki: Pki, *, client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if client_cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


async def scrape(url: str, *, verify: ssl.SSLContext | bool = True, key: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(verify=verify, timeout=10) as client:
        return await client.get(url, headers=headers)


async def test_with_keys_a_scrape_needs_a_key(settings, keys_file):
    running = await started(settings, api_keys_file=keys_file)
    try:
        url = f"http://127.0.0.1:{running.metrics_port}/metrics"
        assert (await scrape(url)).status_code == 401
        refused = await scrape(url, key="wrong")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        answer = await scrape(url, key=KEY)
        assert answer.status_code == 200 and "ur_requests_total" in answer.text
    finally:
        await running.stop(grace=0.5)


def _keys_and_mutual_tls(keys_file, pki) -> dict:
    """Settings of a server with API keys and mutual TLS (client certificates from ``pki``'s CA)."""
    return {
        "api_keys_file": keys_file,
        "tls_cert_file": pki.server_cert,
        "tls_key_file": pki.server_key,
        "tls_client_ca_file": pki.ca_file,
    }


async def test_with_mutual_tls_a_scrape_needs_a_client_certificate_and_a_key(settings, keys_file, pki):
    running = await started(settings, **_keys_and_mutual_tls(keys_file, pki))
    try:
        port = running.metrics_port
        with pytest.raises(httpx.TransportError):  # plaintext to a TLS port
            await scrape(f"http://127.0.0.1:{port}/metrics", key=KEY)
        url = f"https://localhost:{port}/metrics"
        # No client certificate: the server's TLS 1.3 "certificate required" alert comes during the
        # handshake (httpx's ConnectError) or at the first read, where httpcore lets the
        # ssl.SSLError through unwrapped; either way no answer, only the TLS refusal.
        with pytest.raises((httpx.TransportError, ssl.SSLError)):
            await scrape(url, verify=https(pki, client_cert=False), key=KEY)
        assert (await scrape(url, verify=https(pki, client_cert=True))).status_code == 401
        answer = await scrape(url, verify=https(pki, client_cert=True), key=KEY)
        assert answer.status_code == 200 and "ur_requests_total" in answer.text
    finally:
        await running.stop(grace=0.5)


async def test_metrics_public_opens_the_port_but_keeps_tls(settings, keys_file, pki):
    running = await started(settings, **_keys_and_mutual_tls(keys_file, pki), metrics_public=True)
    try:
        port = running.metrics_port
        answer = await scrape(f"https://localhost:{port}/metrics", verify=https(pki, client_cert=False))
        assert answer.status_code == 200
        with pytest.raises(httpx.TransportError):
            await scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        await running.stop(grace=0.5)


@pytest.mark.parametrize("key_names", [False, True])
async def test_series_name_a_key_only_when_the_operator_asks(settings, keys_file, key_names):
    running = await started(settings, api_keys_file=keys_file, metrics_port=0, metrics_key_names=key_names)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            await msg.ModelServiceStub(channel).ListModels(
                m.ListModelsRequest(), metadata=(("authorization", f"Bearer {KEY}"),), timeout=10
            )
            # Through a fair queue too: its series' key label follows the same setting.
            await inference_service_pb2_grpc.InferenceServiceStub(channel).Embed(
                e.EmbedRequest(model=EMBED_MODEL, inputs=["fair"]),
                metadata=(("authorization", f"Bearer {KEY}"),),
                timeout=120,
            )
        exposition = generate_latest(REGISTRY).decode()
        assert (KEY_NAME in exposition) is key_names
        queued = (
            f'ur_queue_wait_seconds_count{{key="{KEY_NAME}",model="{EMBED_MODEL}",priority="interactive"}}'
        )
        assert (queued in exposition) is key_names
        assert KEY not in exposition
    finally:
        await running.stop(grace=0.5)
