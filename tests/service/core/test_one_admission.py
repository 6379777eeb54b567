"""One admission chain for every face: gRPC, the gateway in process, and a batch line.

The same chat and Embed calls come in three ways into one real server (API keys, a quota,
tracing off and on); what reaches the tasks right above the engines is recorded there: the
call's request id and its caller (key, role, share: class and weight), read from the context the
engines read. Each call also charges the key's quota exactly once (one request, and its tokens).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from universal_runtime.v1 import encoders_pb2, generation_pb2, inference_service_pb2_grpc

from engines.fair_share import Priority, Share, current_caller
from gateway.app import create_app
from service.cli import start_batch_lines
from service.core.context import current_call
from service.server import start_server
from service.shared.api_keys import load_api_keys
from service.tracing import configure_tracing, shutdown_tracing
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES

KEY = "team-a-0123456789abcdef0123456789abcdef"
KEYS = {
    "team-a": {
        "key": KEY,
        "weight": 2.0,
        # A bucket that refills about once in 1,000 s: every call shows as one request taken.
        "requests_per_second": 0.001,
        "burst": 1000,
        "tokens_per_minute": 1_000_000,
    }
}
# Every call asks for the batch class: each face must carry it to the queues.
SHARE = Share("team-a", Priority.BATCH, 2.0)
EMBED_PATH = "/universal_runtime.v1.InferenceService/Embed"


@pytest.fixture(scope="module", params=["tracing-off", "tracing-on"])
async def served(settings, tmp_path_factory, request) -> AsyncIterator[dict[str, Any]]:
    """A server with the key, the gateway in its process, its batch lines, and what the tasks saw."""
    exporter = None
    if request.param == "tracing-on":
        exporter = InMemorySpanExporter()
        configure_tracing(None, span_processor=SimpleSpanProcessor(exporter))
    keys_file = tmp_path_factory.mktemp("keys") / "keys.json"
    keys_file.write_text(json.dumps(KEYS))
    mine = settings.model_copy(update={"grpc_port": 0, "api_keys_file": keys_file})
    running = await start_server(mine)
    seen: list[tuple[str, str, Any]] = []
    operations = running.in_process.plane.operations
    servicer = operations[EMBED_PATH].behaviour.__self__
    embed, stream = servicer.encoders.embed, servicer.generation.stream

    async def recorded_embed(*args: Any, **kwargs: Any) -> Any:
        seen.append(("embed", current_call().request_id, current_caller()))
        return await embed(*args, **kwargs)

    def recorded_stream(*args: Any, **kwargs: Any) -> Any:
        seen.append(("chat", current_call().request_id, current_caller()))
        return stream(*args, **kwargs)

    servicer.encoders.embed = recorded_embed
    servicer.generation.stream = recorded_stream  # complete() streams too
    target = f"127.0.0.1:{running.port}"
    lines = await start_batch_lines(mine, target, running)
    app = create_app(
        target,
        max_message_bytes=MAX_MESSAGE_BYTES,
        api_keys=load_api_keys(None, keys_file),
        wrap_channel=running.in_process.channel,
    )
    quotas = running.in_process.plane.chain.step("quota").quotas
    # The key's buckets stop refilling (their clock stands still): a charge stays visible.
    now = quotas._clock()
    quotas._clock = lambda: now
    for state in quotas._by_key.values():
        state.clock = quotas._clock
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http,
            grpc.aio.insecure_channel(target) as channel,
        ):
            yield {
                "http": http,
                "stub": inference_service_pb2_grpc.InferenceServiceStub(channel),
                "lines": lines,
                "seen": seen,
                "quota": quotas,
                "exporter": exporter,
            }
    finally:
        if lines is not None:
            await lines.close()
        await running.stop(grace=1.0)
        if exporter is not None:
            shutdown_tracing()


def _state(quotas: Any) -> tuple[int, int]:
    state = quotas.rate_limit_state("team-a")
    return int(state["remaining_requests"]), int(state["remaining_tokens"])


async def _grpc_embed(served: dict[str, Any], request_id: str) -> int:
    metadata = (("authorization", f"Bearer {KEY}"), ("x-request-id", request_id), ("x-ur-priority", "batch"))
    response = await served["stub"].Embed(
        encoders_pb2.EmbedRequest(model=EMBED_MODEL, inputs=["one admission"]), metadata=metadata
    )
    return response.usage.prompt_tokens


async def _grpc_chat(served: dict[str, Any], request_id: str) -> int:
    metadata = (("authorization", f"Bearer {KEY}"), ("x-request-id", request_id), ("x-ur-priority", "batch"))
    request = generation_pb2.GenerateStreamRequest(
        model=CHAT_MODEL, prompt="Hi", parameters=generation_pb2.GenerationParameters(max_tokens=4)
    )
    usage = 0
    async for message in served["stub"].GenerateStream(request, metadata=metadata):
        if message.HasField("usage"):
            usage = message.usage.prompt_tokens + message.usage.completion_tokens
    return usage


def _headers(request_id: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", "X-Request-ID": request_id, "X-UR-Priority": "batch"}


async def _gateway_embed(served: dict[str, Any], request_id: str) -> int:
    body = {"model": EMBED_MODEL, "input": ["one admission"]}
    answer = await served["http"].post("/v1/embeddings", json=body, headers=_headers(request_id))
    assert answer.status_code == 200, answer.text
    return answer.json()["usage"]["total_tokens"]


async def _gateway_chat(served: dict[str, Any], request_id: str) -> int:
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    usage = 0
    async with served["http"].stream(
        "POST", "/v1/chat/completions", json=body, headers=_headers(request_id)
    ) as answer:
        assert answer.status_code == 200
        async for line in answer.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line.removeprefix("data: "))
                if chunk.get("usage"):
                    usage = chunk["usage"]["total_tokens"]
    return usage


async def _line_embed(served: dict[str, Any], request_id: str) -> int:
    body = {"model": EMBED_MODEL, "input": ["one admission"]}
    status, answer = await served["lines"].execute("/v1/embeddings", body, "team-a", request_id=request_id)
    assert status == 200, answer
    return answer["usage"]["total_tokens"]


async def _line_chat(served: dict[str, Any], request_id: str) -> int:
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    status, answer = await served["lines"].execute(
        "/v1/chat/completions", body, "team-a", request_id=request_id
    )
    assert status == 200, answer
    return answer["usage"]["total_tokens"]


CALLS = {
    ("grpc", "embed"): _grpc_embed,
    ("grpc", "chat"): _grpc_chat,
    ("gateway", "embed"): _gateway_embed,
    ("gateway", "chat"): _gateway_chat,
    ("batch-line", "embed"): _line_embed,
    ("batch-line", "chat"): _line_chat,
}


@pytest.mark.parametrize(("face", "kind"), list(CALLS))
async def test_a_call_reaches_the_engines_with_the_same_id_caller_share_and_quota_charge(served, face, kind):
    request_id = f"{face}-{kind}-{id(served) % 10_000}"
    requests_before, tokens_before = _state(served["quota"])
    tokens = await CALLS[face, kind](served, request_id)
    requests_after, tokens_after = _state(served["quota"])
    mine = [(what, caller) for what, seen_id, caller in served["seen"] if seen_id == request_id]
    assert [what for what, _ in mine] == [kind], served["seen"][-3:]
    caller = mine[0][1]
    assert (caller.name, caller.role, caller.share) == ("team-a", "user", SHARE)
    assert requests_before - requests_after == 1  # one request taken from the key's bucket
    assert tokens > 0 and tokens_before - tokens_after == tokens  # its usage charged once
    exporter = served["exporter"]
    if exporter is not None:  # the core's span of the call, whatever the face
        rpc = {"embed": "Embed", "chat": "Generate" if face == "batch-line" else "GenerateStream"}[kind]
        spans = [
            span
            for span in exporter.get_finished_spans()
            if span.attributes.get("rpc.request_id") == request_id
        ]
        assert [span.name for span in spans] == [f"universal_runtime.v1.InferenceService/{rpc}"]
        assert spans[0].attributes["rpc.status_code"] == "OK"
