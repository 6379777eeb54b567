"""max_concurrent_requests on the real server: held streams fill it, extra calls are refused at once."""

from __future__ import annotations

import asyncio
import logging
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from gateway.app import create_app
from service.core.admission.concurrency import ConcurrencyLimit
from service.server import start_server
from service.settings import Settings
from tests.conftest import CHAT_MODEL, error_info
from tests.gateway.gateway_fakes import asgi_client

LIMIT = 2
EXTRA = 3
TEST_TIMEOUT_S = 90.0
# <|endoftext|>, <|im_start|>, <|im_end|> (ids 0-2) banned: a held stream cannot end on its own.
NO_END = [g.LogitBias(token_id=token, bias=-100) for token in (0, 1, 2)]


def stream_request(max_tokens: int) -> g.GenerateStreamRequest:
    return g.GenerateStreamRequest(
        model=CHAT_MODEL,
        prompt="Tell a long story about a lighthouse keeper.",
        parameters=g.GenerationParameters(max_tokens=max_tokens, temperature=0, logit_bias=NO_END),
    )


@pytest.fixture(scope="module")
async def limited(settings):
    running = await start_server(settings.model_copy(update={"max_concurrent_requests": LIMIT}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        # The first ListModels estimates every model's memory (seconds, in threads): done here,
        # so that the test's short-deadline probes time admission, not that estimate.
        await msg.ModelServiceStub(channel).ListModels(m.ListModelsRequest(), timeout=60)
        yield running, channel
    await running.stop(grace=0.5)


async def hold_stream(inference) -> grpc.aio.UnaryStreamCall:
    """A GenerateStream that is admitted and producing (its first message read), left open."""
    call = inference.GenerateStream(stream_request(max_tokens=1000), timeout=60)
    await call.read()
    return call


async def refused_or_ok(coro) -> str:
    try:
        await coro
    except grpc.aio.AioRpcError as err:
        info = error_info(err)
        assert info.metadata["max_concurrent_requests"] == str(LIMIT)
        assert "max_concurrent_requests" in err.details()
        return f"{err.code().name}/{info.reason}"
    return "OK"


async def drain(call) -> int:
    return len([message async for message in call])


async def wait_admitted(models, deadline_s: float = 10.0) -> None:
    """Poll until one call is admitted: a cancelled stream's place frees when the server sees the cancel."""
    started = time.monotonic()
    for _ in range(200):
        if await refused_or_ok(models.ListModels(m.ListModelsRequest(), timeout=5)) == "OK":
            return
        assert time.monotonic() - started < deadline_s, "no place freed after the cancel"
        await asyncio.sleep(0.05)
    raise AssertionError("no place freed after the cancel")


def rejected_total() -> float:
    """``ur_rejected_requests_total`` with reason queue_full, over every method."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        if family.name == "ur_rejected_requests"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels.get("reason") == "queue_full"
    )


async def test_n_plus_k_calls_give_exactly_k_overloaded_then_places_free(limited, caplog):
    running, channel = limited
    inference, models = isg.InferenceServiceStub(channel), msg.ModelServiceStub(channel)
    caplog.set_level(logging.INFO, logger="universal_runtime.rpc")
    async with asyncio.timeout(TEST_TIMEOUT_S):
        held = [await hold_stream(inference) for _ in range(LIMIT)]
        rejected_before = rejected_total()
        try:
            outcomes = await asyncio.gather(
                refused_or_ok(drain(inference.GenerateStream(stream_request(max_tokens=2), timeout=30))),
                refused_or_ok(
                    inference.Generate(g.GenerateRequest(model=CHAT_MODEL, prompt="Hi"), timeout=30)
                ),
                *(
                    refused_or_ok(models.ListModels(m.ListModelsRequest(), timeout=30))
                    for _ in range(EXTRA - 2)
                ),
            )
            assert outcomes == ["RESOURCE_EXHAUSTED/OVERLOADED"] * EXTRA
            assert rejected_total() - rejected_before == EXTRA  # ur_rejected_requests_total{queue_full}
            # Probes are never counted nor refused.
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING

            # Through the gateway, over gRPC and in-process (the same chain): 429 with Retry-After,
            # in OpenAI's error shape.
            for wrap in (None, running.in_process.channel):
                async with asgi_client(create_app(f"127.0.0.1:{running.port}", wrap_channel=wrap)) as http:
                    answer = await http.post(
                        "/v1/chat/completions",
                        json={"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Hi"}]},
                    )
                assert answer.status_code == 429, wrap
                assert answer.headers["retry-after"] == "1"
                assert answer.json()["error"]["code"] == "overloaded"
                assert answer.json()["error"]["type"] == "rate_limit_error"

            # One held stream cancelled: its place frees once the server sees the cancel.
            held[0].cancel()
            await wait_admitted(models)
            # A stream that ends gives its place back before its status goes out: no wait needed.
            assert await drain(inference.GenerateStream(stream_request(max_tokens=3), timeout=30)) >= 1
            assert await refused_or_ok(models.ListModels(m.ListModelsRequest(), timeout=5)) == "OK"
        finally:
            for call in held:
                call.cancel()
        await wait_admitted(models)
        # Both places free again: LIMIT simultaneous calls pass.
        again = await asyncio.gather(
            *(refused_or_ok(models.ListModels(m.ListModelsRequest(), timeout=10)) for _ in range(LIMIT))
        )
        assert again == ["OK"] * LIMIT
    refused = [
        r
        for r in caplog.records
        if r.name == "universal_runtime.rpc" and getattr(r, "code", "") == "RESOURCE_EXHAUSTED"
    ]
    assert len(refused) >= EXTRA  # refused calls are still logged, each with its method
    assert {r.method.rpartition("/")[2] for r in refused} >= {"GenerateStream", "Generate", "ListModels"}


def test_unlimited_by_default(settings):
    assert Settings.model_fields["max_concurrent_requests"].default == 0
    assert settings.max_concurrent_requests == 0


@pytest.mark.parametrize("value", [0, -1])
def test_limit_below_one_is_refused(value):
    with pytest.raises(ValueError, match="at least 1"):
        ConcurrencyLimit(value)


def test_negative_setting_is_refused(monkeypatch):
    monkeypatch.setenv("UR_MAX_CONCURRENT_REQUESTS", "-1")
    with pytest.raises(ValueError, match="max_concurrent_requests"):
        Settings()
    monkeypatch.setenv("UR_MAX_CONCURRENT_REQUESTS", "many")
    with pytest.raises(ValueError, match="max_concurrent_requests"):
        Settings()
    monkeypatch.setenv("UR_MAX_CONCURRENT_REQUESTS", "16")
    assert Settings().max_concurrent_requests == 16
