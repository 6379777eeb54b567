"""The gRPC face: the server's method handlers, each a thin adapter over the core.

For every call it makes a :class:`~service.core.context.CallContext` from the call's metadata
(``x-request-id``, ``authorization``, ``x-ur-priority``, ``x-ur-client-address``), peer and
deadline, runs the operation through the data plane's admission chain, and writes the outcome
as gRPC does: the answer, or the error's status with a ``google.rpc.ErrorInfo``
(:func:`service.status.status_for_error`), the context's headers and trailers.

Two refusals stay here because they are about bytes on this transport:

- **Before parsing.** A call without a valid API key is refused before its message is read
  (the authentication step's check, run on the metadata): grpc.aio starts a handler whose request
  is a stream before reading any message, so the refusal is a handler of that kind without a
  deserializer. A 15 MB request with a wrong key costs its metadata, not a parse; a client
  stream is received, unparsed and bounded, before the refusal (:func:`_read_upload_then_refuse`).
- **While parsing.** Bytes that are not the method's message are INVALID_ARGUMENT, reason
  MALFORMED_REQUEST (grpc.aio would answer UNKNOWN with the parser's text), and a unary request
  over its method's byte limit (:class:`~service.faces.request_limits.RequestLimits`) is
  RESOURCE_EXHAUSTED, reason MESSAGE_TOO_LARGE, checked on the received length. Both are raised
  inside the chain, after admission, so a refused key still answers UNAUTHENTICATED.

Health and reflection are gRPC's own services: their handlers take the gRPC context, and run
through the same chain (log line, metrics, ``auth_public_health``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import grpc

from engines.errors import RuntimeServiceError
from service.core.admission.authentication import Authentication
from service.core.admission.error_mapping import AnsweredByFace
from service.core.context import AnswerHeaders, CallContext, MethodInfo
from service.core.data_plane import (
    PUBLIC_SERVICES,
    DataPlane,
    Operation,
    operations_of,
    refused_operation,
    refusing_parse_errors,
)
from service.faces.metadata import call_context, checked_parser
from service.faces.request_limits import RequestLimits
from service.status import set_status, status_for_error

log = logging.getLogger("universal_runtime.rpc")

#: Bounds of the upload a refused client stream is read for (never parsed): bytes, then seconds.
REFUSED_UPLOAD_MAX_BYTES = 64 * 1024 * 1024
REFUSED_UPLOAD_MAX_S = 2.0


class GrpcFace(grpc.GenericRpcHandler):
    """The handlers of every method of a :class:`DataPlane`, and of gRPC's own services (see the module).

    Register gRPC's own services (health, reflection) through it as through a server
    (``add_HealthServicer_to_server(servicer, face)``), then :meth:`attach` it to the server.

    Args:
        plane: The data plane (its operations and admission chain).
        limits: The request byte limits.

    """

    def __init__(self, plane: DataPlane, limits: RequestLimits) -> None:
        self._plane = plane
        self._limits = limits
        self._native: dict[str, Operation] = {}
        step = plane.chain.step("authentication")
        self._auth = step if isinstance(step, Authentication) else None
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._refusals: dict[str, grpc.RpcMethodHandler] = {}

    # -- registration of gRPC's own services (health, reflection) ----------------------------

    def add_generic_rpc_handlers(self, handlers: Iterable[Any]) -> None:
        """Ignored: the generated code registers the same methods by name as well (below)."""

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Any]) -> None:
        """Serve ``service``'s gRPC-native methods (their behaviours take the gRPC context)."""
        self._native.update(operations_of(service, handlers))

    def attach(self, server: grpc.aio.Server) -> None:
        """Serve every method on ``server``."""
        for path, operation in {**self._plane.operations, **self._native}.items():
            self._handlers[path] = self._handler(operation, native=path in self._native)
            self._refusals[path] = self._refusal(operation.info)
        server.add_generic_rpc_handlers((self,))

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        """The method's handler, or one that refuses the call unread when its key is not valid.

        An unknown method is UNIMPLEMENTED only for a call with a valid key (or a public service's
        path): without one it is UNAUTHENTICATED, so a caller without a key learns nothing of the
        methods a server has.
        """
        path = handler_call_details.method
        handler = self._handlers.get(path)
        if self._auth is None:
            return handler
        operation = self._plane.operations.get(path) or self._native.get(path)
        # An unknown path is the caller's choice: one "unknown" metric series, whatever it named.
        unknown = MethodInfo(path, public=path.startswith(PUBLIC_SERVICES), known=False)
        info = operation.info if operation is not None else unknown
        metadata = handler_call_details.invocation_metadata or ()
        credentials = tuple(
            value for key, value in metadata if key == "authorization" and isinstance(value, str)
        )
        try:
            self._auth.identify(CallContext(method=info, request_id="", credentials=credentials))
        except RuntimeServiceError:
            return self._refusals[path] if path in self._refusals else self._refusal(info)
        return handler

    # -- handlers -------------------------------------------------------------------------------

    def _context(self, info: MethodInfo, context: grpc.aio.ServicerContext) -> CallContext:
        remaining = context.time_remaining()
        return call_context(
            info,
            context.invocation_metadata() or (),
            peer=context.peer(),
            deadline=None if remaining is None else time.monotonic() + remaining,
            headers=AnswerHeaders(context.send_initial_metadata),
        )

    def _operation(self, operation: Operation, native: bool, context: grpc.aio.ServicerContext) -> Any:
        """The function the chain runs for ``operation`` (``(ctx, request)``)."""
        if native:
            return refusing_parse_errors(_native_call(operation.behaviour, context))
        behaviour = operation.behaviour
        return refusing_parse_errors(lambda ctx, request: behaviour(request, ctx))

    def _handler(self, operation: Operation, native: bool) -> grpc.RpcMethodHandler:
        info, chain = operation.info, self._plane.chain
        parse = checked_parser(operation.request_deserializer)
        limit_error = self._limits.error

        if info.response_streaming:

            async def answer_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                ctx = self._context(info, context)
                try:
                    async for item in chain.stream(ctx, request, self._operation(operation, native, context)):
                        yield item
                except RuntimeServiceError as err:
                    set_status(context, status_for_error(err))
                except AnsweredByFace as exc:
                    raise exc.__cause__ from None  # type: ignore[misc]

            behaviour: Callable[..., Any] = answer_stream
        else:

            async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
                ctx = self._context(info, context)
                try:
                    response = await chain.unary(ctx, request, self._operation(operation, native, context))
                except RuntimeServiceError as err:
                    set_status(context, status_for_error(err))
                    return None
                except AnsweredByFace as exc:
                    raise exc.__cause__ from None  # type: ignore[misc]
                context.set_trailing_metadata(tuple(ctx.trailers))
                if ctx.headers.entries:  # the key's rate limits: sent now, with the answer ready
                    await ctx.headers.send()
                return response

            behaviour = answer

        if info.request_streaming:
            deserializer = _raise_refusals(parse)
        else:

            def deserializer(raw: bytes) -> Any:
                error = limit_error(info.path, len(raw))
                return error if error is not None else parse(raw)

        kind = ("stream_" if info.request_streaming else "unary_") + (
            "stream" if info.response_streaming else "unary"
        )
        make = getattr(grpc, f"{kind}_rpc_method_handler")
        return make(
            behaviour, request_deserializer=deserializer, response_serializer=operation.response_serializer
        )

    def _refusal(self, info: MethodInfo) -> grpc.RpcMethodHandler:
        """A handler that runs the chain without reading the request (its key check refuses it)."""
        chain = self._plane.chain

        async def refuse(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
            if info.request_streaming:
                await _read_upload_then_refuse(request_iterator)
            ctx = self._context(info, context)
            try:
                await chain.unary(ctx, None, refused_operation)
            except RuntimeServiceError as err:
                status = status_for_error(err)
                # Aborted, not returned: a stream's client must get the status as its first read,
                # not an empty message before it.
                await context.abort(status.code, status.details, status.trailing_metadata)

        # Request-streaming, without a deserializer: grpc.aio calls it before reading a message (for
        # any method kind: the wire does not say whether a call streams, and a refused call's answer
        # is its status), and nothing it reads is parsed.
        return grpc.stream_unary_rpc_method_handler(refuse)


def _native_call(behaviour: Callable[[Any, Any], Any], context: grpc.aio.ServicerContext) -> Any:
    """A gRPC-native handler as the chain's operation; its ``abort`` leaves as :class:`AnsweredByFace`."""

    def code() -> str:
        status = context.code()
        return status.name if isinstance(status, grpc.StatusCode) else "UNKNOWN"

    def run(ctx: CallContext, request: Any) -> Any:
        result = behaviour(request, context)
        if hasattr(result, "__aiter__"):
            return _aborting_stream(result, code)
        if ctx.method.response_streaming:  # writes its messages itself (context.write): no items
            return _aborting_stream(_awaited(result), code)
        return _aborting(result, code)

    return run


async def _awaited(awaitable: Any) -> AsyncIterator[Any]:
    """An empty stream that awaits ``awaitable`` (a handler that writes through its context)."""
    await awaitable
    return
    yield


async def _aborting(awaitable: Any, code: Callable[[], str]) -> Any:
    try:
        return await awaitable
    except grpc.aio.AbortError as exc:
        raise AnsweredByFace(code()) from exc


async def _aborting_stream(stream: AsyncIterator[Any], code: Callable[[], str]) -> AsyncIterator[Any]:
    try:
        async for item in stream:
            yield item
    except grpc.aio.AbortError as exc:
        raise AnsweredByFace(code()) from exc


def _raise_refusals(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``parse`` raising the refusals it returns (a stream's reader sees the error in its loop)."""

    def parse_or_raise(raw: bytes) -> Any:
        message = parse(raw)
        if isinstance(message, RuntimeServiceError):
            raise message
        return message

    return parse_or_raise


async def _read_upload_then_refuse(request_iterator: Any) -> None:
    """Receive the client's stream, its messages never parsed, before its call is refused.

    grpc-python's client answers its own INTERNAL ("Internal error from Core") instead of the
    server's status when a call ends while it is still sending a stream, so the upload is read as
    raw bytes first, within :data:`REFUSED_UPLOAD_MAX_BYTES` and :data:`REFUSED_UPLOAD_MAX_S`;
    past either the call is refused all the same. Unary requests need no such wait.
    """
    received = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REFUSED_UPLOAD_MAX_S):
            async for raw in request_iterator:
                received += len(raw)
                if received > REFUSED_UPLOAD_MAX_BYTES:
                    break
