"""OpenTelemetry traces of the server (the optional ``[otel]`` extra), off unless ``UR_OTLP_ENDPOINT`` is set.

Built on the process's provider (:mod:`service.shared.tracing`, the gateway's too). When on: the
official grpc instrumentations (a span per RPC on the server; the in-process gateway's calls carry
the trace context as ``traceparent`` metadata, so a gateway request and the RPC it makes are one
trace) and the engines' own child spans (queue wait, prefill, decode, encoder batches;
:mod:`engines.tracing`) with the model's name. The gateway's route spans are
:func:`gateway.tracing.instrument_app`'s, called by the composition root (:mod:`service.cli`).
When off, nothing is imported or patched and the engines' span calls return at once.

The instrumentations patch ``grpc.aio.server`` and the channel constructors, so
:func:`configure_tracing` runs before the server and the gateway's channel are made.
"""

from __future__ import annotations

from typing import Any

from engines import tracing as engine_tracing
from service.shared import tracing as shared_tracing


def configure_tracing(endpoint: str | None, *, span_processor: Any = None) -> bool:
    """Turn tracing on for this process when ``endpoint`` (or a test's ``span_processor``) is given.

    Args:
        endpoint: the OTLP/gRPC collector (see :func:`service.shared.tracing.tracer_provider`); None or
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
    provider = shared_tracing.tracer_provider(endpoint, span_processor=span_processor)
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorClient, GrpcAioInstrumentorServer

    shared_tracing.instrument(GrpcAioInstrumentorServer())
    shared_tracing.instrument(GrpcAioInstrumentorClient())
    engine_tracing.enable(provider.get_tracer("universal_runtime.engines"))
    return True


def shutdown_tracing() -> None:
    """Undo :func:`configure_tracing`: remove the instrumentations and flush the provider."""
    engine_tracing.disable()
    shared_tracing.shutdown()
