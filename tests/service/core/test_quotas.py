"""Per-key quotas: the buckets on an injected clock, then on the real server with real models.

The server's quota clock is replaced (service.server.Quotas built with a test clock), so every
figure is arithmetic on the clock the test moves: no sleeps, nothing timed.
"""

from __future__ import annotations

import math

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from prometheus_client import REGISTRY
from universal_runtime.v1 import common_pb2, tokenization_pb2
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg
from universal_runtime.v1 import model_service_pb2 as m
from universal_runtime.v1 import model_service_pb2_grpc as msg

from service import server as server_module
from service.quotas import NO_QUOTA, QuotaRefusal, Quotas, TokenBucket, encoder_inputs, usage_tokens
from service.server import start_server
from service.shared.api_keys import load_api_keys
from service.status import status_for_error
from tests.conftest import CHAT_MODEL, EMBED_MODEL, RERANK_MODEL, error_info


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


KEYS = {
    "rate": ("rate-Secret-01", "requests_per_second: 1\n  burst: 2"),
    "tokens": ("tokens-Secret-02", "tokens_per_minute: 20"),
    "inputs": ("inputs-Secret-03", "inputs_per_minute: 5"),
    "streams": ("streams-Secret-04", "max_concurrent_streams: 1\n  tokens_per_minute: 20"),
    "free": ("free-Secret-05", "weight: 2"),
}


def keys_text() -> str:
    return "".join(f'{name}:\n  key: "{key}"\n  {policy}\n' for name, (key, policy) in KEYS.items())


def auth(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[name][0]}"),)


def quotas(tmp_path, clock: Clock) -> Quotas:
    path = tmp_path / "keys.yaml"
    path.write_text(keys_text())
    return Quotas(load_api_keys(None, path), clock=clock)


# --- the buckets --------------------------------------------------------------------------------


def test_token_bucket_refills_to_capacity_and_goes_into_debt():
    bucket = TokenBucket(capacity=4, per_second=2, now=0.0)
    assert bucket.wait_s(4) == 0 and bucket.wait_s(5) == math.inf
    bucket.take(10)
    assert bucket.balance == -6 and bucket.remaining() == 0
    assert bucket.wait_s(1) == 3.5  # (1 - -6) / 2
    bucket.refill(3.5)
    assert bucket.balance == 1 and bucket.until_full_s() == 1.5
    bucket.refill(100.0)
    assert bucket.balance == 4
    bucket.refill(50.0)  # a clock going back adds nothing
    assert bucket.balance == 4


def test_request_rate_burst_then_refill(tmp_path):
    clock = Clock()
    state = quotas(tmp_path, clock)
    first, second = state.admit("rate"), state.admit("rate")
    refused = state.admit("rate")
    assert isinstance(refused, QuotaRefusal) and not isinstance(first, QuotaRefusal)
    assert (refused.limit, refused.key, refused.retry_after_s) == ("requests_per_second", "rate", 1.0)
    assert refused.state == {"limit_requests": "2", "remaining_requests": "0", "reset_requests_s": "2.000"}
    clock.now += 0.5
    assert state.admit("rate").retry_after_s == 0.5  # a refusal takes nothing
    clock.now += 0.5
    assert not isinstance(state.admit("rate"), QuotaRefusal)
    first.finish()
    second.finish()


def test_tokens_charged_after_the_call_may_go_into_debt(tmp_path):
    clock = Clock()
    state = quotas(tmp_path, clock)
    big = state.admit("tokens")
    other = state.admit("tokens")  # admitted too: the first one's size is not known yet
    big.finish(50)
    big.finish(50)  # idempotent: charged once
    other.finish(0)
    refused = state.admit("tokens")
    # 20 - 50 = -30 tokens; 1 token needed at 20/60 a second: 93 s.
    assert refused.limit == "tokens_per_minute" and refused.retry_after_s == pytest.approx(93)
    assert refused.state["remaining_tokens"] == "0" and refused.state["limit_tokens"] == "20"
    clock.now += 93
    assert not isinstance(state.admit("tokens"), QuotaRefusal)


def test_inputs_wait_or_never_fit(tmp_path):
    clock = Clock()
    state = quotas(tmp_path, clock)
    state.admit("inputs", inputs=3).finish()
    refused = state.admit("inputs", inputs=3)
    assert refused.limit == "inputs_per_minute" and refused.retry_after_s == pytest.approx(12)
    never = state.admit("inputs", inputs=6)
    assert never.retry_after_s is None and "more than API key 'inputs''s quota of 5" in never.message
    assert not isinstance(state.admit("inputs", inputs=2), QuotaRefusal)
    assert not isinstance(state.admit("inputs"), QuotaRefusal)  # no inputs: not an encoder call


def test_streams_slot_freed_once(tmp_path):
    state = quotas(tmp_path, Clock())
    held = state.admit("streams", stream=True)
    refused = state.admit("streams", stream=True)
    assert refused.limit == "max_concurrent_streams" and refused.retry_after_s is None
    assert not isinstance(state.admit("streams"), QuotaRefusal)  # unary calls are not streams
    held.finish()
    held.finish()
    again = state.admit("streams", stream=True)
    assert not isinstance(again, QuotaRefusal)
    assert isinstance(state.admit("streams", stream=True), QuotaRefusal)  # the second finish freed nothing


def test_keys_without_quota_keep_no_state(tmp_path):
    state = quotas(tmp_path, Clock())
    assert bool(state)
    for name in ("free", "", "someone-else", "x" * 10_000):
        assert state.admit(name, inputs=10**9, stream=True) is NO_QUOTA
    assert set(state._by_key) == {"rate", "tokens", "inputs", "streams"}  # bounded: configured keys
    assert not Quotas(load_api_keys("only-a-single-key"))


def test_refusal_status_carries_error_info_and_retry_info(tmp_path):
    state = quotas(tmp_path, Clock())
    state.admit("rate").finish()
    state.admit("rate").finish()
    error = state.admit("rate").error()
    assert (error.status, error.reason, error.retry_after_s) == ("RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", 1.0)
    status = status_for_error(error)
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    [details] = [value for key, value in status.trailing_metadata if key == "grpc-status-details-bin"]
    info, retry = details_of(status_pb2.Status.FromString(details))
    assert (info.reason, info.metadata["limit"], info.metadata["api_key"]) == (
        "QUOTA_EXCEEDED",
        "requests_per_second",
        "rate",
    )
    assert (retry.retry_delay.seconds, retry.retry_delay.nanos) == (1, 0)


def details_of(status: status_pb2.Status):
    info, retry = error_details_pb2.ErrorInfo(), None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
        else:
            detail.Unpack(info)
    return info, retry


def retry_delay_ms(error: grpc.aio.AioRpcError) -> int | None:
    """The RetryInfo delay of a failed call in ms, or None without one."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            _, retry = details_of(status_pb2.Status.FromString(value))
            if retry is not None:
                return retry.retry_delay.seconds * 1000 + retry.retry_delay.nanos // 1_000_000
    return None


# --- the real server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def limited(settings, tmp_path_factory):
    """A server with the keys above whose quotas run on a test clock; its channel and the clock."""
    path = tmp_path_factory.mktemp("quota-keys") / "keys.yaml"
    path.write_text(keys_text())
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_module, "Quotas", lambda keys: Quotas(keys, clock=clock))
        running = await start_server(settings.model_copy(update={"api_keys_file": path}))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield channel, clock
    await running.stop(grace=0.5)


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_info(caught.value).reason == "QUOTA_EXCEEDED"
    return caught.value


def refusals(limit: str) -> float:
    return REGISTRY.get_sample_value("ur_quota_exceeded_total", {"api_key": "", "limit": limit}) or 0.0


async def test_over_the_request_rate_is_resource_exhausted_with_retry_info(limited):
    channel, clock = limited
    models = msg.ModelServiceStub(channel)
    before = refusals("requests_per_second")
    for _ in range(2):  # the burst
        await models.ListModels(m.ListModelsRequest(), metadata=auth("rate"), timeout=10)
    error = await refused(models.ListModels(m.ListModelsRequest(), metadata=auth("rate"), timeout=10))
    info = error_info(error)
    assert (info.metadata["limit"], info.metadata["api_key"]) == ("requests_per_second", "rate")
    assert "'rate' is over its quota of 1 requests a second (burst 2)" in error.details()
    assert retry_delay_ms(error) == 1000
    assert refusals("requests_per_second") == before + 1
    # Other keys are not held by this one's quota; the same key is served once the bucket refills.
    await models.ListModels(m.ListModelsRequest(), metadata=auth("free"), timeout=10)
    clock.now += 1
    await models.ListModels(m.ListModelsRequest(), metadata=auth("rate"), timeout=10)


def chat(max_tokens: int) -> dict:
    return {
        "model": CHAT_MODEL,
        "messages": [g.ChatMessage(role=g.CHAT_ROLE_USER, content="Name three colours of the rainbow.")],
        "parameters": g.GenerationParameters(max_tokens=max_tokens, temperature=0),
    }


async def test_tokens_per_minute_refuses_the_call_after_a_big_one(limited):
    channel, clock = limited
    inference = isg.InferenceServiceStub(channel)
    answer = await inference.Generate(g.GenerateRequest(**chat(16)), metadata=auth("tokens"), timeout=120)
    used = answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert used > 20  # the prompt alone is over the minute's 20 tokens: served whole, in debt
    error = await refused(
        inference.Generate(g.GenerateRequest(**chat(1)), metadata=auth("tokens"), timeout=120)
    )
    assert error_info(error).metadata["limit"] == "tokens_per_minute"
    # In debt by used - 20; one token needed, at 20/60 tokens a second.
    wait_s = (used - 19) * 3
    assert abs(retry_delay_ms(error) - wait_s * 1000) <= 1
    clock.now += wait_s + 0.001
    await inference.Generate(g.GenerateRequest(**chat(1)), metadata=auth("tokens"), timeout=120)


async def test_inputs_per_minute_on_embeddings_and_rerank(limited):
    channel, clock = limited
    inference = isg.InferenceServiceStub(channel)

    def embed(count: int):
        request = e.EmbedRequest(model=EMBED_MODEL, inputs=[f"text {i}" for i in range(count)])
        return inference.Embed(request, metadata=auth("inputs"), timeout=60)

    assert len((await embed(3)).embeddings) == 3
    error = await refused(embed(3))
    assert error_info(error).metadata["limit"] == "inputs_per_minute"
    assert retry_delay_ms(error) == 12_000  # 1 input short, at 5/60 a second
    never = await refused(embed(6))
    assert retry_delay_ms(never) is None and "more than API key 'inputs''s quota of 5" in never.details()
    clock.now += 12
    rerank = e.RerankRequest(model=RERANK_MODEL, query="colour", documents=["red", "blue", "green"])
    assert len((await inference.Rerank(rerank, metadata=auth("inputs"), timeout=60)).results) == 3
    assert error_info(await refused(embed(1))).metadata["limit"] == "inputs_per_minute"


async def test_max_concurrent_streams_and_a_streams_tokens(limited):
    channel, clock = limited
    inference = isg.InferenceServiceStub(channel)
    first = inference.GenerateStream(
        g.GenerateStreamRequest(**chat(8)), metadata=auth("streams"), timeout=120
    )
    stream = aiter(first)
    await anext(stream)  # the stream is open and counted
    second = inference.GenerateStream(
        g.GenerateStreamRequest(**chat(1)), metadata=auth("streams"), timeout=120
    )
    error = await refused(anext(aiter(second)))
    assert error_info(error).metadata["limit"] == "max_concurrent_streams"
    assert retry_delay_ms(error) is None
    # A unary call is not a stream: served beside the open one.
    await msg.ModelServiceStub(channel).ListModels(
        m.ListModelsRequest(), metadata=auth("streams"), timeout=10
    )
    rest = [message async for message in stream]
    used = rest[-1].usage.prompt_tokens + rest[-1].usage.completion_tokens
    assert used > 20
    # The stream's slot is free, and its usage (its last message) was charged: tokens now refuse.
    later = inference.GenerateStream(
        g.GenerateStreamRequest(**chat(1)), metadata=auth("streams"), timeout=120
    )
    error = await refused(anext(aiter(later)))
    assert error_info(error).metadata["limit"] == "tokens_per_minute"
    clock.now += (used - 19) * 3 + 0.001
    replies = [
        message
        async for message in inference.GenerateStream(
            g.GenerateStreamRequest(**chat(1)), metadata=auth("streams"), timeout=120
        )
    ]
    assert replies[-1].usage.completion_tokens == 1


def test_usage_tokens_and_encoder_inputs_of_messages():
    usage = common_pb2.Usage(prompt_tokens=7, completion_tokens=5, total_tokens=12)
    assert usage_tokens(g.GenerateResponse(usage=usage)) == 12
    assert usage_tokens(e.EmbedResponse(usage=common_pb2.Usage(prompt_tokens=9))) == 9  # encoders count
    assert usage_tokens(g.GenerateStreamResponse(text="a")) == 0  # not the last message
    assert usage_tokens(tokenization_pb2.TokenizeResponse()) == 0  # no usage field
    assert usage_tokens(None) == 0  # a failed call
    path = "/universal_runtime.v1.InferenceService/"
    assert encoder_inputs(path + "Embed", e.EmbedRequest(inputs=["a", "b"])) == 2
    assert encoder_inputs(path + "Rerank", e.RerankRequest(query="q", documents=["a", "b", "c"])) == 3
    assert encoder_inputs(path + "Generate", g.GenerateRequest(prompt="a")) == 0
    assert encoder_inputs(path + "Embed", ValueError("unparsed")) == 0  # a refused parse
