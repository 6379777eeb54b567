"""Spans recorded inside engines (queue wait, prefill, decode, encoder batches), when tracing is on.

Engines do not depend on OpenTelemetry: the service turns tracing on (``service.tracing``) by
handing a tracer to :func:`enable`. Until then :func:`record_span` returns at its first line,
so tracing costs nothing when it is off. Spans are recorded after the fact from timestamps
(``time.time_ns()``, the epoch nanoseconds OpenTelemetry uses) taken where the work happened,
as children of the span current in the caller's context (the RPC's).
"""

from __future__ import annotations

from typing import Any

_tracer: Any = None


def enable(tracer: Any) -> None:
    """Record spans with ``tracer`` (an ``opentelemetry.trace.Tracer``) from now on."""
    global _tracer
    _tracer = tracer


def disable() -> None:
    """Stop recording spans."""
    global _tracer
    _tracer = None


def enabled() -> bool:
    """Whether spans are recorded."""
    return _tracer is not None


def record_span(name: str, start_ns: int, end_ns: int, **attributes: str | int | float) -> None:
    """Record a finished span ``name`` from ``start_ns`` to ``end_ns`` (epoch ns) under the current span.

    Args:
        name: the span name (``ur.generation.prefill``).
        start_ns: start, ``time.time_ns()``.
        end_ns: end, ``time.time_ns()``; clamped to ``start_ns`` when earlier.
        attributes: span attributes (``model``, ``batch_size``).

    """
    tracer = _tracer
    if tracer is None:
        return
    span = tracer.start_span(name, start_time=start_ns, attributes=attributes)
    span.end(end_time=max(start_ns, end_ns))
