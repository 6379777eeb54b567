"""Request bytes that are not the method's message: INVALID_ARGUMENT, reason MALFORMED_REQUEST.

gRPC parses each request with the method's deserializer before any handler runs; grpc.aio alone
answers a failure there UNKNOWN with the parser's exception text. Every method of the contract
and of standard health (unary, server-, client- and bidi-streaming) answers the same stable
status and a generic message naming the message type, never the parser's text (the gRPC face's
parser, :mod:`service.faces.grpc_server`). The in-process face gets messages, not bytes; a call
of raw bytes through it must still answer as gRPC does.
"""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2
from universal_runtime.v1 import anomaly_pb2, inference_service_pb2, model_service_pb2, response_store_pb2

from tests.conftest import error_info, free_port

METHODS = [
    (service.full_name, method)
    for module in (inference_service_pb2, model_service_pb2, response_store_pb2, health_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
    for method in service.methods
]

BAD_BYTES = {
    "invalid-varint": b"\xff\xff\xff",
    "truncated-varint": b"\x08\xff",
    "invalid-wire-type": b"\x0e",
    "length-past-the-end": b"\x0a\x05ab",
}

LEAKS = ("Error parsing", "DecodeError", "Unexpected", "Traceback", "protobuf")


def _call(channel: grpc.aio.Channel, path: str, method, raw: bytes):
    """Send ``raw`` to ``path`` as its request (the one message of a stream), bytes unchanged."""
    if method.client_streaming and method.server_streaming:
        return channel.stream_stream(path)(iter([raw]), timeout=10)
    if method.client_streaming:
        return channel.stream_unary(path)(iter([raw]), timeout=10)
    if method.server_streaming:
        return channel.unary_stream(path)(raw, timeout=10)
    return channel.unary_unary(path)(raw, timeout=10)


async def _outcome(call) -> None:
    if hasattr(call, "__aiter__"):
        async for _ in call:
            pass
    else:
        await call


def test_every_kind_of_method_is_covered():
    kinds = {(m.client_streaming, m.server_streaming) for _, m in METHODS}
    assert kinds == {(False, False), (False, True), (True, False), (True, True)}


@pytest.mark.parametrize("raw", BAD_BYTES.values(), ids=BAD_BYTES.keys())
@pytest.mark.parametrize(("service", "method"), METHODS, ids=[m.name for _, m in METHODS])
async def test_undecodable_bytes_are_invalid_argument_without_parser_text(channel, service, method, raw):
    path = f"/{service}/{method.name}"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _outcome(_call(channel, path, method, raw))
    error = caught.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, (path, error.details())
    assert error.details() == (f"the request message could not be parsed as {method.input_type.full_name}")
    assert not any(leak in error.details() for leak in LEAKS)
    info = error_info(error)
    assert info.reason == "MALFORMED_REQUEST"
    assert info.metadata["message_type"] == method.input_type.full_name


async def test_a_bad_message_after_good_ones_ends_the_stream_with_the_same_status(channel):
    path = "/universal_runtime.v1.InferenceService/StreamDetectAnomaly"
    call = channel.stream_stream(path)
    first = anomaly_pb2.StreamDetectAnomalyRequest(
        config=anomaly_pb2.StreamDetectorConfig()
    ).SerializeToString()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _outcome(call(iter([first, b"\xff\xff\xff"]), timeout=10))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).reason == "MALFORMED_REQUEST"
    assert not any(leak in caught.value.details() for leak in LEAKS)


async def test_the_in_process_path_gives_the_same_answer(server, channel):
    """A multi-callable without codecs (bytes in, bytes out) on the in-process channel.

    Its remote is a channel to a port nobody listens on: the answer is the in-process face's.
    """
    path = "/universal_runtime.v1.InferenceService/Embed"
    raw = BAD_BYTES["invalid-varint"]
    with pytest.raises(grpc.aio.AioRpcError) as remote:
        await channel.unary_unary(path)(raw, timeout=10)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as dead:
        as_is = server.in_process.channel(dead).unary_unary(path)
        with pytest.raises(grpc.aio.AioRpcError) as in_process:
            await as_is(raw, timeout=10)
    assert in_process.value.code() == remote.value.code()
    assert in_process.value.details() == remote.value.details()
    assert error_info(in_process.value) == error_info(remote.value)
