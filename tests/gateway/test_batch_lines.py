"""The batch line executor: one line through the gateway's own route, in-process, on the real models."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.app import create_app
from gateway.batch_lines import MAX_ATTEMPTS, BatchLineExecutor
from gateway.dependencies import PRIORITY_HEADER
from gateway.settings import GatewayConfig
from service.shared.api_keys import ApiKeys, load_api_keys
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES

SECRET = "batch-line-secret-0123456789"
URLS = ("/v1/embeddings", "/v1/chat/completions")


class HeaderRecorder:
    """ASGI middleware keeping the headers of every request it passes on."""

    def __init__(self, app: ASGIApp, seen: list[dict[str, str]]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
async def keyed(server):
    """An executor over a gateway that needs the key ``team-a``, and the headers its routes saw."""
    seen: list[dict[str, str]] = []
    app = create_app(
        f"127.0.0.1:{server.port}",
        max_message_bytes=MAX_MESSAGE_BYTES,
        api_keys=load_api_keys(SECRET),  # named "default"
        wrap_channel=server.in_process.channel,
    )
    app.add_middleware(HeaderRecorder, seen=seen)
    async with BatchLineExecutor(app, urls=URLS, timeout_s=120) as executor:
        yield executor, seen


def test_secret_gives_the_key_of_a_name():
    keys = load_api_keys(SECRET)
    assert keys.secret("default") == SECRET
    assert keys.secret("nobody") is None
    assert ApiKeys().secret("default") is None


async def test_embeddings_line_answers_as_the_live_route(keyed):
    executor, seen = keyed
    status, body = await executor.execute(
        "/v1/embeddings", {"model": EMBED_MODEL, "input": ["a cat", "a dog"]}, "default", request_id="req-1"
    )
    assert status == 200, body
    assert body["object"] == "list" and [item["index"] for item in body["data"]] == [0, 1]
    assert len(body["data"][0]["embedding"]) == 384 and body["usage"]["prompt_tokens"] > 0
    # The line went as the submitting key, at batch priority, under its own request id.
    headers = seen[-1]
    assert headers["authorization"] == f"Bearer {SECRET}"
    assert headers[PRIORITY_HEADER] == "batch" and headers["x-request-id"] == "req-1"


async def test_chat_line_on_the_real_model(keyed):
    executor, _ = keyed
    line = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    status, body = await executor.execute("/v1/chat/completions", line, "default")
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
    assert 0 < body["usage"]["completion_tokens"] <= 4


async def test_route_errors_are_the_routes_own(keyed):
    executor, _ = keyed
    status, body = await executor.execute("/v1/embeddings", {"input": "no model"}, "default")
    assert status == 400 and body["error"]["param"] == "model"
    assert body["error"]["code"] == "missing_required_parameter"
    status, body = await executor.execute(
        "/v1/embeddings", {"model": "no-such-model", "input": "x"}, "default"
    )
    assert status == 404 and body["error"]["code"] == "model_not_found"


async def test_streaming_and_foreign_routes_are_refused_before_any_call(keyed):
    executor, seen = keyed
    before = len(seen)
    line = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    status, body = await executor.execute("/v1/chat/completions", line, "default")
    assert status == 400 and body["error"]["code"] == "streaming_unsupported"
    for url in ("/v1/batches", "/v1/files", "/v1/classifiers", "/v1/embeddings/../batches", "/v1/rerank"):
        status, body = await executor.execute(url, {}, "default")
        assert status == 400 and body["error"]["code"] == "invalid_url", url
    assert len(seen) == before


async def test_a_key_no_longer_configured_is_401(keyed):
    executor, _ = keyed
    status, body = await executor.execute("/v1/embeddings", {"model": EMBED_MODEL, "input": "x"}, "gone")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert SECRET not in str(body)


async def test_a_line_past_its_timeout_is_504(server):
    app = create_app(f"127.0.0.1:{server.port}", max_message_bytes=MAX_MESSAGE_BYTES)
    async with BatchLineExecutor(app, urls=URLS, timeout_s=0.001) as executor:
        line = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Count."}], "max_tokens": 200}
        status, body = await executor.execute("/v1/chat/completions", line, "")
    assert status == 504 and body["error"]["code"] == "timeout"


async def test_not_started_is_503():
    app = create_app("127.0.0.1:1")
    status, body = await BatchLineExecutor(app, urls=URLS).execute("/v1/embeddings", {}, "")
    assert status == 503 and body["error"]["type"] == "server_error"


def _busy_app(busy_answers: int) -> tuple[FastAPI, list[int]]:
    """An app whose /v1/embeddings answers 429 (Retry-After: 0) ``busy_answers`` times, then 200."""
    app = FastAPI()
    app.state.config = GatewayConfig(grpc_target="unused", api_key=None, max_message_bytes=1024)
    calls: list[int] = []

    @app.post("/v1/embeddings")
    async def embeddings() -> JSONResponse:
        calls.append(1)
        if len(calls) <= busy_answers:
            return JSONResponse({"error": {"code": "quota_exceeded"}}, 429, headers={"retry-after": "0"})
        return JSONResponse({"object": "list", "data": []})

    return app, calls


async def test_a_429_with_retry_after_is_sent_again():
    app, calls = _busy_app(busy_answers=3)
    async with BatchLineExecutor(app, urls=URLS) as executor:
        assert await executor.execute("/v1/embeddings", {}, "") == (200, {"object": "list", "data": []})
    assert len(calls) == 4


async def test_retries_are_bounded():
    app, calls = _busy_app(busy_answers=10 * MAX_ATTEMPTS)
    async with BatchLineExecutor(app, urls=URLS) as executor:
        status, body = await executor.execute("/v1/embeddings", {}, "")
    assert status == 429 and body["error"]["code"] == "quota_exceeded"
    assert len(calls) == MAX_ATTEMPTS


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s"):
        BatchLineExecutor(FastAPI(), urls=URLS, timeout_s=0)


def test_the_servers_batch_endpoints_are_post_routes_of_the_gateway():
    """Every url the server lets a batch name is a route the executor can run."""
    from engines.batches.lines import SUPPORTED_URLS

    paths = create_app("127.0.0.1:1").openapi()["paths"]
    assert {path for path, operations in paths.items() if "post" in operations} >= set(SUPPORTED_URLS)
