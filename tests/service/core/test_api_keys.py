"""API keys: the keys file, several named keys on the real server and the gateway, open or closed health."""

from __future__ import annotations

import json
import logging

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import REGISTRY, generate_latest
from pydantic import SecretStr
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from gateway.app import create_app
from service import cli as service_cli
from service.server import start_server
from service.shared.api_keys import ApiKeyError, load_api_keys
from tests.conftest import error_info
from tests.gateway.gateway_fakes import asgi_client

SINGLE = "single-Secret-0001"
TEAM_A = "teamA-Secret-a1b2c3d4"
TEAM_B = "teamB-Secret-e5f6a7b8"
SECRETS = (SINGLE, TEAM_A, TEAM_B)


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(f'# two teams\nteam-a: "{TEAM_A}"\nteam-b: "{TEAM_B}"\n')
    return path


def write(tmp_path, text: str, name: str = "keys.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the keys file ---------------------------------------------------------------------------


def test_single_key_is_named_default():
    assert load_api_keys(SINGLE).names == ("default",)
    assert not load_api_keys(None) and not load_api_keys("")  # no key: authentication off


def test_keys_file_yaml_and_json_beside_the_single_key(keys_file, tmp_path):
    assert load_api_keys(SINGLE, keys_file).names == ("default", "team-a", "team-b")
    as_json = write(tmp_path, json.dumps({"team-a": TEAM_A, "team-b": TEAM_B}), "keys.json")
    assert load_api_keys(None, as_json).names == ("team-a", "team-b")


def test_match_names_the_key_and_returns_the_token(keys_file):
    keys = load_api_keys(SINGLE, keys_file)
    assert keys.match(f"Bearer {TEAM_B}") == ("team-b", TEAM_B)
    assert keys.match(f"  bEaReR   {TEAM_A} ") == ("team-a", TEAM_A)
    assert keys.match(f"Bearer {SINGLE}") == ("default", SINGLE)
    for header in ("", TEAM_A, f"Basic {TEAM_A}", f"Bearer {TEAM_A}x", "Bearer ", f"Bearer {TEAM_A.upper()}"):
        assert keys.match(header) is None, header


BAD_FILES = {
    "not yaml": ("team-a: [unclosed\n", "not valid YAML or JSON (line"),
    "a list": (f'- "{TEAM_A}"\n', "expected a non-empty mapping"),
    "empty file": ("", "expected a non-empty mapping"),
    "empty mapping": ("{}\n", "expected a non-empty mapping"),
    "a scalar": (f"{TEAM_A}\n", "expected a non-empty mapping"),
    "number as key": ("team-a: 12345678\n", "must be a string (quote it)"),
    "mapping without 'key'": (f"team-a:\n  secret: {TEAM_A}\n", "'key' must be set"),
    "number as name": (f'42: "{TEAM_A}"\n', "key names must be strings"),
    "empty key": ('team-a: ""\n', "the key of 'team-a' is empty"),
    "key with a space": (f'team-a: "{TEAM_A} x"\n', "printable ASCII characters without spaces"),
    "non-ascii key": (f'team-a: "{TEAM_A}é"\n', "printable ASCII characters without spaces"),
    "bad name": (f'"team a": "{TEAM_A}"\n', "must be 1-64 characters"),
    "empty name": (f'"": "{TEAM_A}"\n', "must be 1-64 characters"),
    "name used twice": (f'team-a: "{TEAM_A}"\nteam-a: "{TEAM_B}"\n', "key name 'team-a' is used twice"),
    "same key twice": (f'team-a: "{TEAM_A}"\nteam-b: "{TEAM_A}"\n', "'team-b' has the same key as 'team-a'"),
    "json name twice": (f'{{"team-a": "{TEAM_A}", "team-a": "{TEAM_B}"}}', "is used twice"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_malformed_keys_file_is_refused_naming_the_file_never_a_key(tmp_path, case):
    text, expected = BAD_FILES[case]
    path = write(tmp_path, text)
    with pytest.raises(ApiKeyError) as caught:
        load_api_keys(None, path)
    message = str(caught.value)
    assert str(path) in message and expected in message
    assert not any(secret in message for secret in SECRETS)


def test_missing_or_unreadable_keys_file(tmp_path):
    with pytest.raises(ApiKeyError, match=r"keys file .*nope\.yaml: cannot read it \(FileNotFoundError\)"):
        load_api_keys(None, tmp_path / "nope.yaml")
    with pytest.raises(ApiKeyError, match="cannot read it"):
        load_api_keys(None, tmp_path)  # a folder
    binary = tmp_path / "keys.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ApiKeyError, match="cannot read it"):
        load_api_keys(None, binary)


def test_file_clashing_with_the_single_key(tmp_path):
    same_key = write(tmp_path, f'team-a: "{SINGLE}"\n')
    with pytest.raises(ApiKeyError, match="'team-a' has the same key as 'default'") as caught:
        load_api_keys(SINGLE, same_key)
    assert SINGLE not in str(caught.value)
    default_name = write(tmp_path, f'default: "{TEAM_A}"\n', "default.yaml")
    with pytest.raises(ApiKeyError, match="key name 'default' is used twice"):
        load_api_keys(SINGLE, default_name)
    with pytest.raises(ApiKeyError, match="the API key setting: the key of 'default' must be"):
        load_api_keys("has space")


def test_long_key_is_refused():
    with pytest.raises(ApiKeyError, match="1-4096 printable ASCII"):
        load_api_keys("k" * 4097)


# --- the real server --------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def keyed(settings, keys_file):
    # metrics_key_names: the test below reads the count by key name, off by default.
    running = await start_server(
        settings.model_copy(
            update={"api_key": SecretStr(SINGLE), "api_keys_file": keys_file, "metrics_key_names": True}
        )
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield running, channel
    await running.stop(grace=0.5)


def rpc_records(caplog, method_suffix: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "universal_runtime.rpc" and r.getMessage() == "rpc" and r.method.endswith(method_suffix)
    ]


def logged_refusal(caplog, method_suffix: str) -> logging.LogRecord:
    """The one log line of a refused call: written before its status goes out (set_status)."""
    [record] = rpc_records(caplog, method_suffix)
    return record


def requests_by_key(name: str) -> float:
    return REGISTRY.get_sample_value("ur_requests_by_api_key_total", {"api_key": name, "code": "OK"}) or 0.0


async def test_every_named_key_works_and_its_name_is_logged(keyed, caplog):
    _, channel = keyed
    stub = msg.ModelServiceStub(channel)
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    counted_before = {name: requests_by_key(name) for name in ("default", "team-a", "team-b")}
    for key in SECRETS:
        response = await stub.ListModels(m.ListModelsRequest(), metadata=bearer(key), timeout=10)
        assert response.models
    records = rpc_records(caplog, "/ListModels")
    assert [(r.key_name, r.code) for r in records] == [("default", "OK"), ("team-a", "OK"), ("team-b", "OK")]
    logged = caplog.text + " ".join(json.dumps(vars(r), default=str) for r in caplog.records)
    assert not any(secret in logged for secret in SECRETS)
    # The metrics count by key name too, and never hold a key.
    assert {name: requests_by_key(name) - n for name, n in counted_before.items()} == dict.fromkeys(
        counted_before, 1
    )
    exposition = generate_latest(REGISTRY).decode()
    assert not any(secret in exposition for secret in SECRETS)


@pytest.mark.parametrize(
    "metadata", [(), bearer("wrong"), bearer(TEAM_A[:-1]), (("authorization", f"Basic {TEAM_A}"),)]
)
async def test_wrong_or_missing_key_is_unauthenticated(keyed, caplog, metadata):
    _, channel = keyed
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await msg.ModelServiceStub(channel).ListModels(m.ListModelsRequest(), metadata=metadata, timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(caught.value).reason == "UNAUTHENTICATED"
    assert not any(secret in caught.value.details() for secret in SECRETS)
    record = logged_refusal(caplog, "/ListModels")
    assert (record.code, record.key_name) == ("UNAUTHENTICATED", "")


async def test_health_and_reflection_are_open_by_default(keyed):
    _, channel = keyed
    health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert "grpc.health.v1.Health" in await list_services(channel, ())


async def list_services(channel, metadata) -> list[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=metadata, timeout=10
    )
    names = []
    async for response in call:
        names.extend(service.name for service in response.list_services_response.service)
    return names


async def test_closed_health_needs_a_key_on_both_faces(settings, keys_file):
    running = await start_server(
        settings.model_copy(update={"api_keys_file": keys_file, "auth_public_health": False})
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for probe in (
                health.Check(health_pb2.HealthCheckRequest(), timeout=10),
                list_services(channel, ()),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await probe
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            ok = await health.Check(health_pb2.HealthCheckRequest(), metadata=bearer(TEAM_A), timeout=10)
            assert ok.status == health_pb2.HealthCheckResponse.SERVING
            assert "grpc.health.v1.Health" in await list_services(channel, bearer(TEAM_B))
        app = create_app(
            f"127.0.0.1:{running.port}", api_keys=load_api_keys(None, keys_file), auth_public_health=False
        )
        async with asgi_client(app) as http:
            assert (await http.get("/health")).status_code == 401
            # The client's key is forwarded to the server's guarded health check.
            answer = await http.get("/health", headers={"authorization": f"Bearer {TEAM_B}"})
            assert (answer.status_code, answer.json()) == (200, {"status": "SERVING"})
    finally:
        await running.stop(grace=0.5)


async def test_gateway_forwards_the_clients_own_key_so_the_server_names_it(keyed, keys_file, caplog):
    running, _ = keyed
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    app = create_app(f"127.0.0.1:{running.port}", api_key=SINGLE, api_keys_file=keys_file)
    async with asgi_client(app) as http:
        assert (await http.get("/v1/models", headers={"authorization": "Bearer wrong"})).status_code == 401
        for key in (TEAM_B, SINGLE):
            answer = await http.get("/v1/models", headers={"authorization": f"bearer  {key}"})
            assert answer.status_code == 200
        assert (await http.get("/health")).status_code == 200  # open by default
    assert [r.key_name for r in rpc_records(caplog, "/ListModels")] == ["team-b", "default"]


async def test_malformed_keys_file_stops_server_start_up(settings, tmp_path):
    path = write(tmp_path, f'team-a: "{TEAM_A}"\nteam-b: ""\n')
    with pytest.raises(ApiKeyError, match=rf"keys file {path}: the key of 'team-b' is empty"):
        await start_server(settings.model_copy(update={"api_keys_file": path}))


def test_command_lines_refuse_a_malformed_keys_file(settings, tmp_path, monkeypatch):
    path = write(tmp_path, "team-a: [\n")
    with pytest.raises(SystemExit, match=rf"universal-runtime: keys file {path}: not valid YAML"):
        service_cli.check_startup_settings(
            settings.model_copy(update={"api_keys_file": path}), with_gateway=False
        )
    from gateway import cli as gateway_cli

    monkeypatch.setenv("UR_GATEWAY_API_KEYS_FILE", str(path))
    monkeypatch.setattr(
        gateway_cli, "run_uvicorn", lambda app, https, **kwargs: pytest.fail("must not serve")
    )
    with pytest.raises(SystemExit, match=rf"universal-runtime-gateway: keys file {path}: not valid YAML"):
        gateway_cli.main([])


def test_gateway_command_line_reads_keys_file_and_health_flag(keys_file, monkeypatch):
    from gateway import cli as gateway_cli

    served = {}
    monkeypatch.setattr(gateway_cli, "run_uvicorn", lambda app, https, **kwargs: served.update(app=app))
    monkeypatch.setenv("UR_GATEWAY_API_KEY", SINGLE)
    gateway_cli.main(["--api-keys-file", str(keys_file), "--no-auth-public-health"])
    config = served["app"].state.config
    assert config.api_keys.names == ("default", "team-a", "team-b")
    assert config.auth_public_health is False
    monkeypatch.setenv("UR_GATEWAY_AUTH_PUBLIC_HEALTH", "false")
    assert gateway_cli.load_settings([]).auth_public_health is False
    assert gateway_cli.load_settings(["--auth-public-health"]).auth_public_health is True


def test_server_settings_from_the_environment(monkeypatch, keys_file):
    from service.settings import Settings

    monkeypatch.setenv("UR_API_KEYS_FILE", str(keys_file))
    monkeypatch.setenv("UR_AUTH_PUBLIC_HEALTH", "false")
    loaded = Settings()
    assert loaded.api_keys_file == keys_file and loaded.auth_public_health is False
    assert Settings.model_fields["auth_public_health"].default is True
