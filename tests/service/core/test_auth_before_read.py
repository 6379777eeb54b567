"""API keys are checked from metadata before the request message is received or parsed.

A wrong key with a 15 MB message must not cost the server a full parse of the 15 MB before the
refusal; the server here (the gRPC face over the core, :mod:`tests.service.core.core_server`) counts its
deserializer's calls.
"""

from __future__ import annotations

import grpc
import pytest
from prometheus_client import REGISTRY

from service.core.admission.authentication import Authentication
from service.shared.api_keys import load_api_keys
from tests.conftest import error_info
from tests.service.core.core_server import default_steps, grpc_server

BIG = 15 * 1024 * 1024
KEY = "sekrit-key"
SERVICE = "test.Echo"


class Counting:
    """A deserializer that counts the messages it parsed."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, raw: bytes) -> bytes:
        self.calls += 1
        return raw


async def _size(request: bytes, ctx) -> bytes:
    return str(len(request)).encode()


async def _total(requests, ctx) -> bytes:
    return str(sum([len(r) async for r in requests])).encode()


@pytest.fixture
async def echo():
    parsed = Counting()
    handlers = {
        "Size": grpc.unary_unary_rpc_method_handler(_size, request_deserializer=parsed),
        "Total": grpc.stream_unary_rpc_method_handler(_total, request_deserializer=parsed),
    }
    server, _ = grpc_server(
        [lambda plane: plane.add_registered_method_handlers(SERVICE, handlers)],
        default_steps(Authentication(load_api_keys(KEY))),
        options=[("grpc.max_receive_message_length", 2 * BIG)],
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 2 * BIG)]
    ) as channel:
        yield channel, parsed
    await server.stop(0)


def _call(channel: grpc.aio.Channel, method: str, payload: bytes, metadata):
    if method == "Size":
        return channel.unary_unary(f"/{SERVICE}/Size")(payload, metadata=metadata, timeout=30)
    # Two messages: the client is still sending when a refusal that read nothing would end the call.
    return channel.stream_unary(f"/{SERVICE}/Total")(iter([payload, payload]), metadata=metadata, timeout=30)


@pytest.mark.parametrize("method", ["Size", "Total"])
@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong"),)], ids=["none", "wrong"])
async def test_a_big_request_with_a_wrong_key_is_refused_unparsed(echo, method, metadata):
    channel, parsed = echo
    payload = b"x" * BIG
    for _ in range(10):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _call(channel, method, payload, metadata)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED, caught.value.details()
        assert error_info(caught.value).reason == "UNAUTHENTICATED"
    assert parsed.calls == 0
    answer = await _call(channel, method, payload, (("authorization", f"Bearer {KEY}"),))
    messages = 1 if method == "Size" else 2
    assert answer == str(messages * BIG).encode()
    assert parsed.calls == messages


async def test_an_unknown_method_without_a_key_is_unauthenticated(echo):
    channel, _ = echo
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(f"/{SERVICE}/Nope")(b"", timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_unknown_methods_named_by_callers_without_a_key_add_no_metric_series(echo):
    """A caller without a key must not grow the metrics: each method name is a series of its own."""
    channel, _ = echo
    names = [f"Nope{i}" for i in range(3)]
    for name in names:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary(f"/{SERVICE}/{name}")(b"", timeout=10)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    methods = {
        sample.labels.get("method")
        for family in REGISTRY.collect()
        for sample in family.samples
        if family.name.startswith("ur_")
    }
    assert not methods & set(names), sorted(methods & set(names))
