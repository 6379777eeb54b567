"""Server interceptors (grpc-interceptor): request context and logging, auth, and error mapping.

Order (outermost first): :class:`RequestContextInterceptor` →
:class:`service.concurrency.ConcurrencyLimitInterceptor` → :class:`AuthInterceptor` (or, without
keys, :class:`PriorityInterceptor`) → :class:`QuotaInterceptor` → :class:`ErrorMappingInterceptor`
→ :class:`RequestParsingInterceptor` → servicer. Streaming handlers are iterated, never awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextvars import ContextVar
from typing import Any

import grpc
from grpc_interceptor import AsyncServerInterceptor

from engines.errors import InvalidArgumentError, ResourceExhaustedError, RuntimeServiceError, clip_text
from engines.fair_share import Priority, Share, share_var
from service import metrics
from service.quotas import QUOTA_EXCEEDED, Admission, QuotaRefusal, Quotas, encoder_inputs, usage_tokens
from service.request_context import (
    REQUEST_ID_METADATA_KEY,
    api_key_name_var,
    api_key_role_var,
    client_request_id,
    model_var,
    request_id_var,
)
from service.shared.api_keys import ApiKeys, KeyPolicy, load_api_keys
from service.status import internal_status, is_error_set, rich_status, set_status, status_for_error

log = logging.getLogger("universal_runtime.rpc")

# RPCs that need no credentials: health checks and discovery.
PUBLIC_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


async def _call(method: Callable, request: Any, context: grpc.aio.ServicerContext) -> Any:
    """Invoke the next handler; returns an awaited result or an async iterator for streams."""
    result = method(request, context)
    if hasattr(result, "__aiter__"):
        return result
    return await result


def _short(method_name: str) -> str:
    """``Embed`` for ``/universal_runtime.v1.InferenceService/Embed`` (the metrics' method label)."""
    return method_name.rpartition("/")[2]


def _text_metadata(metadata: Any) -> dict[str, str]:
    """The text entries of call metadata (``(key, value)`` pairs) by key; binary ones left out."""
    return {key: value for key, value in metadata if isinstance(value, str)}


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return _text_metadata(context.invocation_metadata() or ())


class CallHeaders:
    """One call's initial metadata: entries the interceptors add, sent at most once.

    gRPC sends a call's initial metadata once (a second ``send_initial_metadata`` fails), so the
    interceptors that have something for it add their entries here and one send carries them
    all: :class:`RequestContextInterceptor` makes it for each call (``call_headers_var``) and
    adds a stream's request id; :class:`QuotaInterceptor` adds the key's ``x-ratelimit-*`` state.
    A stream's headers go out as its handler starts (:class:`ErrorMappingInterceptor`), after
    every admission check, or at the latest with its first message; a unary answer's just before
    its message, only when there is something to send.

    Args:
        context: The call's servicer context.

    """

    __slots__ = ("_context", "entries", "sent")

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context
        self.entries: list[tuple[str, str]] = []
        self.sent = False

    def add(self, entries: Iterable[tuple[str, str]]) -> None:
        """Add ``(key, value)`` entries; ignored once the headers are sent (too late for them)."""
        if not self.sent:
            self.entries.extend(entries)

    async def send(self) -> None:
        """Send the entries as the call's initial metadata, unless already sent (then nothing)."""
        if self.sent:
            return
        self.sent = True
        # A call already gone (client left) cannot take them; it is still in the log.
        with contextlib.suppress(Exception):
            await self._context.send_initial_metadata(tuple(self.entries))


call_headers_var: ContextVar[CallHeaders | None] = ContextVar("call_headers", default=None)
"""The running call's :class:`CallHeaders` (``None`` outside :class:`RequestContextInterceptor`)."""


class RequestContextInterceptor(AsyncServerInterceptor):
    """Sets the request id and logs one structured line per RPC.

    The id comes from ``x-request-id`` metadata or is new, and is echoed back: in the headers
    (initial metadata) of a streamed answer, in the trailers of a unary one and of every error.
    The call's :class:`CallHeaders` are made here: a stream's go out as its handler starts, after
    the admission checks (so a refused stream has its id in the trailers only); a unary answer
    gets initial metadata only when an inner interceptor added to them (the key's rate limits),
    sent just before its message, so the call stays uncommitted until it is answered.
    The log line has method, status code, duration, model and ``key_name`` (the name of the API
    key that authenticated the call, ``""`` without one; never the key).
    """

    async def intercept(
        self, method: Callable, request: Any, context: grpc.aio.ServicerContext, method_name: str
    ):
        """Wrap the RPC in a request context and log its outcome."""
        request_id = client_request_id(_metadata(context).get(REQUEST_ID_METADATA_KEY))
        request_id_var.set(request_id)
        model_var.set("")
        api_key_name_var.set("")
        api_key_role_var.set("")
        headers = CallHeaders(context)
        call_headers_var.set(headers)
        started = time.perf_counter()
        metrics.rpc_started(_short(method_name))
        try:
            result = await _call(method, request, context)
        except BaseException as exc:
            self._log(context, method_name, started, exc)
            raise
        if not hasattr(result, "__aiter__"):
            if is_error_set(context):  # refused (set_status): its trailers hold the id already
                self._log(context, method_name, started, None)
                return result
            # In the trailers, not early headers: a unary call stays uncommitted until it is
            # answered, so a client's retry policy may resend it to another replica when this one
            # dies mid-call (gRPC retries only calls that have received no headers).
            context.set_trailing_metadata(((REQUEST_ID_METADATA_KEY, request_id),))
            if headers.entries:  # the key's rate limits: sent now, with the answer ready
                await headers.send()
            self._log(context, method_name, started, None)
            return result
        # First of the stream's headers; nothing inner has run yet (streams are lazy).
        headers.entries.insert(0, (REQUEST_ID_METADATA_KEY, request_id))
        return self._stream(result, context, method_name, started, headers)

    async def _stream(
        self, stream: AsyncIterator, context, method_name: str, started: float, headers: CallHeaders
    ):
        error: BaseException | None = None
        try:
            async for item in stream:
                # Sent as the handler started (ErrorMappingInterceptor); here when none did.
                await headers.send()
                yield item
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._log(context, method_name, started, error)

    @staticmethod
    def _log(
        context: grpc.aio.ServicerContext, method_name: str, started: float, error: BaseException | None
    ):
        if isinstance(error, asyncio.CancelledError):
            code_name = "CANCELLED"
        else:
            code = context.code()
            code_name = (
                code.name if isinstance(code, grpc.StatusCode) else ("OK" if error is None else "UNKNOWN")
            )
        seconds = time.perf_counter() - started
        metrics.rpc_finished(_short(method_name), code_name, seconds, api_key_name_var.get())
        log.info(
            "rpc",
            extra={
                "request_id": request_id_var.get(),
                "method": method_name,
                "code": code_name,
                "duration_ms": round(seconds * 1000, 2),
                "model": model_var.get(),
                "key_name": api_key_name_var.get(),
            },
        )


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Requires ``authorization: Bearer <key>`` with one of the configured keys, read from metadata only.

    A call without a valid key is refused before its message is parsed: grpc.aio starts a handler
    whose request is a stream before reading any message, so the refusal is a handler of that kind
    without a deserializer. For a unary request it reads nothing (a 15 MB request with a wrong key
    costs the server its metadata, not a parse of 15 MB); a client stream is received, unparsed
    and bounded, before the refusal (see :func:`_read_upload_then_refuse`). A call with a
    valid key gets the method's own handler, which sets the key's name in ``api_key_name_var`` for
    the RPC's log line and its stored objects' owner, its role in ``api_key_role_var`` (what
    :func:`service.tasks.callers.require_admin` reads), and the call's
    :class:`engines.fair_share.Share` in ``share_var`` for the queues: the key's name, its
    policy's priority and weight, the priority lowered to ``batch`` when the call asks for it in
    ``x-ur-priority`` metadata (:func:`call_share`; a value other than ``batch`` or
    ``interactive`` is refused INVALID_ARGUMENT).

    The scheme is matched in any case (``bearer``, ``BEARER``: RFC 7235 section 2.1), as the
    gateway does, and the token against every key in constant time (:meth:`ApiKeys.match`). A call
    with more than one ``authorization`` entry is refused UNAUTHENTICATED whichever is right, as
    the gateway refuses two ``Authorization`` headers.

    Args:
        keys: The keys (:func:`service.shared.api_keys.load_api_keys`), or one key, named ``default``.
        public_health: Let health and reflection RPCs through without a key (the default);
            ``False`` guards them too (setting ``auth_public_health``).

    """

    def __init__(self, keys: ApiKeys | str, *, public_health: bool = True) -> None:
        self._keys = load_api_keys(keys) if isinstance(keys, str) else keys
        self._public = PUBLIC_METHOD_PREFIXES if public_health else ()

    async def intercept_service(
        self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        """The method's handler for a call with a valid key (or a public method), else a refusal."""
        if handler_call_details.method.startswith(self._public):
            return await continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata or ()
        credentials = [value for key, value in metadata if key == "authorization"]
        # One credential per call: with two, whichever is right must not be picked (a proxy that
        # adds its own, a client trying several keys in one call).
        one = credentials[0] if len(credentials) == 1 else None
        matched = self._keys.match(one) if isinstance(one, str) else None
        handler = await continuation(handler_call_details)
        if len(credentials) > 1:
            return _refusal(_repeated_credential_status, handler)
        if matched is None:
            return _refusal(_unauthenticated_status, handler)
        if handler is None:
            return None
        name = matched[0]
        share = call_share(name, self._keys.policy(name), metadata)
        if isinstance(share, InvalidArgumentError):
            return _refusal(lambda: status_for_error(share), handler)
        return _naming_key(handler, name, share, self._keys.policy(name).role)


PRIORITY_METADATA_KEY = "x-ur-priority"
"""Call metadata (HTTP header ``X-UR-Priority`` at the gateway) that lowers a call to ``batch``."""

_PRIORITY_BY_NAME = {"interactive": Priority.INTERACTIVE, "batch": Priority.BATCH}


def call_share(key_name: str, policy: KeyPolicy, metadata: Any) -> Share | InvalidArgumentError:
    """The :class:`Share` of a call of key ``key_name``: its policy's class and weight, maybe lowered.

    ``x-ur-priority: batch`` lowers the call to the batch class; ``interactive`` asks for the
    key's own class (a batch key stays batch: a call may lower its class, never raise it). The
    value is matched in any case, spaces around it ignored.

    Args:
        key_name: The key's name ("" on a server without keys).
        policy: The key's policy (:meth:`ApiKeys.policy`).
        metadata: The call's invocation metadata, ``(key, value)`` pairs.

    Returns:
        The share, or the INVALID_ARGUMENT error (reason INVALID_PRIORITY, metadata ``field``
        ``x-ur-priority``) of a value that is neither ``batch`` nor ``interactive``.

    """
    priority = _PRIORITY_BY_NAME[policy.priority]
    asked = _text_metadata(metadata or ()).get(PRIORITY_METADATA_KEY)
    if asked is not None:
        lowered = _PRIORITY_BY_NAME.get(asked.strip().lower())
        if lowered is None:
            return InvalidArgumentError(
                f"metadata {PRIORITY_METADATA_KEY} (HTTP header X-UR-Priority) must be 'batch' or "
                f"'interactive', got {clip_text(asked, 64)!r}",
                reason="INVALID_PRIORITY",
                field=PRIORITY_METADATA_KEY,
            )
        priority = max(priority, lowered)  # BATCH > INTERACTIVE: the lower class of the two
    return Share(key_name, priority, policy.weight)


class PriorityInterceptor(grpc.aio.ServerInterceptor):
    """On a server without API keys: the call's :class:`Share` from ``x-ur-priority`` alone.

    Every call shares one key (""), weight 1, class interactive unless it asks for ``batch``
    (:func:`call_share`); a bad value is refused INVALID_ARGUMENT before the message is read.
    """

    async def intercept_service(
        self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        """The method's handler, setting the call's share, or a refusal of a bad ``x-ur-priority``."""
        handler = await continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata or ()
        if handler is None or not any(key == PRIORITY_METADATA_KEY for key, _ in metadata):
            return handler  # the default share (engines.fair_share.DEFAULT_SHARE) is the answer
        share = call_share("", _DEFAULT_POLICY, metadata)
        if isinstance(share, InvalidArgumentError):
            return _refusal(lambda: status_for_error(share), handler)
        return _naming_key(handler, "", share)


#: Bounds of the upload a refused client stream is read for (never parsed): bytes, then seconds.
REFUSED_UPLOAD_MAX_BYTES = 64 * 1024 * 1024
REFUSED_UPLOAD_MAX_S = 2.0


def _unauthenticated_status() -> grpc.Status:
    return rich_status(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid API key", "UNAUTHENTICATED")


def _repeated_credential_status() -> grpc.Status:
    return rich_status(
        grpc.StatusCode.UNAUTHENTICATED,
        "more than one authorization metadata entry: send one API key",
        "UNAUTHENTICATED",
    )


def _refusal(
    status: Callable[[], grpc.Status], handler: grpc.RpcMethodHandler | None
) -> grpc.RpcMethodHandler:
    """A handler that ends the call with ``status()`` (built in the call) without parsing a message.

    A request-streaming ``handler`` is refused once its upload is received (see
    :func:`_read_upload_then_refuse`); any other without reading a message.
    """
    upload = handler is not None and handler.request_streaming

    async def refuse(request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        if upload:
            await _read_upload_then_refuse(request_iterator)
        set_status(context, status())

    # Request-streaming, without a deserializer: grpc.aio calls it before reading a message (for
    # any method kind: the wire does not say whether a call streams, and a refused call's answer
    # is its status), and nothing it reads is parsed.
    return grpc.stream_unary_rpc_method_handler(refuse)


async def _read_upload_then_refuse(request_iterator: Any) -> None:
    """Receive the client's stream, its messages never parsed, before its call is refused.

    grpc-python's client answers its own INTERNAL ("Internal error from Core") instead of the
    server's status when a call ends while it is still sending a stream (seen in nearly every
    refused two-message 15 MB upload), so the upload is read as raw bytes first, within
    :data:`REFUSED_UPLOAD_MAX_BYTES` and :data:`REFUSED_UPLOAD_MAX_S`; past either the call is
    refused all the same. Unary requests need no such wait (their one message is sent whole).
    """
    received = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(REFUSED_UPLOAD_MAX_S):
            async for raw in request_iterator:
                received += len(raw)
                if received > REFUSED_UPLOAD_MAX_BYTES:
                    break


_BEHAVIOURS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
_DEFAULT_POLICY = KeyPolicy()


def _naming_key(
    handler: grpc.RpcMethodHandler, key_name: str, share: Share, role: str = ""
) -> grpc.RpcMethodHandler:
    """``handler`` whose behaviour first sets ``api_key_name_var``, ``api_key_role_var`` and ``share_var``.

    ``role`` is the key's (:data:`service.shared.api_keys.ROLES`), ``""`` without a key; the share
    is the call's.

    Set when the behaviour is called (inside :class:`RequestContextInterceptor`, which resets the
    name per call), in the call's own task: the queues read the share there when they enqueue.
    """
    kind = next(kind for kind in _BEHAVIOURS if getattr(handler, kind) is not None)
    behaviour = getattr(handler, kind)

    def named(request: Any, context: grpc.aio.ServicerContext) -> Any:
        api_key_name_var.set(key_name)
        api_key_role_var.set(role)
        share_var.set(share)
        return behaviour(request, context)

    return handler._replace(**{kind: named})


class QuotaInterceptor(grpc.aio.ServerInterceptor):
    """Holds each call to its API key's quotas (:mod:`service.quotas`; per server process).

    Before the handler runs, :meth:`service.quotas.Quotas.admit` takes one request from the
    key's bucket, counts the request's encoder inputs and a streaming call's slot; a refused call
    ends RESOURCE_EXHAUSTED, reason ``QUOTA_EXCEEDED``, with RetryInfo (HTTP 429 with
    ``Retry-After`` and ``x-ratelimit-*`` at the gateway), its status set, not sent (see
    :class:`ErrorMappingInterceptor`). When the call ends (answered, failed or cancelled) its
    tokens (the answer's ``usage``: a stream's last message) are charged and its slot freed.

    An admitted call of a key with a request rate or ``tokens_per_minute`` carries OpenAI's
    ``x-ratelimit-*`` headers in its initial metadata (:class:`CallHeaders`;
    :meth:`service.quotas.Quotas.rate_limit_metadata`), which the gateway copies to the HTTP
    answer: a stream's as it starts (this call's request taken, its tokens not yet known), a
    unary answer's once it is answered (its tokens charged).

    Install it after :class:`AuthInterceptor`, whose behaviour sets the key's name that this one
    reads, and outside the error mapping (it sets its own status). Health and reflection RPCs are
    neither counted nor refused.

    Args:
        quotas: The keys' quota state.

    """

    def __init__(self, quotas: Quotas) -> None:
        self._quotas = quotas

    async def intercept_service(
        self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        """The method's handler, its behaviour held to the key's quota."""
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(PUBLIC_METHOD_PREFIXES):
            return handler
        kind = next(kind for kind in _BEHAVIOURS if getattr(handler, kind) is not None)
        behaviour = getattr(handler, kind)
        quotas = self._quotas
        stream = handler.request_streaming or handler.response_streaming

        def admit(request: Any, context: grpc.aio.ServicerContext) -> Admission | None:
            inputs = 0 if handler.request_streaming else encoder_inputs(method, request)
            admission = quotas.admit(api_key_name_var.get(), inputs=inputs, stream=stream)
            if isinstance(admission, QuotaRefusal):
                metrics.rpc_rejected(_short(method), QUOTA_EXCEEDED)
                set_status(context, admission.status())
                return None
            return admission

        def tell_rate_limits() -> None:
            headers = call_headers_var.get()
            if headers is not None:
                headers.add(quotas.rate_limit_metadata(api_key_name_var.get()))

        if handler.response_streaming:

            async def limited_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                admission = admit(request, context)
                if admission is None:
                    return
                tell_rate_limits()  # before the headers go out, as the handler starts
                # Safety net: a response stream never iterated never runs its finally below.
                context.add_done_callback(lambda _context: admission.finish())
                tokens = 0
                try:
                    async for item in behaviour(request, context):
                        tokens = usage_tokens(item) or tokens
                        yield item
                finally:
                    admission.finish(tokens)

            return handler._replace(**{kind: limited_stream})

        async def limited(request: Any, context: grpc.aio.ServicerContext) -> Any:
            admission = admit(request, context)
            if admission is None:
                return None
            response = None
            try:
                response = await behaviour(request, context)
            finally:
                admission.finish(usage_tokens(response))
            tell_rate_limits()  # after the charge: the answer's headers count its own tokens
            return response

        return handler._replace(**{kind: limited})


class ErrorMappingInterceptor(AsyncServerInterceptor):
    """Turns domain errors into their status with ErrorInfo.

    Anything unexpected becomes INTERNAL with a generic message (the trace goes to the log
    only). Aborts and cancellations pass through. The status is set (:func:`set_status`), not
    sent: a unary call returns no message, a stream ends, and the status goes out after the
    outer interceptors have logged and counted the call.

    Innermost but for the request parsing, it also sends a stream's :class:`CallHeaders` as its
    handler starts: after every admission check (API key, concurrency, quota), so those could
    add to them, and before any message.
    """

    async def intercept(
        self, method: Callable, request: Any, context: grpc.aio.ServicerContext, method_name: str
    ):
        """Map exceptions raised by the handler (unary) or while iterating it (streams)."""
        try:
            result = await _call(method, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            self._set_error_status(exc, context, method_name)
            return None
        if hasattr(result, "__aiter__"):
            return self._stream(result, context, method_name)
        return result

    async def _stream(self, stream: AsyncIterator, context: grpc.aio.ServicerContext, method_name: str):
        headers = call_headers_var.get()
        if headers is not None:
            await headers.send()
        try:
            async for item in stream:
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            self._set_error_status(exc, context, method_name)

    @staticmethod
    def _set_error_status(exc: Exception, context: grpc.aio.ServicerContext, method_name: str) -> None:
        if isinstance(exc, RuntimeServiceError):
            status = status_for_error(exc)
            if status.code is grpc.StatusCode.RESOURCE_EXHAUSTED:
                metrics.rpc_rejected(_short(method_name), exc.reason)
            if status.code is grpc.StatusCode.INTERNAL:
                log.error(
                    "rpc failed: %s",
                    exc.message,
                    exc_info=exc.__cause__ or exc,
                    extra={"request_id": request_id_var.get(), "method": method_name},
                )
        else:
            log.exception(
                "unhandled error in %s",
                method_name,
                exc_info=exc,
                extra={"request_id": request_id_var.get(), "method": method_name},
            )
            status = internal_status(request_id_var.get())
        set_status(context, status)


class RequestParsingInterceptor(grpc.aio.ServerInterceptor):
    """Parses each request itself, so that bytes it refuses reach the client as a clear status.

    Two refusals, both before any handler code sees the request:

    - **Bytes that are not the method's message** (a corrupt varint, a length past the end, an
      invalid wire type, bad UTF-8 in a string): INVALID_ARGUMENT, reason MALFORMED_REQUEST, with
      a generic message naming the expected message type (metadata ``message_type``). grpc.aio
      would answer UNKNOWN with the parser's exception text. Every method kind is covered: a
      unary request is checked before the handler runs; a message of a client stream when the
      handler reads it, which ends the stream with the same status.
    - **A unary request over its method's byte limit**: grpc.aio parses each request on the event
      loop, and every other call waits for it (see
      docs/architecture/design-notes.md#protobuf-on-the-event-loop). gRPC's
      own limit (``max_receive_message_bytes``) is one number for every method, sized for the
      largest anomaly batch; the text RPCs get a smaller one here. The check reads only the
      length of the received bytes; an oversized request is RESOURCE_EXHAUSTED, reason
      MESSAGE_TOO_LARGE (HTTP 413 at the gateway), as gRPC's own limit answers.

    Install it innermost (last), inside :class:`ErrorMappingInterceptor`, which maps the errors;
    the outer interceptors pass the request through unread.

    Args:
        limits: the most bytes of one request by full method name
            (``/universal_runtime.v1.InferenceService/Embed``); other methods have only gRPC's limit.

    """

    def __init__(self, limits: dict[str, int]) -> None:
        self._limits = dict(limits)

    async def intercept_service(
        self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        """The method's handler, its deserializer and behaviour guarded."""
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = _checked_parser(handler.request_deserializer)
        if handler.request_streaming:
            # Messages are parsed as the handler reads them: the error surfaces in its loop.
            return handler._replace(request_deserializer=_raise_refusals(parse))
        limit = self._limits.get(handler_call_details.method)
        method = handler_call_details.method.rpartition("/")[2]

        def deserialize(raw: bytes) -> Any:
            if limit is not None and len(raw) > limit:
                # Handed to the behaviour below, which raises it where the error mapping sees it.
                return ResourceExhaustedError(
                    f"the request is {len(raw)} bytes; {method} accepts at most {limit} bytes "
                    "(setting max_text_request_bytes)",
                    reason="MESSAGE_TOO_LARGE",
                    bytes=len(raw),
                    max_bytes=limit,
                )
            return parse(raw)

        streaming = handler.response_streaming
        behaviour = handler.unary_stream if streaming else handler.unary_unary
        refuse = _raising_stream if streaming else _raising

        def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return (
                refuse(request) if isinstance(request, RuntimeServiceError) else behaviour(request, context)
            )

        kind = "unary_stream" if streaming else "unary_unary"
        return handler._replace(request_deserializer=deserialize, **{kind: guarded})


def _checked_parser(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``parse`` returning :class:`InvalidArgumentError` (MALFORMED_REQUEST) for bytes it cannot parse.

    The message type's full name comes from the generated class (``FromString``'s owner).
    """
    descriptor = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
    type_name = getattr(descriptor, "full_name", "") or "the method's request message"

    def parse_or_refuse(raw: bytes) -> Any:
        try:
            return parse(raw)
        except Exception as exc:  # any parse failure is the client's bytes
            log.info(
                "malformed request",
                extra={"message_type": type_name, "bytes": len(raw), "error": type(exc).__name__},
            )
            return InvalidArgumentError(
                f"the request message could not be parsed as {type_name}",
                reason="MALFORMED_REQUEST",
                message_type=type_name,
            )

    return parse_or_refuse


def _raise_refusals(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``parse`` raising the refusals it returns (a stream's reader sees the error in its loop)."""

    def parse_or_raise(raw: bytes) -> Any:
        message = parse(raw)
        if isinstance(message, RuntimeServiceError):
            raise message
        return message

    return parse_or_raise


async def _raising(error: Exception) -> Any:
    raise error


async def _raising_stream(error: Exception) -> AsyncIterator[Any]:
    raise error
    yield  # an async generator: the error surfaces when the stream is iterated
