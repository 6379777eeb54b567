"""Client-disconnect aware gRPC calls and the SSE relay of generation streams.

A client that goes away must stop the work it asked for: every gRPC call made on behalf of an
HTTP request is cancelled when the HTTP client disconnects, so the server stops generating.

Every call made here also hands its ``x-ratelimit-*`` headers (the server's initial metadata for
a key with a request rate or ``tokens_per_minute``) to the HTTP answer: see
:func:`keep_rate_limit_headers`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

import anyio
import grpc
from fastapi import Request
from google.protobuf.message import Message
from sse_starlette import EventSourceResponse
from universal_runtime.v1 import generation_pb2

from gateway.dependencies import CallMetadata
from gateway.errors import (
    HTTP_CLIENT_CLOSED_REQUEST,
    GatewayError,
    error_body,
    route_path,
    rpc_error_to_http,
)
from gateway.middleware import RATE_LIMIT_HEADERS_STATE
from service.shared.rate_limits import received_rate_limit_headers

logger = logging.getLogger(__name__)

T = TypeVar("T")

DONE_EVENT = "[DONE]"
"""Data of the last SSE event of a successful stream (OpenAI's terminator)."""

# Keep-alive comments stop idle-timeout proxies from cutting a long prompt-processing pause;
# OpenAI-compatible SSE parsers skip comment lines.
_SSE_PING_SECONDS = 15


class _Cancellable(Protocol):
    def cancel(self) -> bool: ...


async def _wait_for_disconnect(request: Request) -> None:
    """Return once the ASGI server reports ``http.disconnect`` (the body is already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """Retrieve a finished task's exception so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


async def call_until_disconnect(request: Request, call: _Cancellable, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` (a gRPC call or a read of one), cancelling ``call`` if the client leaves.

    One watcher task per call waits for the client's disconnect and cancels ``call`` from its
    done callback; the call itself is awaited in place (no task, no ``asyncio.wait``), which keeps
    a trivial call's cost to one task.

    Args:
        request: The HTTP request whose disconnect cancels the call; its body must be fully read.
        call: The gRPC call to cancel.
        awaitable: What to wait for, usually ``call`` itself or ``call.read()``; it must end with
            ``asyncio.CancelledError`` once ``call`` is cancelled (gRPC calls and their reads do).

    Returns:
        The awaitable's result.

    Raises:
        GatewayError: 499 ``client_closed_request`` when the client disconnected first.
        grpc.aio.AioRpcError: The call failed.

    """
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))

    def on_disconnect(done: asyncio.Future[None]) -> None:
        _consume_outcome(done)
        if not done.cancelled():
            call.cancel()

    watcher.add_done_callback(on_disconnect)
    try:
        return await awaitable
    except asyncio.CancelledError:
        call.cancel()
        if not watcher.done() or watcher.cancelled():
            raise  # this task was cancelled, not the call by a disconnect
        logger.info("client disconnected; gRPC call cancelled")
        raise GatewayError(
            HTTP_CLIENT_CLOSED_REQUEST, "Client closed the request", code="client_closed_request"
        ) from None
    finally:
        watcher.cancel()


async def keep_rate_limit_headers(request: Request, call: Any) -> None:
    """Keep the ``x-ratelimit-*`` entries of ``call``'s initial metadata for the HTTP answer.

    The server sends them for an admitted call of a key with a request rate or
    ``tokens_per_minute`` (the server's quota admission step): a unary answer's with
    its message, a stream's before its first one. They are stored in the request's state
    (:data:`gateway.middleware.RATE_LIMIT_HEADERS_STATE`, the latest call's replacing an earlier
    one's) and :class:`gateway.middleware.RequestIdMiddleware` writes them into the response's
    headers, whatever route made the answer. Only the six names of
    :data:`service.shared.rate_limits.RATE_LIMIT_HEADERS` are read, with values of counts and
    durations; a call without them (a key without those quotas) leaves the state as it is.

    Args:
        request: The HTTP request the call was made for.
        call: A gRPC call that has its headers (a finished call, or a stream with a message read).

    """
    initial_metadata = getattr(call, "initial_metadata", None)
    if initial_metadata is None:  # a call object without headers
        return
    headers = received_rate_limit_headers(await initial_metadata())
    if headers:
        setattr(request.state, RATE_LIMIT_HEADERS_STATE, headers)


class StreamTranslator(Protocol):
    """Turns ``GenerateStreamResponse`` messages into OpenAI chunk objects (JSON-ready dicts)."""

    def on_message(self, message: generation_pb2.GenerateStreamResponse) -> Iterable[dict[str, Any]]:
        """Return the chunks for one gRPC stream message."""
        ...

    def on_end(self) -> Iterable[dict[str, Any]] | Awaitable[Iterable[dict[str, Any]]]:
        """Return the chunks due after the gRPC stream ended successfully (e.g. the usage chunk).

        May be a coroutine, for a translator that must do I/O (save the answer) before it announces
        the end.
        """
        ...


def _data(payload: dict[str, Any] | str) -> dict[str, str]:
    """Wrap a payload as an SSE event for ``EventSourceResponse`` (compact JSON)."""
    if isinstance(payload, str):
        return {"data": payload}
    return {"data": json.dumps(payload, separators=(",", ":"), ensure_ascii=False)}


class SseDialect(Protocol):
    """How one API spells its stream as SSE: each payload's fields, its error events, its terminator.

    Chat and legacy completions use :data:`OPENAI_CHUNKS`; APIs with typed events (OpenAI
    Responses, Anthropic Messages) name each event and report errors in their own shape.
    """

    #: Data of the last event of a successful stream (``"[DONE]"``), or ``None`` for none.
    done: str | None

    def fields(self, payload: dict[str, Any]) -> dict[str, str]:
        """The SSE fields (``data``, and ``event`` where the API names events) of one payload."""
        ...

    def error_payloads(self, status_code: int, body: dict[str, Any]) -> Iterable[dict[str, Any]]:
        """The payloads sent when the stream fails after it started.

        Args:
            status_code: The HTTP status the failure would have had before the stream started.
            body: OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``.

        """
        ...


class _OpenAIChunks:
    """OpenAI chunk streams: ``data:`` lines only, the error body as sent, ``data: [DONE]`` last."""

    done = DONE_EVENT

    def fields(self, payload: dict[str, Any]) -> dict[str, str]:
        return _data(payload)

    def error_payloads(self, status_code: int, body: dict[str, Any]) -> Iterable[dict[str, Any]]:
        return [body]


OPENAI_CHUNKS: SseDialect = _OpenAIChunks()
"""The SSE dialect of Chat Completions and legacy Completions streams."""


class _TypedData:
    """OpenAI's audio streams: ``data:`` lines naming their ``type``, an ``error`` event, no terminator."""

    done = None

    def fields(self, payload: dict[str, Any]) -> dict[str, str]:
        return _data(payload)

    def error_payloads(self, status_code: int, body: dict[str, Any]) -> Iterable[dict[str, Any]]:
        return [{"type": "error", **body}]


TYPED_DATA: SseDialect = _TypedData()
"""The SSE dialect of the audio streams (``transcript.text.delta``, ``speech.audio.delta`` ...)."""


class _Drain:
    """How long a stream may go on once the server shuts down: ``grace_s``, then it is cut.

    sse-starlette sets ``shutdown`` when uvicorn starts to shut down; until then reads wait for
    the stream alone, after it each read waits at most for what is left of the grace period.
    """

    def __init__(self, shutdown: anyio.Event, grace_s: float) -> None:
        self._shutdown = shutdown
        self._grace_s = grace_s
        self._deadline: float | None = None

    async def read(
        self, call: grpc.aio.UnaryStreamCall
    ) -> generation_pb2.GenerateStreamResponse | Any | None:
        """The next message (or ``grpc.aio.EOF``); ``None`` once the grace period is over.

        Raises:
            grpc.aio.AioRpcError: the call failed.

        """
        loop = asyncio.get_running_loop()
        read = asyncio.ensure_future(call.read())
        if self._deadline is None:
            shutdown = asyncio.ensure_future(self._shutdown.wait())
            try:
                await asyncio.wait({read, shutdown}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                shutdown.cancel()
            if read.done():
                return read.result()
            self._deadline = loop.time() + self._grace_s
            logger.info("server shutting down; the stream may go on for %.1f s", self._grace_s)
        try:
            return await asyncio.wait_for(read, max(0.0, self._deadline - loop.time()))
        except TimeoutError:
            return None


async def _relay(
    call: grpc.aio.UnaryStreamCall,
    first: generation_pb2.GenerateStreamResponse | grpc.aio.EOFType,
    translator: StreamTranslator,
    drain: _Drain,
    route: str,
    sse: SseDialect,
) -> AsyncIterator[dict[str, str]]:
    """Yield the SSE events of a generation stream whose first message was already read.

    ``route`` (the HTTP route's path) picks the OpenAI form of an error event, as for a status;
    ``sse`` spells the events.

    On client disconnect sse-starlette cancels this generator; ``finally`` then cancels the gRPC call.
    A stream still running when the shutdown grace period ends gets an error event, never a silent cut.
    """
    try:
        message = first
        while message is not grpc.aio.EOF:
            assert isinstance(message, Message)  # GenerateStream's, or a stream that wraps its chunks
            for chunk in translator.on_message(message):
                yield sse.fields(chunk)
            message = await drain.read(call)
            if message is None:
                logger.warning("generation stream cut: the shutdown grace period is over")
                body = error_body(
                    "the server is shutting down and the stream did not finish within its grace period",
                    error_type="server_error",
                    code="shutting_down",
                )
                for payload in sse.error_payloads(503, body):
                    yield sse.fields(payload)
                return
    except grpc.aio.AioRpcError as err:
        # The HTTP status (200) is already sent: the error can only travel as an event.
        status_code, body = rpc_error_to_http(err, route=route)
        logger.warning("generation stream failed after start: %s (HTTP %d)", err.code().name, status_code)
        for payload in sse.error_payloads(status_code, body):
            yield sse.fields(payload)
        return
    finally:
        # No-op when the stream finished; stops generation when the client went away or failed.
        call.cancel()
    end = translator.on_end()
    for chunk in await end if inspect.isawaitable(end) else end:
        yield sse.fields(chunk)
    if sse.done is not None:
        yield _data(sse.done)


async def stream_generation(
    request: Request,
    start_call: Callable[[], grpc.aio.UnaryStreamCall],
    translator: StreamTranslator,
    sse: SseDialect = OPENAI_CHUNKS,
) -> EventSourceResponse:
    """Start a ``GenerateStream`` call and relay it to the client as OpenAI-style SSE.

    The first gRPC message is awaited before the HTTP response starts, so errors the server
    reports up front (unknown model, invalid argument, overload) get a proper HTTP status and
    error body. Later failures become one ``data: {"error": {...}}`` event, after which the
    stream ends without ``[DONE]``; so does a stream still running ``shutdown_grace_s`` (the
    app's :class:`~gateway.settings.GatewayConfig`) after the server began to shut down. A
    successful stream ends with ``data: [DONE]``.

    Args:
        request: The HTTP request (its disconnect cancels the call).
        start_call: Starts the call, e.g. ``lambda: stub.GenerateStream(req, metadata=...)``.
        translator: Converts gRPC messages to chunks.
        sse: How the chunks and errors are spelled as SSE (default: OpenAI chunk streams, as
            described above; a typed-event API ends its own way, see :class:`SseDialect`).

    Raises:
        grpc.aio.AioRpcError: The call failed before its first message.
        GatewayError: 499 when the client disconnected before the first message.

    """
    call = start_call()
    first = await call_until_disconnect(request, call, call.read())
    await keep_rate_limit_headers(request, call)  # before the HTTP headers go out
    grace_s = request.app.state.config.shutdown_grace_s
    shutdown = anyio.Event()
    return EventSourceResponse(
        _relay(call, first, translator, _Drain(shutdown, grace_s), route_path(request), sse),
        sep="\n",
        ping=_SSE_PING_SECONDS,
        shutdown_event=shutdown,
        # A little past our own cut, so that the error event is sent before the library cancels.
        shutdown_grace_period=grace_s + 1.0,
    )


async def unary_call(
    request: Request,
    method: Callable[..., Any],
    message: Any,
    metadata: CallMetadata,
    *,
    deadline_s: float | None = None,
) -> Any:
    """Make a unary gRPC call that is cancelled if the HTTP client disconnects first.

    Args:
        request: The HTTP request (its disconnect cancels the call).
        method: A unary-unary stub method, e.g. ``clients.inference.Classify``.
        message: The request message.
        metadata: The call metadata.
        deadline_s: gRPC deadline in seconds from now (the server sees it too); ``None`` for none.

    Returns:
        The response message.

    Raises:
        GatewayError: 499 ``client_closed_request`` when the client disconnected first.
        grpc.aio.AioRpcError: The call failed.

    """
    call = method(message, metadata=metadata, timeout=deadline_s)
    response = await call_until_disconnect(request, call, call)
    await keep_rate_limit_headers(request, call)
    return response


async def _responses(call: grpc.aio.StreamStreamCall) -> list[Any]:
    return [message async for message in call]


async def collect_stream(
    request: Request, method: Callable[..., Any], messages: Iterable[Any] | Any, metadata: CallMetadata
) -> list[Any]:
    """Make a response-streaming gRPC call and return all its responses; cancelled if the client leaves.

    Args:
        request: The HTTP request (its disconnect cancels the call).
        method: A stream-stream stub method (``clients.inference.Ocr``), or a unary-stream one
            (``clients.inference.GenerateImage``).
        messages: The request messages of a stream-stream method, sent as the call reads them;
            the one request message of a unary-stream method.
        metadata: The call metadata.

    Returns:
        The response messages in order.

    Raises:
        GatewayError: 499 ``client_closed_request`` when the client disconnected first.
        grpc.aio.AioRpcError: The call failed.

    """
    call = method(messages, metadata=metadata)
    try:
        responses = await call_until_disconnect(request, call, _responses(call))
        await keep_rate_limit_headers(request, call)
        return responses
    finally:
        call.cancel()  # no-op when finished; stops the server's work on any other way out
