"""The CLI against a server that wants an API key, and one that speaks mutual TLS."""

from __future__ import annotations

import json

import pytest

from tests.service.admin.conftest import CLI_MODEL, cli, started
from tests.tls_certs import make_pki

KEY = "cli-test-key-0123456789"


@pytest.fixture(scope="module")
async def keyed_address(tmp_path_factory):
    running = await started(tmp_path_factory.mktemp("keyed"), api_key=KEY)
    yield f"127.0.0.1:{running.port}"
    await running.stop(grace=1.0)


async def test_api_key_from_the_flag_or_the_environment(keyed_address, monkeypatch):
    monkeypatch.delenv("UR_API_KEY", raising=False)
    refused = await cli("ls", "--address", keyed_address)
    assert refused.code == 1 and refused.out == ""
    (line,) = refused.err.splitlines()
    assert line == (
        "universal-runtime ls: the server refused the call: missing or invalid API key "
        "(pass --api-key or set UR_API_KEY)"
    )
    wrong = await cli("ls", "--address", keyed_address, "--api-key", "nope")
    assert wrong.code == 1 and "refused" in wrong.err

    with_flag = await cli("ls", "--json", "--address", keyed_address, "--api-key", KEY)
    assert with_flag.code == 0, with_flag.err
    assert CLI_MODEL in {m["name"] for m in json.loads(with_flag.out)}

    monkeypatch.setenv("UR_API_KEY", KEY)
    assert (await cli("ps", "--address", keyed_address)).code == 0
    # Health needs no key by default (auth_public_health), as for the gateway's /health.
    monkeypatch.delenv("UR_API_KEY")
    assert (await cli("health", "--address", keyed_address)).code == 0


async def test_mutual_tls_with_the_client_flags(tmp_path):
    pki = make_pki(tmp_path)
    running = await started(
        tmp_path,
        tls_cert_file=pki.server_cert,
        tls_key_file=pki.server_key,
        tls_client_ca_file=pki.ca_file,
    )
    address = f"localhost:{running.port}"
    try:
        tls = (
            "--tls-ca",
            str(pki.ca_file),
            "--tls-cert",
            str(pki.client_cert),
            "--tls-key",
            str(pki.client_key),
        )
        listed = await cli("ls", "--json", "--address", address, *tls)
        assert listed.code == 0, listed.err
        assert CLI_MODEL in {m["name"] for m in json.loads(listed.out)}

        plaintext = await cli("ls", "--address", address, "--timeout", "5")
        assert plaintext.code == 1 and len(plaintext.err.splitlines()) == 1
        assert "cannot reach the server" in plaintext.err

        half = await cli(
            "ls", "--address", address, "--tls-ca", str(pki.ca_file), "--tls-cert", str(pki.client_cert)
        )
        assert half.code == 1
        assert (
            half.err
            == "universal-runtime ls: --tls-cert is set but --tls-key is not: set both (or neither)\n"
        )
    finally:
        await running.stop(grace=0.5)
