"""One RPC of a backend: its ids and caller from the server's metadata, its span, and its error status.

The server's proxy engine forwards what the server's admission decided about the call as
metadata, and every handler of the backend starts with :func:`call_scope`, which makes it current
for the engines:

- ``x-request-id``: the call's request id (:data:`service.request_context.request_id_var`; a new
  one when absent), logged with the call's lines and echoed in its error trailers;
- the caller that admission decided (key name, role, lane, fair-share class and weight): the
  :data:`engines.fair_share.caller_var` the engines' fair queues read;
- ``traceparent`` (W3C trace context): with tracing on, the handler's span is its child.

Both ends use :mod:`service.model_manager.backends.metadata` for these keys.

The server is the only client (the socket is its own), so these values are trusted as sent;
malformed ones fall back to the defaults.

Failures become statuses as the server's would be (:func:`error_status`): a
:class:`~engines.errors.RuntimeServiceError` its rich status, anything else INTERNAL with the
request id only, its traceback in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc

from engines.errors import RuntimeServiceError, UnavailableError
from engines.fair_share import caller_var
from engines.reasons import Reason
from service.model_manager.backends.metadata import caller_of
from service.request_context import client_request_id, request_id_var
from service.shared import tracing as shared_tracing
from service.status import internal_status, status_for_error

log = logging.getLogger("service.backend")

TRACER_NAME = "universal_runtime.backend"

Request = TypeVar("Request")
Response = TypeVar("Response")


@contextlib.contextmanager
def call_scope(method: str, context: grpc.aio.ServicerContext) -> Iterator[str]:
    """Make the call's request id, caller and span current for the ``with`` block; yields the request id.

    The context variables are set, not reset: grpc.aio runs each call in a task of its own, whose
    context ends with it.

    Args:
        method: The RPC's full name (``universal_runtime.v1.InferenceService/Embed``), the span's name.
        context: The call's servicer context (its metadata).

    """
    caller, sent_id, carrier = caller_of(context.invocation_metadata() or ())
    request_id = client_request_id(sent_id)
    request_id_var.set(request_id)
    caller_var.set(caller)
    if not shared_tracing.enabled():  # tracing off: nothing imported, nothing made
        yield request_id
        return
    from opentelemetry import propagate, trace

    parent = propagate.extract(carrier) if carrier else None
    tracer = trace.get_tracer(TRACER_NAME, tracer_provider=shared_tracing.current_provider())
    with tracer.start_as_current_span(method, context=parent, record_exception=False) as span:
        span.set_attribute("rpc.request_id", request_id)
        yield request_id


def error_status(error: Exception, method: str, request_id: str) -> grpc.Status:
    """The status a failed call ends with, logged as the server's error mapping logs it.

    Args:
        error: What the handler raised.
        method: The RPC's name, for the log line.
        request_id: The call's request id (in the INTERNAL message and the log line).

    Returns:
        ``error``'s rich status (:func:`service.status.status_for_error`) for a
        :class:`~engines.errors.RuntimeServiceError` (an INTERNAL one is logged with its cause);
        for anything else INTERNAL with a generic message naming ``request_id``
        (:func:`service.status.internal_status`), its traceback logged.

    """
    extra = {"request_id": request_id, "method": method}
    if isinstance(error, RuntimeServiceError):
        if error.status == "INTERNAL":
            log.error("rpc failed: %s", error.message, exc_info=error.__cause__ or error, extra=extra)
        return status_for_error(error)
    log.error("unhandled error in %s", method, exc_info=error, extra=extra)
    return internal_status(request_id)


async def abort_with(context: grpc.aio.ServicerContext, status: grpc.Status) -> None:
    """End the call with ``status`` (code, message, trailers with the ``google.rpc.Status``).

    Raises:
        grpc.aio.AbortError: always (``ServicerContext.abort``); grpc.aio ends the call with it.

    """
    await context.abort(status.code, status.details, status.trailing_metadata)


def unary_rpc(
    method: str,
) -> Callable[
    [Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]]],
    Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]],
]:
    """Decorator of a servicer's unary handler: :func:`call_scope` around it, failures as statuses.

    The handler's return value is the answer; what it raises ends the call with
    :func:`error_status` (cancellation passes through).

    Args:
        method: The RPC's full name (``universal_runtime.v1.BackendService/Load``).

    """

    def wrap(
        handler: Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]],
    ) -> Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]]:
        @functools.wraps(handler)
        async def run(self: Any, request: Request, context: grpc.aio.ServicerContext) -> Response:
            with call_scope(method, context) as request_id:
                try:
                    return await handler(self, request, context)
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    raise
                except Exception as exc:
                    status = error_status(exc, method, request_id)
                await abort_with(context, status)
                raise AssertionError("unreachable: abort raises")

        return run

    return wrap


def stream_rpc(
    method: str,
) -> Callable[
    [Callable[[Any, Request, grpc.aio.ServicerContext], AsyncIterator[Response]]],
    Callable[[Any, Request, grpc.aio.ServicerContext], AsyncIterator[Response]],
]:
    """Decorator of a servicer's response-streaming handler (an async generator), as :func:`unary_rpc`.

    Messages already sent stay sent; a failure after them ends the stream with its status.
    Cancellation (the client went away, its deadline passed) passes through, closing the
    handler's generator, and so whatever it iterates inside ``contextlib.aclosing``.
    """

    def wrap(
        handler: Callable[[Any, Request, grpc.aio.ServicerContext], AsyncIterator[Response]],
    ) -> Callable[[Any, Request, grpc.aio.ServicerContext], AsyncIterator[Response]]:
        @functools.wraps(handler)
        async def run(
            self: Any, request: Request, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Response]:
            with call_scope(method, context) as request_id:
                try:
                    async with contextlib.aclosing(handler(self, request, context)) as messages:
                        async for message in messages:
                            yield message
                    return
                except asyncio.CancelledError:
                    call = asyncio.current_task()
                    if not self.model_evicted(call):
                        raise  # the client went away, or its deadline passed
                    # Cancelled by the model's close between two messages (outside the model's
                    # own handling): the call still ends with its status, not a bare cancel.
                    call.uncancel()
                    status = error_status(
                        UnavailableError(
                            "the backend unloaded its model during the call; retry and it loads again",
                            reason=Reason.MODEL_UNLOADING,
                        ),
                        method,
                        request_id,
                    )
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:
                    status = error_status(exc, method, request_id)
                await abort_with(context, status)

        return run

    return wrap
