"""A real server with API keys of both roles, and gateways in front of it (over gRPC and in-process).

Keys: ``ops`` (role admin), ``team-a`` and ``team-b`` (role user, one in each form of the keys
file), and ``..`` (role user): a name that would climb out of a folder if it were ever used as a
path segment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from universal_runtime.v1 import (
    inference_service_pb2_grpc,
    model_service_pb2_grpc,
    response_store_pb2_grpc,
)

from gateway.app import create_app
from service.server import RunningServer, start_server
from service.shared.api_keys import load_api_keys
from tests.conftest import MAX_MESSAGE_BYTES
from tests.gateway.gateway_fakes import asgi_client
from tests.service.ownership.keys import KEYS_FILE


class Stubs:
    """The keyed server's stubs over one channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.inference = inference_service_pb2_grpc.InferenceServiceStub(channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(channel)
        self.responses = response_store_pb2_grpc.ResponseStoreServiceStub(channel)


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("owner-keys") / "keys.yaml"
    path.write_text(KEYS_FILE)
    return path


@pytest.fixture(scope="module")
async def keyed(settings, keys_file, tmp_path_factory) -> AsyncIterator[RunningServer]:
    """The test catalog served with the keys above, over a state store of its own."""
    running = await start_server(
        settings.model_copy(
            update={"api_keys_file": keys_file, "data_dir": tmp_path_factory.mktemp("owner-data")}
        )
    )
    yield running
    await running.stop(grace=1.0)


@pytest.fixture(scope="module")
async def stubs(keyed) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{keyed.port}", options=[("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    ) as channel:
        yield Stubs(channel)


@pytest.fixture(scope="module", params=["grpc", "in-process"])
async def gateway(keyed, keys_file, request) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the gateway in front of the keyed server, with the same keys: standalone (over
    gRPC), and with the combined process's in-process calls (the same admission chain, no network)."""
    wrap = keyed.in_process.channel if request.param == "in-process" else None
    app = create_app(
        f"127.0.0.1:{keyed.port}",
        max_message_bytes=MAX_MESSAGE_BYTES,
        api_keys=load_api_keys(None, keys_file),
        wrap_channel=wrap,
    )
    async with asgi_client(app) as client:
        yield client
