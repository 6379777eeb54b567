"""Step ``tracing``: one OpenTelemetry span per call to the core, whatever face it came from.

With tracing off (no ``otlp_endpoint``) the step passes calls on untouched. With it on, the span
is named for the method (``universal_runtime.v1.InferenceService/Embed``), carries the request
id and the status code, and is the parent of the engines' spans: a gateway's call in process
nests under the gateway's HTTP span, a gRPC call under the gRPC instrumentation's server span.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from service.core.admission.request_log import status_name
from service.core.chain import AdmissionStep, StreamHandler, UnaryHandler
from service.core.context import CallContext
from service.shared import tracing

TRACER_NAME = "universal_runtime.core"


class Tracing(AdmissionStep):
    """Wraps each call in a span when tracing is configured (see the module)."""

    name = "tracing"

    async def unary(self, ctx: CallContext, request: Any, call_next: UnaryHandler) -> Any:
        """Run the call inside its span (the current span while it runs)."""
        if not tracing.enabled():
            return await call_next(ctx, request)
        from opentelemetry import trace

        tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracing.current_provider())
        with tracer.start_as_current_span(ctx.method.path.lstrip("/"), record_exception=False) as span:
            ctx.span = span
            span.set_attribute("rpc.request_id", ctx.request_id)
            error: BaseException | None = None
            try:
                return await call_next(ctx, request)
            except BaseException as exc:
                error = exc
                raise
            finally:
                span.set_attribute("rpc.status_code", status_name(error))

    async def stream(self, ctx: CallContext, request: Any, call_next: StreamHandler) -> AsyncIterator[Any]:
        """Iterate the call inside its span (made current while the operation starts)."""
        if not tracing.enabled():
            async for item in call_next(ctx, request):
                yield item
            return
        from opentelemetry import trace

        tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracing.current_provider())
        span = tracer.start_span(ctx.method.path.lstrip("/"))
        ctx.span = span
        span.set_attribute("rpc.request_id", ctx.request_id)
        error: BaseException | None = None
        try:
            # Current only while the first message is made (a generator's context cannot stay
            # attached across yields); the engines' spans of that start nest under it.
            with trace.use_span(span, end_on_exit=False):
                stream = call_next(ctx, request)
                first = await anext(stream, None)
            if first is None:
                return
            yield first
            async for item in stream:
                yield item
        except BaseException as exc:
            error = exc
            raise
        finally:
            span.set_attribute("rpc.status_code", status_name(error))
            span.end()
