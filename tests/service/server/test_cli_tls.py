"""The `universal-runtime` process with TLS on both faces: mutual TLS on gRPC and on the
gateway's HTTPS; the gateway inside the process reaches its server over the private Unix socket."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import EMBED_MODEL, REPO_ROOT, child_server_env, free_port
from tests.launched import serving
from tests.tls_certs import Pki, make_pki


@pytest.fixture
def pki(tmp_path) -> Pki:
    return make_pki(tmp_path)


def launch(
    pki: Pki, catalog_path: Path, tmp_path: Path, env: dict[str, str]
) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "log"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "service.cli",
            "--grpc-host", "127.0.0.1", "--grpc-port", str(free_port()),
            "--gateway-host", "127.0.0.1", "--gateway-port", str(free_port()),
            "--catalog", str(catalog_path), "--data-dir", str(tmp_path / "data"),
        ],
        cwd=REPO_ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env=child_server_env(UR_SHUTDOWN_GRACE_S="1", **env),
    )  # fmt: skip
    return process, log


def test_both_faces_speak_mutual_tls(pki: Pki, catalog_path: Path, tmp_path: Path) -> None:
    env = {
        "UR_TLS_CERT_FILE": str(pki.server_cert),
        "UR_TLS_KEY_FILE": str(pki.server_key),
        "UR_TLS_CLIENT_CA_FILE": str(pki.ca_file),
        "UR_GATEWAY_TLS_CERT_FILE": str(pki.server_cert),
        "UR_GATEWAY_TLS_KEY_FILE": str(pki.server_key),
        "UR_GATEWAY_TLS_CLIENT_CA_FILE": str(pki.ca_file),
    }
    process, log = launch(pki, catalog_path, tmp_path, env)
    args = process.args
    grpc_port = args[args.index("--grpc-port") + 1]
    gateway = f"https://localhost:{args[args.index('--gateway-port') + 1]}"
    with_cert = ssl.create_default_context(cafile=pki.ca_file)
    with_cert.load_cert_chain(pki.client_cert, pki.client_key)
    with serving(process, log, f"{gateway}/health", verify=with_cert):
        # HTTPS with a client certificate -> gateway -> Unix socket -> server.
        models = httpx.get(f"{gateway}/v1/models", verify=with_cert, timeout=5.0)
        assert models.status_code == 200 and EMBED_MODEL in [m["id"] for m in models.json()["data"]]
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{gateway}/health", verify=ssl.create_default_context(cafile=pki.ca_file), timeout=5.0)
        # gRPC: mutual TLS required on the TCP port.
        credentials = pki.credentials(client=True)
        with grpc.secure_channel(f"localhost:{grpc_port}", credentials) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        with grpc.secure_channel(f"localhost:{grpc_port}", pki.credentials()) as channel:
            with pytest.raises(grpc.RpcError) as caught:
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_half_tls_configuration_stops_the_start_with_one_clear_line(
    pki: Pki, catalog_path: Path, tmp_path: Path
) -> None:
    process, log = launch(pki, catalog_path, tmp_path, {"UR_GATEWAY_TLS_KEY_FILE": str(pki.server_key)})
    assert process.wait(timeout=60) == 1
    output = log.read_text()
    assert "UR_GATEWAY_TLS_KEY_FILE is set but UR_GATEWAY_TLS_CERT_FILE is not" in output
    assert "Traceback" not in output
