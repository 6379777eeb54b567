"""OpenTelemetry traces (the optional ``[otel]`` extra), off unless ``UR_OTLP_ENDPOINT`` is set.

When on: a tracer provider exporting over OTLP/gRPC (batched, in the background), the official
grpc instrumentations (a span per RPC on the server; the gateway's calls carry the trace
context as ``traceparent`` metadata, so a gateway request and the RPC it makes are one trace),
the FastAPI instrumentation for the gateway's routes, and the engines' own child spans (queue
wait, prefill, decode, encoder batches; :mod:`engines.tracing`) with the model's name. When off,
nothing is imported or patched and the engines' span calls return at once.

The instrumentations patch ``grpc.aio.server`` and the channel constructors, so
:func:`configure_tracing` runs before the server and the gateway's channel are made.
"""

from __future__ import annotations

import logging
from typing import Any

from engines import tracing as engine_tracing

log = logging.getLogger(__name__)

SERVICE_NAME = "universal-runtime"

_instrumentors: list[Any] = []


def configure_tracing(endpoint: str | None, *, span_processor: Any = None) -> bool:
    """Turn tracing on for this process when ``endpoint`` (or a test's ``span_processor``) is given.

    Args:
        endpoint: the OTLP/gRPC collector, ``http://host:4317`` (``http``: no TLS) or
            ``https://...``; None or empty leaves tracing off.
        span_processor: a span processor to use instead of the OTLP exporter (tests pass one with
            an in-memory exporter).

    Returns:
        Whether tracing is on.

    Raises:
        RuntimeError: the ``[otel]`` extra is not installed.

    """
    if not endpoint and span_processor is None:
        return False
    if _instrumentors:
        return True  # already on in this process (tests start several servers)
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorClient, GrpcAioInstrumentorServer
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "UR_OTLP_ENDPOINT is set but OpenTelemetry is not installed: "
            "pip install 'universal-runtime[otel]'"
        ) from exc
    if span_processor is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        span_processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint, insecure=str(endpoint).startswith("http://"))
        )
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(span_processor)
    trace.set_tracer_provider(provider)
    for instrumentor in (GrpcAioInstrumentorServer(), GrpcAioInstrumentorClient()):
        instrumentor.instrument(tracer_provider=provider)
        _instrumentors.append(instrumentor)
    engine_tracing.enable(provider.get_tracer("universal_runtime.engines"))
    log.info("tracing on", extra={"endpoint": endpoint or "in-process"})
    return True


def instrument_gateway(app: Any) -> None:
    """Give the gateway app's routes server spans (FastAPI instrumentation), when tracing is on."""
    if not _instrumentors:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app)


def shutdown_tracing() -> None:
    """Undo :func:`configure_tracing`: remove the instrumentations and flush the provider."""
    from opentelemetry import trace

    for instrumentor in _instrumentors:
        instrumentor.uninstrument()
    _instrumentors.clear()
    engine_tracing.disable()
    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()
