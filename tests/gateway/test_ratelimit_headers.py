"""OpenAI's x-ratelimit-* headers on every answer of a key with a quota, not only on 429s.

A real server (quotas on a test clock: no sleeps, every figure is arithmetic on the clock the
test moves) behind the gateway, over gRPC and with the combined process's in-process calls;
real models (MiniLM embeddings, SmolLM2 chat). Each test first moves the clock an hour on, so
every bucket starts full.
"""

from __future__ import annotations

import json

import grpc
import pytest
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import inference_service_pb2_grpc as isg

from service.shared.rate_limits import (
    RATE_LIMIT_HEADERS,
    openai_duration,
    rate_limit_headers,
    received_rate_limit_headers,
)
from tests.conftest import CHAT_MODEL, EMBED_MODEL
from tests.gateway.quota_gateway import quota_gateway

RATE_KEY = "ratelimit-Secret-0001"  # 1 request a second, burst 5, 1000 tokens a minute
INPUTS_KEY = "ratelimit-Secret-0002"  # encoder inputs and streams only: no headers
FREE_KEY = "ratelimit-Secret-0003"  # no quota at all
KEYS = (
    f'metered:\n  key: "{RATE_KEY}"\n  requests_per_second: 1\n  burst: 5\n  tokens_per_minute: 1000\n'
    f'inputs-only:\n  key: "{INPUTS_KEY}"\n  inputs_per_minute: 100\n  max_concurrent_streams: 4\n'
    f'free:\n  key: "{FREE_KEY}"\n  weight: 2\n'
)
TOKENS_PER_MINUTE = 1000
HOUR_S = 3600.0


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def rate_limits(headers) -> dict[str, str]:
    """The x-ratelimit-* headers of an HTTP answer (or gRPC metadata), by name."""
    return {name: headers[name] for name in RATE_LIMIT_HEADERS if name in headers}


@pytest.fixture(scope="module", params=["grpc", "in-process"])
async def served(settings, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("ratelimit-headers")
    async with quota_gateway(settings, KEYS, folder, request.param) as started:
        yield started


def embed_body() -> dict:
    return {"model": EMBED_MODEL, "input": ["the quick brown fox"]}


def chat_body(*, stream: bool) -> dict:
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 2,
        "temperature": 0,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def stream_usage(text: str) -> int:
    """total_tokens of an SSE chat stream's usage chunk."""
    for line in text.splitlines():  # a few dozen lines: 2 tokens
        if line.startswith("data: {"):
            usage = json.loads(line[len("data: ") :]).get("usage")
            if usage:
                return usage["total_tokens"]
    raise AssertionError(f"no usage chunk in {text!r}")


async def test_unary_answers_carry_the_headers_with_remaining_counting_down(served):
    http, clock, _ = served
    clock.now += HOUR_S
    seen = []
    used = 0
    for _ in range(3):
        answer = await http.post("/v1/embeddings", json=embed_body(), headers=auth(RATE_KEY))
        assert answer.status_code == 200
        used += answer.json()["usage"]["total_tokens"]
        seen.append(rate_limits(answer.headers))
    assert used > 0
    assert [h["x-ratelimit-remaining-requests"] for h in seen] == ["4", "3", "2"]
    assert [h["x-ratelimit-reset-requests"] for h in seen] == ["1s", "2s", "3s"]  # 1 a second
    assert {h["x-ratelimit-limit-requests"] for h in seen} == {"5"}
    # Charged before the answer's headers: the last answer shows all three calls' tokens.
    last = seen[-1]
    assert last["x-ratelimit-limit-tokens"] == str(TOKENS_PER_MINUTE)
    assert last["x-ratelimit-remaining-tokens"] == str(TOKENS_PER_MINUTE - used)
    assert last["x-ratelimit-reset-tokens"] == openai_duration(used * 60 / TOKENS_PER_MINUTE)
    clock.now += 1.5  # refills 1.5 requests: 2 + 1.5, whole 3
    answer = await http.post("/v1/embeddings", json=embed_body(), headers=auth(RATE_KEY))
    assert answer.headers["x-ratelimit-remaining-requests"] == "2"  # 3.5 - 1
    assert answer.headers["x-ratelimit-reset-requests"] == "2.5s"
    assert RATE_KEY not in str(answer.headers) and "metered" not in str(answer.headers)


async def test_streamed_chat_carries_the_headers_before_its_first_chunk(served):
    http, clock, _ = served
    clock.now += HOUR_S
    first = await http.post("/v1/chat/completions", json=chat_body(stream=True), headers=auth(RATE_KEY))
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")
    used = stream_usage(first.text)
    second = await http.post("/v1/chat/completions", json=chat_body(stream=True), headers=auth(RATE_KEY))
    assert second.status_code == 200
    one, two = rate_limits(first.headers), rate_limits(second.headers)
    assert (one["x-ratelimit-remaining-requests"], two["x-ratelimit-remaining-requests"]) == ("4", "3")
    assert (one["x-ratelimit-reset-requests"], two["x-ratelimit-reset-requests"]) == ("1s", "2s")
    # A stream's headers go out before its tokens are known: the second shows the first's.
    assert one["x-ratelimit-remaining-tokens"] == str(TOKENS_PER_MINUTE)
    assert one["x-ratelimit-reset-tokens"] == "0s"
    assert two["x-ratelimit-remaining-tokens"] == str(TOKENS_PER_MINUTE - used)
    assert two["x-ratelimit-reset-tokens"] == openai_duration(used * 60 / TOKENS_PER_MINUTE)


async def test_tokens_of_a_unary_chat_show_in_its_own_headers(served):
    http, clock, _ = served
    clock.now += HOUR_S
    answer = await http.post("/v1/chat/completions", json=chat_body(stream=False), headers=auth(RATE_KEY))
    assert answer.status_code == 200
    used = answer.json()["usage"]["total_tokens"]
    assert used > 0
    assert answer.headers["x-ratelimit-remaining-tokens"] == str(TOKENS_PER_MINUTE - used)
    clock.now += 30  # 500 tokens refilled: full again
    models = await http.get("/v1/models", headers=auth(RATE_KEY))
    assert models.headers["x-ratelimit-remaining-tokens"] == str(TOKENS_PER_MINUTE)
    assert models.headers["x-ratelimit-reset-tokens"] == "0s"


@pytest.mark.parametrize("key", [FREE_KEY, INPUTS_KEY])
async def test_a_key_without_a_request_or_token_quota_gets_no_headers(served, key):
    http, clock, _ = served
    clock.now += HOUR_S
    embedded = await http.post("/v1/embeddings", json=embed_body(), headers=auth(key))
    streamed = await http.post("/v1/chat/completions", json=chat_body(stream=True), headers=auth(key))
    assert (embedded.status_code, streamed.status_code) == (200, 200)
    assert rate_limits(embedded.headers) == {} and rate_limits(streamed.headers) == {}
    assert "x-request-id" in embedded.headers and "x-request-id" in streamed.headers


async def test_a_429_still_has_its_refusal_s_headers(served):
    http, clock, _ = served
    clock.now += HOUR_S
    for _ in range(5):
        assert (await http.get("/v1/models", headers=auth(RATE_KEY))).status_code == 200
    refused = await http.get("/v1/models", headers=auth(RATE_KEY))
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"] == "5s"


async def test_grpc_initial_metadata_has_them_for_unary_and_streamed_calls(served):
    _, clock, port = served
    clock.now += HOUR_S
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = isg.InferenceServiceStub(channel)
        metadata = (*auth(RATE_KEY).items(), ("x-request-id", "rl-1"))
        unary = stub.Embed(e.EmbedRequest(model=EMBED_MODEL, inputs=["x"]), metadata=metadata)
        await unary
        initial = await unary.initial_metadata()
        assert rate_limits(initial)["x-ratelimit-remaining-requests"] == "4"
        assert rate_limits(initial)["x-ratelimit-limit-tokens"] == str(TOKENS_PER_MINUTE)
        # The request id stays in a unary answer's trailers only.
        assert initial.get("x-request-id") is None
        assert (await unary.trailing_metadata()).get("x-request-id") == "rl-1"
        stream = stub.GenerateStream(
            g.GenerateStreamRequest(
                model=CHAT_MODEL, prompt="Hi", parameters=g.GenerationParameters(max_tokens=2)
            ),
            metadata=(*auth(RATE_KEY).items(), ("x-request-id", "rl-2")),
        )
        headers = await stream.initial_metadata()  # before any message is read
        assert headers.get("x-request-id") == "rl-2"
        assert rate_limits(headers)["x-ratelimit-remaining-requests"] == "3"
        assert rate_limits(headers)["x-ratelimit-reset-requests"] == "2s"
        assert [message async for message in stream]
        values = " ".join(str(value) for _, value in headers)
        assert RATE_KEY not in values and "metered" not in values
        free = stub.Embed(
            e.EmbedRequest(model=EMBED_MODEL, inputs=["x"]), metadata=tuple(auth(FREE_KEY).items())
        )
        await free
        assert rate_limits(await free.initial_metadata()) == {}


def test_headers_are_written_from_a_state_and_read_back_only_when_well_formed():
    state = {"limit_requests": "5", "remaining_requests": "4", "reset_requests_s": "1.000", "other": "x"}
    assert rate_limit_headers(state) == {
        "x-ratelimit-limit-requests": "5",
        "x-ratelimit-remaining-requests": "4",
        "x-ratelimit-reset-requests": "1s",
    }
    assert rate_limit_headers({"limit_tokens": "9", "remaining_tokens": "9"}) == {}  # no reset
    received = {
        "x-ratelimit-limit-requests": "5",
        "x-ratelimit-remaining-requests": "4\r\nset-cookie: a",  # not a count: dropped
        "x-ratelimit-reset-requests": b"1s",  # binary: dropped
        "x-ratelimit-limit-tokens": "9" * 33,  # too long: dropped
        "x-other": "1",  # not one of the six
    }
    assert received_rate_limit_headers(received) == {"x-ratelimit-limit-requests": "5"}
    assert received_rate_limit_headers(None) == {}
