"""The process's OpenTelemetry tracer provider (the ``[otel]`` extra), shared by both faces.

Off unless an OTLP endpoint is given: then one tracer provider per process exports spans over
OTLP/gRPC in the background (batched). The faces add their instrumentations on it:
:mod:`service.tracing` (grpc server and client, the engines' spans) and :mod:`gateway.tracing`
(FastAPI routes, the grpc client). When off, nothing is imported or patched.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

SERVICE_NAME = "universal-runtime"

_provider: Any = None
_instrumentors: list[Any] = []


def enabled() -> bool:
    """Whether tracing is on in this process."""
    return _provider is not None


def tracer_provider(endpoint: str | None, *, span_processor: Any = None) -> Any:
    """The process's tracer provider, made (and set as the global one) on the first call.

    Args:
        endpoint: the OTLP/gRPC collector, ``http://host:4317`` (``http``: no TLS) or ``https://...``.
        span_processor: a span processor to use instead of the OTLP exporter (tests pass one with
            an in-memory exporter).

    Raises:
        RuntimeError: the ``[otel]`` extra is not installed.

    """
    global _provider
    if _provider is not None:
        return _provider
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "an OTLP endpoint is set but OpenTelemetry is not installed: "
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
    _provider = provider
    log.info("tracing on", extra={"endpoint": endpoint or "in-process"})
    return provider


def current_provider() -> Any:
    """The process's tracer provider, or ``None`` while tracing is off."""
    return _provider


def instrument(instrumentor: Any) -> None:
    """Turn an OpenTelemetry instrumentor on with the process's provider (undone by :func:`shutdown`)."""
    instrumentor.instrument(tracer_provider=_provider)
    _instrumentors.append(instrumentor)


def shutdown() -> None:
    """Remove the instrumentations and flush and drop the provider (tracing is off again)."""
    global _provider
    for instrumentor in _instrumentors:
        instrumentor.uninstrument()
    _instrumentors.clear()
    if _provider is not None:
        _provider.shutdown()
    _provider = None
