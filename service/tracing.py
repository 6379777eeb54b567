"""OpenTelemetry traces of the server (the optional ``[otel]`` extra), off unless ``UR_OTLP_ENDPOINT`` is set.

Built on the gateway's provider (:mod:`gateway.tracing`, one per process). When on: the official
grpc instrumentations (a span per RPC on the server; the in-process gateway's calls carry the
trace context as ``traceparent`` metadata, so a gateway request and the RPC it makes are one
trace), the FastAPI instrumentation for the gateway's routes, and the engines' own child spans
(queue wait, prefill, decode, encoder batches; :mod:`engines.tracing`) with the model's name.
When off, nothing is imported or patched and the engines' span calls return at once.

The instrumentations patch ``grpc.aio.server`` and the channel constructors, so
:func:`configure_tracing` runs before the server and the gateway's channel are made.
"""

from __future__ import annotations

from typing import Any

from engines import tracing as engine_tracing
from gateway import tracing as gateway_tracing


def configure_tracing(endpoint: str | None, *, span_processor: Any = None) -> bool:
    """Turn tracing on for this process when ``endpoint`` (or a test's ``span_processor``) is given.

    Args:
        endpoint: the OTLP/gRPC collector (see :func:`gateway.tracing.tracer_provider`); None or
            empty leaves tracing off.
        span_processor: a span processor to use instead of the OTLP exporter (tests).

    Returns:
        Whether tracing is on.

    Raises:
        RuntimeError: the ``[otel]`` extra is not installed.

    """
    if not endpoint and span_processor is None:
        return False
    if engine_tracing.enabled():
        return True  # already on in this process (tests start several servers)
    provider = gateway_tracing.tracer_provider(endpoint, span_processor=span_processor)
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorClient, GrpcAioInstrumentorServer

    gateway_tracing.instrument(GrpcAioInstrumentorServer())
    gateway_tracing.instrument(GrpcAioInstrumentorClient())
    engine_tracing.enable(provider.get_tracer("universal_runtime.engines"))
    return True


def instrument_gateway(app: Any) -> None:
    """Give the in-process gateway's routes server spans, when tracing is on."""
    gateway_tracing.instrument_app(app)


def shutdown_tracing() -> None:
    """Undo :func:`configure_tracing`: remove the instrumentations and flush the provider."""
    engine_tracing.disable()
    gateway_tracing.shutdown()
