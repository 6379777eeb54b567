"""Per-method request limits (``service.faces.request_limits``): a text RPC's request over
``max_text_request_bytes`` is refused by its length before it is parsed on the event loop,
with RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE; other methods keep gRPC's own, larger limit."""

from __future__ import annotations

import grpc
import pytest
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc
from universal_runtime.v1 import tokenization_pb2 as t

from service.server import start_server
from tests.conftest import CHAT_MODEL, EMBED_MODEL, error_info

TEXT_LIMIT = 64 * 1024
OVER = "word " * (TEXT_LIMIT // 5 + 100)


@pytest.fixture(scope="module")
async def small_limit(settings):
    running = await start_server(
        settings.model_copy(update={"grpc_port": 0, "max_text_request_bytes": TEXT_LIMIT})
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield inference_service_pb2_grpc.InferenceServiceStub(channel)
    await running.stop(grace=1.0)


def assert_too_large(error: grpc.aio.AioRpcError, method: str) -> None:
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = error_info(error)
    assert info.reason == "MESSAGE_TOO_LARGE"
    assert int(info.metadata["max_bytes"]) == TEXT_LIMIT
    assert int(info.metadata["bytes"]) > TEXT_LIMIT
    assert f"{method} accepts at most {TEXT_LIMIT} bytes" in error.details()


async def test_an_oversized_unary_text_request_is_refused(small_limit):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await small_limit.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=[OVER]), timeout=30)
    assert_too_large(caught.value, "Embed")
    # A request within the limit is served as usual.
    response = await small_limit.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["fits"]), timeout=60)
    assert len(response.embeddings) == 1


async def test_an_oversized_streaming_text_request_is_refused_on_the_stream(small_limit):
    request = g.GenerateStreamRequest(model=CHAT_MODEL, prompt=OVER)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in small_limit.GenerateStream(request, timeout=30):
            pass
    assert_too_large(caught.value, "GenerateStream")


async def test_methods_without_a_text_limit_keep_grpcs_own(small_limit):
    # 20,000 packed values (160 KB) is over the text limit but within max_receive_message_bytes.
    values = [float(i % 97) for i in range(20_000)]
    response = await small_limit.DetectAnomaly(
        a.DetectAnomalyRequest(
            numeric_rows=a.NumericRows(column_count=4, values=values),
            backend=a.ANOMALY_BACKEND_ECOD,
        ),
        timeout=60,
    )
    assert len(response.scores) == 5_000


async def test_oversized_tokenize_and_detokenize_requests_are_refused(small_limit):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await small_limit.Tokenize(t.TokenizeRequest(model=CHAT_MODEL, prompt=OVER), timeout=30)
    assert_too_large(caught.value, "Tokenize")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        ids = [300] * (TEXT_LIMIT // 2)  # two bytes per id on the wire
        await small_limit.Detokenize(t.DetokenizeRequest(model=CHAT_MODEL, token_ids=ids), timeout=30)
    assert_too_large(caught.value, "Detokenize")
