"""OpenTelemetry tracing of the gateway (the ``[otel]`` extra): route spans and the grpc client.

Off unless an OTLP endpoint is given. The provider is the process's one
(:mod:`service.shared.tracing`, shared with the server); here the FastAPI instrumentation gives each
route a server span, and the grpc client instrumentation carries the trace context to the server as
``traceparent`` metadata, so a gateway request and the RPC it makes are one trace.
"""

from __future__ import annotations

from typing import Any

from service.shared import tracing as shared_tracing


def configure_gateway(endpoint: str | None) -> bool:
    """Tracing for a standalone gateway: the provider and the grpc client instrumentation.

    Call before the app's channel is made (the instrumentation patches the channel constructors),
    then :func:`instrument_app` on the app.

    Returns:
        Whether tracing is on.

    Raises:
        RuntimeError: the ``[otel]`` extra is not installed.

    """
    if not endpoint:
        return False
    if not shared_tracing.enabled():
        shared_tracing.tracer_provider(endpoint)
        from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorClient

        shared_tracing.instrument(GrpcAioInstrumentorClient())
    return True


def instrument_app(app: Any) -> None:
    """Give the app's routes server spans (FastAPI instrumentation), when tracing is on."""
    provider = shared_tracing.current_provider()
    if provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
