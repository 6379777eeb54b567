"""Unary calls from the gateway in the same process, without the loopback gRPC hop.

The combined process (``universal-runtime``) runs the gateway beside the gRPC server. Over a
channel to itself, each gateway call pays the gRPC client, HTTP/2 over loopback and the gRPC server
core on the one event-loop thread, beside the models on the same cores: at 64 single-sentence
``/v1/embeddings`` clients that hop was about half of the gateway's own CPU per call
(``bench/README.md``). :class:`InProcessCalls` makes a unary call the way the server would, on
the same event loop: the request is serialized and checked against the server's receive limit,
the server's own interceptors (request id, log line and metrics, concurrency limit, API keys,
error mapping, text size limits) and servicer method run with a :class:`InProcessContext`, and
the response comes back serialized and parsed, as a remote client would get it. Failures arrive
as ``grpc.aio.AioRpcError`` with the same code, details and trailers (rich error details).

Streaming methods (``GenerateStream``, ``Ocr``) keep the real channel, and so does every call once
:meth:`InProcessCalls.close` ran (server shutdown): they are then refused like any new call.
With tracing on, the gateway keeps the real channel too, so that the server's spans exist.

Bounds: a call's request is at most the server's ``max_receive_message_bytes`` (checked before
any work, as gRPC does), its response at most the smaller of ``max_send_message_bytes`` and what
the gateway's channel would receive; a call's deadline (``timeout``) cancels the servicer's work
like a gRPC deadline does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, NamedTuple

import grpc

from service.status import is_error_set

log = logging.getLogger(__name__)

# The method-path prefix of the services a gateway calls in-process (reflection stays remote).
LOCAL_SERVICES = ("/universal_runtime.v1.", "/grpc.health.v1.")

Metadata = tuple[tuple[str, str | bytes], ...]


class UnaryMethod(NamedTuple):
    """A unary method as a stub names it: its path and its request and response codecs."""

    path: str
    serialize: Callable[[Any], bytes]
    deserialize: Callable[[bytes], Any]


class _HandlerCallDetails(NamedTuple):
    """``grpc.HandlerCallDetails`` as interceptors receive it: the method path and the metadata."""

    method: str
    invocation_metadata: Metadata


class InProcessContext:
    """The ``grpc.aio.ServicerContext`` of an in-process call: metadata, status, trailers, deadline.

    Implements what the server's interceptors and servicers use: ``invocation_metadata``,
    ``abort`` (raises ``grpc.aio.AbortError`` as grpc does), ``set_code``/``code``,
    ``set_details``/``details``, ``set_trailing_metadata``/``trailing_metadata``,
    ``send_initial_metadata``, ``add_done_callback``, ``time_remaining``, ``cancelled``, ``done``
    and ``peer`` (``"in-process"``).
    """

    def __init__(self, metadata: Metadata, deadline: float | None) -> None:
        self._metadata = metadata
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: Metadata = ()
        self.initial: Metadata = ()
        self._callbacks: list[Callable[[Any], None]] = []
        self._cancelled = False
        self._done = False

    def invocation_metadata(self) -> Metadata:
        """The call's metadata, ``(key, value)`` pairs."""
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()) -> None:
        """End the call with ``code``; raises ``grpc.aio.AbortError`` (as ``grpc.aio`` does)."""
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    def set_code(self, code: grpc.StatusCode) -> None:
        """Set the status code the call ends with."""
        self._code = code

    def code(self) -> grpc.StatusCode | None:
        """The status code set so far (None: not set)."""
        return self._code

    def set_details(self, details: str) -> None:
        """Set the status message the call ends with."""
        self._details = details

    def details(self) -> str:
        """The status message set so far."""
        return self._details

    def set_trailing_metadata(self, trailing_metadata: Metadata) -> None:
        """Set the trailers sent with the status."""
        self._trailing = tuple(trailing_metadata)

    def trailing_metadata(self) -> Metadata:
        """The trailers set so far."""
        return self._trailing

    async def send_initial_metadata(self, initial_metadata: Metadata) -> None:
        """Keep the headers (the key's ``x-ratelimit-*``) for :meth:`InProcessUnaryCall.initial_metadata`."""
        self.initial = tuple(initial_metadata)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(self)`` when the call ends, however it ends."""
        self._callbacks.append(callback)

    def time_remaining(self) -> float | None:
        """Seconds left before the deadline, None without one."""
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def cancelled(self) -> bool:
        """Whether the call was cancelled (the client left, or the deadline passed)."""
        return self._cancelled

    def done(self) -> bool:
        """Whether the call has ended."""
        return self._done

    def peer(self) -> str:
        """The caller: the gateway in this process."""
        return "in-process"

    def finish(self, *, cancelled: bool) -> None:
        """Mark the call ended and run the done callbacks (each at most once)."""
        self._cancelled, self._done = cancelled, True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


class InProcessCalls:
    """The server's unary methods, callable from the same event loop (see the module docstring).

    Args:
        interceptors: the server's interceptors, in the server's order.
        max_receive_bytes: the server's ``grpc.max_receive_message_length``.
        max_send_bytes: the server's ``grpc.max_send_message_length``.

    Register services with :meth:`add_generic_rpc_handlers` and
    :meth:`add_registered_method_handlers` (it stands in for the server in the generated
    ``add_*Servicer_to_server`` functions, passing the handlers on to the real server).

    """

    def __init__(
        self,
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        *,
        max_receive_bytes: int,
        max_send_bytes: int,
    ) -> None:
        self._interceptors = tuple(interceptors)
        self._max_receive = max_receive_bytes
        self._max_send = max_send_bytes
        self._generic: list[grpc.GenericRpcHandler] = []
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._server: Any = None
        self._calls: set[asyncio.Task[Any]] = set()
        self.closed = False

    # -- registration: the generated add_*Servicer_to_server functions call these ------------

    def forwarding_to(self, server: Any) -> InProcessCalls:
        """Pass every registration on to ``server`` too; returns self."""
        self._server = server
        return self

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        """Record the handlers (and register them with the server)."""
        handlers = tuple(handlers)
        self._generic.extend(handlers)
        if self._server is not None:
            self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Record the handlers by method path (and register them with the server)."""
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler
        if self._server is not None:
            self._server.add_registered_method_handlers(service, handlers)

    def handles(self, method: str) -> bool:
        """Whether unary calls to ``method`` (``/package.Service/Method``) can run in-process."""
        return not self.closed and method.startswith(LOCAL_SERVICES)

    # -- calls --------------------------------------------------------------------------------

    def channel(self, remote: grpc.aio.Channel) -> InProcessChannel:
        """A channel whose unary calls run here, and everything else on ``remote``."""
        return InProcessChannel(remote, self)

    async def close(self, grace: float) -> None:
        """Send new calls to the real channel, refused there once the server stops.

        Calls in flight get ``grace`` seconds, then they are cancelled.
        """
        self.closed = True
        if self._calls:
            _, pending = await asyncio.wait(set(self._calls), timeout=grace)
            for task in pending:
                task.cancel()

    def start(
        self, method: UnaryMethod, request: Any, *, timeout: float | None, metadata: Metadata
    ) -> InProcessUnaryCall:
        """Start a unary call of ``method``; returns it (await it for the response message)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        context = InProcessContext(metadata, deadline)
        task = asyncio.get_running_loop().create_task(self._run(method, request, timeout, context))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return InProcessUnaryCall(task, context)

    async def _run(
        self, method: UnaryMethod, request: Any, timeout_s: float | None, context: InProcessContext
    ) -> Any:
        data = method.serialize(request)
        if len(data) > self._max_receive:
            raise _rpc_error(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({len(data)} vs. {self._max_receive})",
            )
        timeout = asyncio.timeout(timeout_s)
        ended = False  # the servicer's work ran to an answer or a status (else: cancelled)
        try:
            async with timeout:
                handler, response = await self._respond(method.path, data, context)
            ended = True
        except TimeoutError as exc:
            if not timeout.expired():
                ended = True
                raise _unexpected(exc) from exc
            raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except grpc.aio.AbortError:
            ended = True
            code = context.code() or grpc.StatusCode.UNKNOWN
            raise _rpc_error(code, context.details(), context.trailing_metadata()) from None
        except grpc.aio.AioRpcError:
            ended = True
            raise
        except Exception as exc:
            ended = True
            raise _unexpected(exc) from exc
        finally:
            context.finish(cancelled=not ended)
        if is_error_set(context):  # a status set and no message (service.status.set_status)
            raise _rpc_error(context.code(), context.details(), context.trailing_metadata())
        out = handler.response_serializer(response) if handler.response_serializer else response
        if len(out) > self._max_send:
            raise _rpc_error(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({len(out)} vs. {self._max_send})",
            )
        return method.deserialize(out)

    async def _respond(self, method: str, data: bytes, context: InProcessContext) -> tuple[Any, Any]:
        """(handler, response message) of one call, through the interceptors and the servicer."""
        handler = await self._handler(_HandlerCallDetails(method, context.invocation_metadata()))
        if handler is None or handler.response_streaming:
            raise _rpc_error(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        parse = handler.request_deserializer
        if handler.request_streaming:
            # A handler that may refuse before reading (the API-key check): the message is
            # parsed only if it reads it, as grpc.aio would receive it.
            return handler, await handler.stream_unary(_one_message(parse, data), context)
        return handler, await handler.unary_unary(parse(data) if parse else data, context)

    async def _handler(self, details: _HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        """The method's handler as the server's interceptors make it (grpc.aio's own order)."""

        async def lookup(details: _HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            handler = self._methods.get(details.method)
            for generic in self._generic:
                if handler is not None:
                    break
                handler = generic.service(details)
            return handler

        continuation: Callable[[Any], Any] = lookup
        for interceptor in reversed(self._interceptors):
            continuation = _bind(interceptor, continuation)
        return await continuation(details)


async def _one_message(parse: Callable[[bytes], Any] | None, data: bytes) -> AsyncIterator[Any]:
    """The request stream of a call with one message, parsed when it is read."""
    yield parse(data) if parse else data


Continuation = Callable[[Any], Any]


def _bind(interceptor: grpc.aio.ServerInterceptor, continuation: Continuation) -> Continuation:
    async def step(details: Any) -> Any:
        return await interceptor.intercept_service(continuation, details)

    return step


def _rpc_error(code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


def _unexpected(exc: Exception) -> grpc.aio.AioRpcError:
    """UNKNOWN, as grpc's server answers an exception nothing mapped to a status, but never its text.

    The trace goes to the log; the client gets a generic message.
    """
    log.error("unexpected error in an in-process call", exc_info=exc)
    return _rpc_error(grpc.StatusCode.UNKNOWN, "unexpected server error; see the server log")


class InProcessUnaryCall:
    """A unary call running in-process: await it for the response; ``cancel()`` like a gRPC call.

    Awaiting a cancelled call raises ``asyncio.CancelledError``, as ``grpc.aio`` does.
    """

    def __init__(self, task: asyncio.Task[Any], context: InProcessContext) -> None:
        self._task = task
        self._context = context

    def __await__(self):
        return self._task.__await__()

    async def initial_metadata(self) -> grpc.aio.Metadata:
        """The headers the server sent (the key's ``x-ratelimit-*``), once the call has ended.

        An in-process answer's headers are known only at its end (a unary server sends them
        with its answer); a failed or cancelled call may have none.
        """
        if not self._task.done():
            await asyncio.wait((self._task,))
        return grpc.aio.Metadata(*self._context.initial)

    def cancel(self) -> bool:
        """Cancel the call (the servicer's work is cancelled); False when it already ended."""
        return self._task.cancel()

    def cancelled(self) -> bool:
        """Whether the call was cancelled."""
        return self._task.cancelled()

    def done(self) -> bool:
        """Whether the call has ended."""
        return self._task.done()


class _UnaryUnary:
    """The multi-callable a stub holds for one unary method (``grpc.aio``'s calling convention)."""

    def __init__(self, calls: InProcessCalls, remote: Any, method: UnaryMethod) -> None:
        self._calls, self._remote, self._method = calls, remote, method

    def __call__(
        self, request: Any, *, timeout: float | None = None, metadata: Metadata | None = None, **kwargs: Any
    ) -> Any:
        if self._calls.closed or kwargs.get("credentials") is not None:
            return self._remote(request, timeout=timeout, metadata=metadata, **kwargs)
        return self._calls.start(self._method, request, timeout=timeout, metadata=tuple(metadata or ()))


class InProcessChannel:
    """A ``grpc.aio.Channel`` for the gateway: unary methods in-process, the rest on ``remote``.

    Stubs built on it (``InferenceServiceStub(channel)``) call :meth:`unary_unary` once per
    method; every other attribute (streams, ``close``, ``get_state``) is the remote channel's.
    """

    def __init__(self, remote: grpc.aio.Channel, calls: InProcessCalls) -> None:
        self._remote = remote
        self._calls = calls

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The stub's callable for ``method``: in-process while the server runs, else remote."""
        remote = self._remote.unary_unary(method, request_serializer, response_deserializer, **kwargs)
        if not self._calls.handles(method) or request_serializer is None or response_deserializer is None:
            return remote
        codecs = UnaryMethod(method, request_serializer, response_deserializer)
        return _UnaryUnary(self._calls, remote, codecs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._remote, name)
