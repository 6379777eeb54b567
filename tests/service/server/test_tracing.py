"""OpenTelemetry traces: one trace from a gateway request down to the engines' spans.

The spans go to an in-memory exporter; the gateway app is driven in process. Over gRPC its
channel and the server are instrumented by the official grpc instrumentations, so the trace
context crosses the wire as ``traceparent`` metadata exactly as between two machines; with the
gateway beside the server (in-process calls) the core's span is the route's child directly.
Either way the core's admission chain makes one span per call (its ``tracing`` step), the parent
of the engines' spans.
"""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engines import tracing as engine_tracing
from gateway.app import create_app
from gateway.tracing import instrument_app
from service.server import start_server
from service.tracing import configure_tracing, shutdown_tracing
from tests.conftest import CHAT_MODEL, EMBED_MODEL, MAX_MESSAGE_BYTES


def test_tracing_is_off_unless_configured():
    assert configure_tracing(None) is False
    assert engine_tracing.enabled() is False
    # (First in the module: the fixture below turns tracing on until the module ends.)


def test_a_standalone_gateway_traces_its_routes_and_calls_when_given_an_endpoint(monkeypatch):
    """``UR_GATEWAY_OTLP_ENDPOINT``: tracing is on and the app is instrumented; without it, not."""
    from gateway import cli as gateway_cli
    from service.shared import tracing as shared_tracing

    served: dict = {}
    monkeypatch.setattr(gateway_cli, "run_uvicorn", lambda app, https, **kwargs: served.update(app=app))
    gateway_cli.main([])
    assert not shared_tracing.enabled()
    monkeypatch.setenv("UR_GATEWAY_OTLP_ENDPOINT", "http://127.0.0.1:1")  # nothing listens: spans drop
    try:
        gateway_cli.main([])
        assert shared_tracing.enabled()
        assert getattr(served["app"], "_is_instrumented_by_opentelemetry", False)
    finally:
        shared_tracing.shutdown()


@pytest.fixture(scope="module", params=["grpc", "in-process"])
async def traced(settings, request):
    exporter = InMemorySpanExporter()
    configure_tracing(None, span_processor=SimpleSpanProcessor(exporter))
    running = await start_server(settings.model_copy(update={"grpc_port": 0}))
    wrap = running.in_process.channel if request.param == "in-process" else None
    app = create_app(f"127.0.0.1:{running.port}", max_message_bytes=MAX_MESSAGE_BYTES, wrap_channel=wrap)
    instrument_app(app)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
                yield http, exporter, request.param
    finally:
        await running.stop(grace=1.0)
        shutdown_tracing()


def one_trace(exporter: InMemorySpanExporter, mode: str, route: str, rpc: str, engine_prefix: str) -> dict:
    """The spans of the trace that holds the route's server span, by name; checks its shape.

    ``mode`` ``grpc``: route -> gRPC client span -> gRPC server span -> the core's span -> the
    engines' spans; ``in-process``: route -> the core's span -> the engines' spans.
    """
    spans = exporter.get_finished_spans()
    routes = [s for s in spans if s.name == route and s.kind.name == "SERVER"]
    assert routes, f"no span {route!r} among {sorted({s.name for s in spans})}"
    trace_id = routes[-1].context.trace_id
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    by_name: dict = {}
    for span in in_trace:
        by_name.setdefault(span.name, []).append(span)
    cores = by_name.get(rpc.lstrip("/"), [])
    assert len(cores) == 1, f"not one core span {rpc.lstrip('/')} in the route's trace: {sorted(by_name)}"
    core = cores[0]
    assert core.attributes["rpc.status_code"] == "OK" and core.attributes["rpc.request_id"]
    if mode == "grpc":
        server_rpcs = [s for s in by_name.get(rpc, []) if s.kind.name == "SERVER"]
        client_rpcs = [s for s in by_name.get(rpc, []) if s.kind.name == "CLIENT"]
        assert server_rpcs and client_rpcs, f"the RPC {rpc} is not in the route's trace: {sorted(by_name)}"
        # The server's RPC span is the child of the gateway's call, across the wire.
        assert server_rpcs[0].parent.span_id == client_rpcs[0].context.span_id
        assert core.parent.span_id == server_rpcs[0].context.span_id
    else:
        assert rpc not in by_name, "an in-process call has no gRPC spans"
        route_spans = [s.context.span_id for s in in_trace if s.name.startswith(route)]
        assert core.parent.span_id in route_spans
    engine_spans = [s for s in in_trace if s.name.startswith(engine_prefix)]
    assert engine_spans, f"no {engine_prefix}* span in the trace: {sorted(by_name)}"
    for span in engine_spans:
        assert span.parent.span_id == core.context.span_id, span.name
        assert span.end_time >= span.start_time
    return by_name


async def test_a_chat_request_is_one_trace_from_the_route_to_prefill_and_decode(traced):
    http, exporter, mode = traced
    response = await http.post(
        "/v1/chat/completions",
        json={"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )
    assert response.status_code == 200
    spans = one_trace(
        exporter,
        mode,
        "POST /v1/chat/completions",
        "/universal_runtime.v1.InferenceService/Generate",
        "ur.generation.",
    )
    phases = {name for name in spans if name.startswith("ur.generation.")}
    assert phases == {"ur.generation.queue", "ur.generation.prefill", "ur.generation.decode"}
    decode = spans["ur.generation.decode"][0]
    assert decode.attributes["model"] == CHAT_MODEL
    assert decode.attributes["completion_tokens"] == response.json()["usage"]["completion_tokens"]
    prefill = spans["ur.generation.prefill"][0]
    assert prefill.end_time <= decode.start_time


async def test_an_embedding_request_carries_its_queue_and_batch_spans(traced):
    http, exporter, mode = traced
    response = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": ["a", "b"]})
    assert response.status_code == 200
    spans = one_trace(
        exporter, mode, "POST /v1/embeddings", "/universal_runtime.v1.InferenceService/Embed", "ur.encoder."
    )
    batch = spans["ur.encoder.batch"][0]
    assert batch.attributes["model"] == EMBED_MODEL and batch.attributes["inputs"] == 2
    assert spans["ur.encoder.queue"][0].end_time <= batch.end_time
