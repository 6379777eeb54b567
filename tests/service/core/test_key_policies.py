"""Keys with policy: the keys file's two forms, bad policies at start-up, and each call's share.

The share (engines.fair_share.Share) is what the queues read: the key's name, its priority class
and weight, lowered to batch by ``x-ur-priority: batch``. It is asserted through the admission
steps that decide it (``authentication``, then ``priority``) with a recording operation, and the
refusal of a bad value on the real server.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from pydantic import SecretStr
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from engines.errors import RuntimeServiceError
from engines.fair_share import DEFAULT_SHARE, Caller, Priority, Share, current_caller, current_share
from service.core.admission.authentication import Authentication
from service.core.admission.priority import PriorityClass
from service.core.chain import AdmissionStep, build_chain
from service.core.context import MethodInfo
from service.faces.metadata import call_context
from service.server import start_server
from service.shared.api_keys import DEFAULT_POLICY, SINGLE_KEY_POLICY, ApiKeyError, KeyPolicy, load_api_keys
from tests.conftest import error_info

PLAIN = "plain-Secret-0001"
BULK = "bulk-Secret-0002"
RATED = "rated-Secret-0003"
SINGLE = "single-Secret-0004"
SECRETS = (PLAIN, BULK, RATED, SINGLE)

MIXED = f"""
plain: "{PLAIN}"
bulk:
  key: "{BULK}"
  priority: batch
  weight: 3
rated: {{key: "{RATED}", requests_per_second: 2.5, tokens_per_minute: 1000, inputs_per_minute: 50,
        max_concurrent_streams: 2}}
"""


def write(tmp_path, text: str):
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    return path


def test_both_forms_in_one_file_with_their_policies(tmp_path):
    keys = load_api_keys(SINGLE, write(tmp_path, MIXED))
    assert keys.names == ("default", "plain", "bulk", "rated")
    assert keys.policy("plain") == DEFAULT_POLICY
    # The single key is the operator's: the default policy but role admin.
    assert keys.policy("default") == KeyPolicy(role="admin") == SINGLE_KEY_POLICY
    assert keys.policy("bulk") == KeyPolicy(priority="batch", weight=3.0)
    rated = keys.policy("rated")
    assert (rated.requests_per_second, rated.tokens_per_minute, rated.inputs_per_minute) == (2.5, 1000, 50)
    assert rated.max_concurrent_streams == 2
    assert rated.bucket_size == 3  # burst defaults to requests_per_second rounded up
    assert keys.match(f"Bearer {BULK}") == ("bulk", BULK)  # the new form's key authenticates
    assert keys.policy("nobody") == DEFAULT_POLICY


def test_burst_and_json_form(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text(f'{{"a": {{"key": "{PLAIN}", "requests_per_second": 0.5, "burst": 4}}, "b": "{BULK}"}}')
    keys = load_api_keys(None, path)
    assert keys.policy("a").bucket_size == 4 and keys.policy("b") == DEFAULT_POLICY


BAD_POLICIES = {
    "negative weight": ("weight: -1", "field 'weight' must be a number above 0"),
    "zero weight": ("weight: 0", "field 'weight' must be a number above 0"),
    "weight not a number": ("weight: heavy", "field 'weight' must be a number above 0"),
    "unknown priority": ("priority: urgent", "field 'priority' must be one of interactive, batch"),
    "unknown field": ("rate: 5", "unknown field 'rate'"),
    "burst 0": ("requests_per_second: 1\n  burst: 0", "field 'burst' must be a whole number from 1"),
    "burst without rate": ("burst: 3", "field 'burst' needs 'requests_per_second'"),
    "fractional tokens": ("tokens_per_minute: 1.5", "field 'tokens_per_minute' must be a whole number"),
    "bool as number": ("max_concurrent_streams: true", "field 'max_concurrent_streams' must be a whole"),
    "negative inputs": ("inputs_per_minute: -3", "field 'inputs_per_minute' must be a whole number"),
    "infinite rate": ("requests_per_second: .inf", "field 'requests_per_second' must be a number above 0"),
}


@pytest.mark.parametrize("case", BAD_POLICIES)
def test_bad_policy_names_the_key_and_field_never_the_secret(tmp_path, case):
    line, expected = BAD_POLICIES[case]
    path = write(tmp_path, f'plain: "{PLAIN}"\nbulk:\n  key: "{BULK}"\n  {line}\n')
    with pytest.raises(ApiKeyError) as caught:
        load_api_keys(None, path)
    message = str(caught.value)
    assert f"keys file {path}: key 'bulk': " in message and expected in message
    assert not any(secret in message for secret in SECRETS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"bulk: [{BULK}]\n", "the key of 'bulk' must be a string (quote it), or a mapping"),
        ("bulk: 42\n", "the key of 'bulk' must be a string"),
        (f"bulk:\n  secret: {BULK}\n", "key 'bulk': 'key' must be set"),
        ("bulk:\n  key: 1234\n  weight: 2\n", "key 'bulk': 'key' must be set to the key, a string"),
        # A secret pasted as a field name is not echoed.
        (f'bulk:\n  key: "{PLAIN}"\n  {BULK}: 1\n', "key 'bulk': unknown field (its name not shown)"),
    ],
)
def test_non_mapping_and_missing_key_entries(tmp_path, text, expected):
    with pytest.raises(ApiKeyError) as caught:
        load_api_keys(None, write(tmp_path, text))
    assert expected in str(caught.value)
    assert not any(secret in str(caught.value) for secret in SECRETS)


async def test_bad_policy_stops_server_start_up(settings, tmp_path):
    path = write(tmp_path, f'bulk:\n  key: "{BULK}"\n  priority: first\n')
    with pytest.raises(ApiKeyError, match="key 'bulk': field 'priority'"):
        await start_server(settings.model_copy(update={"api_keys_file": path}))


# --- the call's share ---------------------------------------------------------------------------


LIST_MODELS = MethodInfo("/universal_runtime.v1.ModelService/ListModels")


async def _caller_seen(steps: list[AdmissionStep], metadata) -> Caller | RuntimeServiceError:
    """The caller an operation behind ``steps`` sees, or the error that refused the call."""

    async def operation(ctx, request) -> Caller:
        assert current_caller() == ctx.caller
        return current_caller()

    chain = build_chain(steps)

    async def call() -> Caller | RuntimeServiceError:
        ctx = call_context(LIST_MODELS, metadata, peer="ipv4:127.0.0.1:5000")
        try:
            return await chain.unary(ctx, object(), operation)
        except RuntimeServiceError as error:
            return error

    return await asyncio.create_task(call())  # its own task (context), as a face runs a call


async def _share_seen(steps: list[AdmissionStep], metadata) -> Share | RuntimeServiceError:
    """The share an operation behind ``steps`` sees, or the error that refused the call."""
    seen = await _caller_seen(steps, metadata)
    return seen if isinstance(seen, RuntimeServiceError) else seen.share


def keyed(tmp_path, single: str | None = SINGLE) -> list[AdmissionStep]:
    """The steps of a server with the keys above: authentication, then the priority class."""
    return [Authentication(load_api_keys(single, write(tmp_path, MIXED))), PriorityClass()]


def auth(key: str, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"), *extra)


@pytest.mark.parametrize(
    ("key", "priority", "expected"),
    [
        (PLAIN, None, Share("plain", Priority.INTERACTIVE, 1.0)),
        (BULK, None, Share("bulk", Priority.BATCH, 3.0)),
        (PLAIN, "batch", Share("plain", Priority.BATCH, 1.0)),
        (PLAIN, " Batch ", Share("plain", Priority.BATCH, 1.0)),
        (PLAIN, "interactive", Share("plain", Priority.INTERACTIVE, 1.0)),
        (BULK, "interactive", Share("bulk", Priority.BATCH, 3.0)),  # never raised
        (SINGLE, "batch", Share("default", Priority.BATCH, 1.0)),
    ],
)
async def test_share_from_policy_and_priority_metadata(tmp_path, key, priority, expected):
    extra = () if priority is None else (("x-ur-priority", priority),)
    assert await _share_seen(keyed(tmp_path), auth(key, *extra)) == expected
    assert current_share() == DEFAULT_SHARE  # set in the call's context only


async def test_the_caller_names_the_key_its_role_and_its_lane(tmp_path):
    single = await _caller_seen(keyed(tmp_path), auth(SINGLE, ("x-ur-client-address", "10.0.0.1")))
    assert single == Caller("default", "admin", Share("default", Priority.INTERACTIVE, 1.0), "default")
    bulk = await _caller_seen(keyed(tmp_path), auth(BULK))
    assert bulk == Caller("bulk", "user", Share("bulk", Priority.BATCH, 3.0), "bulk")
    assert current_caller() == Caller()  # set in the call's context only


async def test_bad_priority_is_invalid_argument_naming_the_header(tmp_path):
    steps = keyed(tmp_path, single=None)
    refused = await _share_seen(steps, auth(PLAIN, ("x-ur-priority", "urgent")))
    assert isinstance(refused, RuntimeServiceError)
    assert (refused.status, refused.reason) == ("INVALID_ARGUMENT", "INVALID_PRIORITY")
    assert refused.metadata == {"field": "x-ur-priority"}
    assert "x-ur-priority" in refused.message and "'urgent'" in refused.message
    # A wrong key is still UNAUTHENTICATED first, whatever the header.
    refused = await _share_seen(steps, auth("wrong", ("x-ur-priority", "urgent")))
    assert isinstance(refused, RuntimeServiceError)
    assert refused.status == "UNAUTHENTICATED"


async def test_priority_without_keys():
    steps: list[AdmissionStep] = [PriorityClass()]
    assert await _share_seen(steps, ()) == DEFAULT_SHARE
    assert await _share_seen(steps, (("x-ur-priority", "batch"),)) == Share("", Priority.BATCH, 1.0)
    refused = await _share_seen(steps, (("x-ur-priority", "high"),))
    assert isinstance(refused, RuntimeServiceError)
    assert refused.status == "INVALID_ARGUMENT"


async def test_real_servers_refuse_a_bad_priority(settings, server, tmp_path):
    """With keys and without: INVALID_ARGUMENT, reason INVALID_PRIORITY, field x-ur-priority."""
    keyed = await start_server(
        settings.model_copy(update={"api_keys_file": write(tmp_path, MIXED), "api_key": SecretStr(SINGLE)})
    )
    try:
        for port, metadata in ((keyed.port, auth(BULK)), (server.port, ())):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = msg.ModelServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.ListModels(
                        m.ListModelsRequest(), metadata=(*metadata, ("x-ur-priority", "now")), timeout=10
                    )
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                info = error_info(caught.value)
                assert (info.reason, info.metadata["field"]) == ("INVALID_PRIORITY", "x-ur-priority")
                answer = await stub.ListModels(
                    m.ListModelsRequest(), metadata=(*metadata, ("x-ur-priority", "batch")), timeout=10
                )
                assert answer.models
    finally:
        await keyed.stop(grace=0.5)
