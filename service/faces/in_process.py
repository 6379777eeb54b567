"""The gateway's calls in the server's process: a channel whose calls run on the core directly.

The combined process (``universal-runtime``) runs the gateway beside the gRPC server. Over a
channel to itself each gateway call would pay the gRPC client, HTTP/2 over loopback and the gRPC
server core, on the one event-loop thread beside the models. :class:`InProcessChannel` is what
the gateway's stubs are built on instead: every method of the data plane, unary or streaming,
runs as a call of the core with a :class:`~service.core.context.CallContext` made from the
call's metadata, through the same admission chain as a gRPC call; the answer messages come back
as they are (no serialization), and a failure as the ``grpc.aio.AioRpcError`` a remote call would
raise (same code, details and ``google.rpc.Status`` trailers). Other methods (health,
reflection), and every call once :meth:`InProcessFace.close` ran (server shutdown), go over the
real channel. The path is the same whatever the tracing setting: the chain's ``tracing`` step
makes the core's span, nested under the gateway's.

The batch runner's lines run through the same channel, with the submitting key's caller given
as :attr:`~service.core.context.CallContext.trusted_caller` (:meth:`InProcessFace.channel`).

Bounds: a request message is at most the server's ``max_receive_message_bytes`` (and its
method's own limit, :class:`~service.faces.request_limits.RequestLimits`), checked on its
serialized size before any work; an answer message at most ``max_send_bytes``; a call's
``timeout`` cancels its work as a gRPC deadline does; a streamed answer is handed over one
message at a time (the core waits while the gateway has not read the last one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from engines.errors import ResourceExhaustedError, RuntimeServiceError
from engines.fair_share import Caller
from engines.reasons import Reason
from service.core.context import AnswerHeaders, CallContext, Header, MethodInfo
from service.core.data_plane import DataPlane
from service.faces.metadata import call_context, checked_parser
from service.faces.request_limits import RequestLimits
from service.status import status_for_error

log = logging.getLogger(__name__)

IN_PROCESS_PEER = "in-process"
"""The peer of an in-process call (a server without keys gives each peer its own lane)."""

Metadata = tuple[tuple[str, str | bytes], ...]

SHUTTING_DOWN = "the server is shutting down"
"""The details of a call cut by :meth:`InProcessFace.close` (UNAVAILABLE, as a stopping server answers)."""


def _rpc_error(code: grpc.StatusCode, details: str, trailing: Any = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


def _within(message: Any, limit: int, verb: str) -> int:
    """The size of ``message`` (bytes, or a message's serialized size) when at most ``limit``.

    Raises:
        grpc.aio.AioRpcError: RESOURCE_EXHAUSTED in gRPC's own words (``Sent message larger than
            max (N vs. M)``), as a remote call over the limit ends.

    """
    size = len(message) if isinstance(message, bytes) else message.ByteSize()
    if size > limit:
        raise _rpc_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED, f"{verb} message larger than max ({size} vs. {limit})"
        )
    return size


async def _cancel(stream: Any) -> None:
    """Cancel the core's ``stream`` where it waits, as a gRPC server cancels a stream's handler."""
    with contextlib.suppress(BaseException):
        await stream.athrow(asyncio.CancelledError())


def _error_of(error: BaseException) -> grpc.aio.AioRpcError:
    """The ``AioRpcError`` a remote client would get for ``error`` raised by the core."""
    if isinstance(error, grpc.aio.AioRpcError):
        return error
    if isinstance(error, RuntimeServiceError):
        status = status_for_error(error)
        return _rpc_error(status.code, status.details, status.trailing_metadata)
    # Unreachable behind the chain's error mapping; a remote client would get UNKNOWN.
    log.error("unexpected error in an in-process call", exc_info=error)
    return _rpc_error(grpc.StatusCode.UNKNOWN, "unexpected server error; see the server log")


class InProcessFace:
    """Runs calls of a :class:`DataPlane` for a gateway in this process (see the module).

    Args:
        plane: The data plane.
        limits: The request and answer byte limits (the server's).

    """

    def __init__(self, plane: DataPlane, limits: RequestLimits) -> None:
        self.plane = plane
        self.limits = limits
        self._calls: set[asyncio.Task[Any]] = set()
        self.closed = False

    def channel(self, remote: grpc.aio.Channel, *, trusted_caller: Caller | None = None) -> InProcessChannel:
        """A channel whose data-plane calls run here, everything else on ``remote``.

        Args:
            remote: The real channel to the server.
            trusted_caller: The caller every call of this channel runs as, its credentials not
                checked (the batch runner's lines, under the key that submitted the batch);
                ``None`` for a gateway, whose calls carry their client's key.

        """
        return InProcessChannel(remote, self, trusted_caller)

    def handles(self, path: str) -> MethodInfo | None:
        """The method at ``path`` while calls run here, else ``None`` (then the remote channel serves it)."""
        return None if self.closed else self.plane.method(path)

    async def close(self, grace: float) -> None:
        """Send new calls to the real channel (refused there once the server stops).

        Calls in flight get ``grace`` seconds, then they are cancelled.
        """
        self.closed = True
        if self._calls:
            _, pending = await asyncio.wait(set(self._calls), timeout=grace)
            for task in pending:
                task.cancel()

    def start(self, coroutine: Any) -> asyncio.Task[Any]:
        """Run one call's work as a task, tracked until it ends."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return task


class InProcessCall:
    """One in-process call, with ``grpc.aio``'s call API for what the gateway uses.

    Await it for a unary answer; ``read()`` (``grpc.aio.EOF`` at the end) or ``async for`` a
    streamed one; ``initial_metadata()``, ``trailing_metadata()``, ``code()``, ``details()``,
    ``cancel()``, ``cancelled()``, ``done()``. A failure is raised as ``grpc.aio.AioRpcError``;
    awaiting a cancelled call raises ``asyncio.CancelledError``, as ``grpc.aio`` does.
    """

    def __init__(
        self,
        face: InProcessFace,
        info: MethodInfo,
        request: Any,
        timeout: float | None,
        ctx: CallContext,
        *,
        raw: bool = False,
    ) -> None:
        self._face = face
        self._info = info
        # A multi-callable without codecs sends and receives the messages' bytes, as over gRPC.
        operation = face.plane.operations[info.path]
        self._parse = checked_parser(operation.request_deserializer) if raw else None
        self._serialize = operation.response_serializer if raw else None
        self._ctx = ctx
        self._headers = asyncio.Event()
        self._initial: tuple[Header, ...] = ()
        self._trailing: Any = ()
        self._code = grpc.StatusCode.OK
        self._details = ""
        ctx.headers = AnswerHeaders(self._send_headers)
        self._messages: asyncio.Queue[Any] | None = None
        self._client_cancelled = False
        if info.response_streaming:
            self._messages = asyncio.Queue(maxsize=1)
            self._task = face.start(self._timed(self._pump(request), timeout))
        else:
            self._task = face.start(self._timed(self._answer(request), timeout))
        self._task.add_done_callback(self._ended)

    async def _send_headers(self, entries: tuple[Header, ...]) -> None:
        self._initial = entries
        self._headers.set()

    async def _timed(self, work: Any, timeout_s: float | None) -> Any:
        scope = asyncio.timeout(timeout_s)
        try:
            async with scope:
                return await work
        except TimeoutError:
            if not scope.expired():
                raise
            raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    def _checked(self, message: Any) -> Any:
        """The size of ``message`` within the receive limit (grpc's own answer past it), else raises."""
        return _within(message, self._face.limits.max_receive_bytes, "Received")

    def _request(self, request: Any) -> Any:
        """The request the core gets: the message, or an async iterator over a request stream."""
        if self._info.request_streaming:
            return self._stream_of(request)
        size = self._checked(request)
        error = self._face.limits.error(self._info.path, size)
        if error is not None:
            return error
        return request if self._parse is None else self._parse(request)

    async def _stream_of(self, messages: Any) -> AsyncIterator[Any]:
        if hasattr(messages, "__aiter__"):
            async for message in messages:
                yield self._limited(message)
        else:
            for message in messages:  # bounded by what the gateway built
                yield self._limited(message)

    def _limited(self, message: Any) -> Any:
        if self._parse is not None:
            message = self._parse(message)
            if isinstance(message, RuntimeServiceError):
                raise message
        size = message.ByteSize()
        if size > self._face.limits.max_receive_bytes:
            raise ResourceExhaustedError(
                f"a request message is {size} bytes, over the limit of {self._face.limits.max_receive_bytes}",
                reason=Reason.MESSAGE_TOO_LARGE,
                bytes=size,
                max_bytes=self._face.limits.max_receive_bytes,
            )
        return message

    def _send_limit(self, message: Any) -> Any:
        if self._serialize is not None:
            message = self._serialize(message)
        _within(message, self._face.limits.max_send_bytes, "Sent")
        return message

    async def _answer(self, request: Any) -> Any:
        request = self._request(request)
        try:
            response = await self._face.plane.unary(self._ctx, request)
        except (RuntimeServiceError, grpc.aio.AioRpcError) as err:
            raise self._failed(err) from None
        self._trailing = tuple(self._ctx.trailers)
        await self._send_headers(tuple(self._ctx.headers.entries))
        return self._send_limit(response)

    async def _pump(self, request: Any) -> None:
        assert self._messages is not None
        request = self._request(request)
        stream = self._face.plane.stream(self._ctx, request)
        try:
            async for message in stream:
                await self._messages.put(self._send_limit(message))
        except (RuntimeServiceError, grpc.aio.AioRpcError) as err:
            await _cancel(stream)  # an answer over the send limit: the core's work stops
            raise self._failed(err) from None
        except asyncio.CancelledError:
            await _cancel(stream)  # the core sees the cancel (its log says CANCELLED, slots free)
            raise
        finally:
            await stream.aclose()

    def _failed(self, err: BaseException) -> grpc.aio.AioRpcError:
        error = _error_of(err)
        self._code, self._details = error.code(), error.details() or ""
        self._trailing = tuple(error.trailing_metadata() or ())
        return error

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._headers.set()
        if task.cancelled():
            if self._client_cancelled:
                self._code, self._details = grpc.StatusCode.CANCELLED, "Locally cancelled by application!"
            else:
                self._code, self._details = grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN
        elif isinstance(task.exception(), grpc.aio.AioRpcError):
            error = task.exception()
            assert isinstance(error, grpc.aio.AioRpcError)
            self._code, self._details = error.code(), error.details() or ""
        if self._messages is not None and self._messages.empty():
            self._messages.put_nowait(grpc.aio.EOF)

    # -- grpc.aio's call API -------------------------------------------------------------------

    def __await__(self):
        return self._outcome().__await__()

    async def _outcome(self) -> Any:
        """The task's result; a cancel the caller did not ask for (server shutdown) as UNAVAILABLE."""
        try:
            return await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            waiter_cancelled = current is not None and current.cancelling() > 0
            if self._client_cancelled or waiter_cancelled or not self._task.cancelled():
                raise  # the caller's own cancel (of the call, or of the task awaiting it)
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN) from None

    async def read(self) -> Any:
        """The next message of a streamed answer, or ``grpc.aio.EOF`` after the last.

        Raises:
            grpc.aio.AioRpcError: The call failed.
            asyncio.CancelledError: The call was cancelled.

        """
        assert self._messages is not None, "read() is for calls with a streamed answer"
        get = asyncio.ensure_future(self._messages.get())
        try:
            await asyncio.wait((get, self._task), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():
            message = get.result()
            if message is not grpc.aio.EOF:
                return message
        if not self._messages.empty():
            message = self._messages.get_nowait()
            if message is not grpc.aio.EOF:
                return message
        await self._outcome()  # raises the call's failure or cancellation
        return grpc.aio.EOF

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while (message := await self.read()) is not grpc.aio.EOF:
            yield message

    async def initial_metadata(self) -> grpc.aio.Metadata:
        """The answer's headers (a stream's as it starts, a unary answer's with it)."""
        await self._headers.wait()
        return grpc.aio.Metadata(*self._initial)

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        """The answer's trailers, once the call ended."""
        await asyncio.wait((self._task,))
        return grpc.aio.Metadata(*self._trailing)

    async def code(self) -> grpc.StatusCode:
        """The call's status code, once it ended."""
        await asyncio.wait((self._task,))
        return self._code

    async def details(self) -> str:
        """The call's status message, once it ended."""
        await asyncio.wait((self._task,))
        return self._details

    def cancel(self) -> bool:
        """Cancel the call (its work in the core is cancelled); False when it already ended."""
        if self._task.done():
            return False
        self._client_cancelled = True
        return self._task.cancel()

    def cancelled(self) -> bool:
        """Whether the call was cancelled."""
        return self._task.cancelled()

    def done(self) -> bool:
        """Whether the call has ended."""
        return self._task.done()


class _Method:
    """The multi-callable a stub holds for one method (``grpc.aio``'s calling convention)."""

    def __init__(self, channel: InProcessChannel, path: str, remote: Any, *, raw: bool = False) -> None:
        self._channel, self._path, self._remote, self._raw = channel, path, remote, raw

    def __call__(
        self,
        request: Any = None,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        **kwargs: Any,
    ) -> Any:
        face = self._channel.face
        info = face.handles(self._path)
        if info is None or kwargs.get("credentials") is not None:
            return self._remote(request, timeout=timeout, metadata=metadata, **kwargs)
        ctx = call_context(
            info,
            metadata or (),
            peer=IN_PROCESS_PEER,
            deadline=None if timeout is None else time.monotonic() + timeout,
            trusted_caller=self._channel.trusted_caller,
        )
        return InProcessCall(face, info, request, timeout, ctx, raw=self._raw)


class InProcessChannel:
    """A ``grpc.aio.Channel`` whose data-plane methods run in this process (see the module).

    Stubs built on it (``InferenceServiceStub(channel)``) ask it once per method for a
    multi-callable; every other attribute (``close``, ``get_state``) is the remote channel's.
    """

    def __init__(self, remote: grpc.aio.Channel, face: InProcessFace, trusted_caller: Caller | None) -> None:
        self._remote = remote
        self.face = face
        self.trusted_caller = trusted_caller

    def _method(self, kind: str, path: str, *args: Any, **kwargs: Any) -> Any:
        remote = getattr(self._remote, kind)(path, *args, **kwargs)
        if self.face.plane.method(path) is None:
            return remote
        serializer = args[0] if args else kwargs.get("request_serializer")
        deserializer = args[1] if len(args) > 1 else kwargs.get("response_deserializer")
        return _Method(self, path, remote, raw=serializer is None or deserializer is None)

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The stub's callable for a unary method: in-process while the server runs, else remote."""
        return self._method("unary_unary", method, *args, **kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The stub's callable for a method with a streamed answer."""
        return self._method("unary_stream", method, *args, **kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The stub's callable for a method with a request stream."""
        return self._method("stream_unary", method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The stub's callable for a method streaming both ways."""
        return self._method("stream_stream", method, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._remote, name)
