"""A call that presents more than one credential is refused, whichever of them is right.

Two ``authorization`` metadata entries on one gRPC call, the first wrong and the second right,
were let through (the last one was read); at the gateway the first ``Authorization`` header was.
Now both faces refuse a repeated credential: UNAUTHENTICATED on every gRPC method (unary and
streaming, over the network and in-process) and 401 over HTTP, for two ``Authorization`` or two
``x-api-key`` headers.
"""

from __future__ import annotations

import grpc
import httpx
import pytest
from pydantic import SecretStr
from universal_runtime.v1 import inference_service_pb2, model_service_pb2, response_store_pb2
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from gateway.app import create_app
from service.server import start_server
from tests.conftest import EMBED_MODEL, error_info
from tests.gateway.gateway_fakes import asgi_client

KEY = "dup-Secret-0001"
RIGHT, WRONG = ("authorization", f"Bearer {KEY}"), ("authorization", "Bearer wrong")
REPEATED = {
    "wrong then right": (WRONG, RIGHT),
    "right then wrong": (RIGHT, WRONG),
    "right twice": (RIGHT, RIGHT),
}
SERVICES = [
    inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"],
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"],
    response_store_pb2.DESCRIPTOR.services_by_name["ResponseStoreService"],
]
METHODS = [method for service in SERVICES for method in service.methods]


@pytest.fixture(scope="module")
async def keyed(settings):
    running = await start_server(settings.model_copy(update={"api_key": SecretStr(KEY)}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield running, channel
    await running.stop(grace=0.5)


async def _call(channel, method, metadata) -> grpc.StatusCode:
    """Call ``method`` with an empty request (refused before it is parsed) and ``metadata``."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    kwargs = {"request_serializer": None, "response_deserializer": None}
    try:
        if method.client_streaming:
            async for _ in channel.stream_stream(path, **kwargs)(iter([b""]), metadata=metadata, timeout=30):
                pass
        elif method.server_streaming:
            async for _ in channel.unary_stream(path, **kwargs)(b"", metadata=metadata, timeout=30):
                pass
        else:
            await channel.unary_unary(path, **kwargs)(b"", metadata=metadata, timeout=30)
    except grpc.aio.AioRpcError as err:
        assert KEY not in (err.details() or "")
        return err.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.name)
async def test_every_method_refuses_two_authorization_entries(keyed, method):
    _, channel = keyed
    assert await _call(channel, method, (WRONG, RIGHT)) is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("metadata", REPEATED.values(), ids=REPEATED.keys())
async def test_two_credentials_are_unauthenticated_in_any_order_one_right_key_passes(keyed, metadata):
    running, channel = keyed
    remote = msg.ModelServiceStub(channel)
    # The gateway beside the server calls through the same admission chain, without the network.
    local = msg.ModelServiceStub(running.in_process.channel(channel))
    for stub in (remote, local):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListModels(m.ListModelsRequest(), metadata=metadata, timeout=30)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert error_info(refused.value).reason == "UNAUTHENTICATED"
        assert "more than one authorization" in refused.value.details()
        assert (await stub.ListModels(m.ListModelsRequest(), metadata=(RIGHT,), timeout=30)).models


@pytest.fixture(scope="module")
async def http(keyed):
    running, _ = keyed
    async with asgi_client(create_app(f"127.0.0.1:{running.port}", api_key=KEY)) as client:
        yield client


HEADERS = {
    "two Authorization, wrong first": [("authorization", "Bearer wrong"), ("authorization", f"Bearer {KEY}")],
    "two Authorization, right first": [("authorization", f"Bearer {KEY}"), ("authorization", "Bearer wrong")],
    "two x-api-key, wrong first": [("x-api-key", "wrong"), ("x-api-key", KEY)],
    "two x-api-key, right first": [("x-api-key", KEY), ("x-api-key", "wrong")],
    "the right key twice": [("x-api-key", KEY), ("x-api-key", KEY)],
}


@pytest.mark.parametrize("headers", HEADERS.values(), ids=HEADERS.keys())
async def test_repeated_credential_headers_are_401_on_every_kind_of_route(http: httpx.AsyncClient, headers):
    embed = {"model": EMBED_MODEL, "input": "hi"}
    answers = {
        "GET /v1/models": await http.get("/v1/models", headers=headers),
        "POST /v1/embeddings": await http.post("/v1/embeddings", json=embed, headers=headers),
        "POST /v1/messages": await http.post(
            "/v1/messages",
            json={"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
        ),
    }
    for route, answer in answers.items():
        assert answer.status_code == 401, f"{route}: {answer.status_code} {answer.text}"
        assert KEY not in answer.text
    assert answers["GET /v1/models"].json()["error"]["code"] == "invalid_api_key"
    assert "More than one" in answers["GET /v1/models"].json()["error"]["message"]
    assert answers["POST /v1/messages"].json()["error"]["type"] == "authentication_error"


async def test_one_credential_of_each_header_still_passes(http: httpx.AsyncClient):
    for headers in ([("authorization", f"Bearer {KEY}")], [("x-api-key", KEY)]):
        assert (await http.get("/v1/models", headers=headers)).status_code == 200
