"""Pure ASGI middleware: request ids (and the calls' rate-limit headers) and the request body size limit.

Pure ASGI (not ``BaseHTTPMiddleware``) so that streaming responses and client disconnects pass
through untouched.
"""

from __future__ import annotations

import logging
import re
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import MESSAGE_TOO_LARGE_CODE, GatewayError, error_body

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
"""HTTP header and gRPC metadata key carrying the request id."""

RATE_LIMIT_HEADERS_STATE = "rate_limit_headers"
"""Request state entry (``request.state.rate_limit_headers``): the ``x-ratelimit-*`` headers of
the request's latest gRPC call, by name (:func:`gateway.streaming.keep_rate_limit_headers`)."""

# gRPC metadata values must be printable ASCII, and the id is echoed into logs and a response
# header: anything else from the client is replaced rather than forwarded.
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


def new_request_id() -> str:
    """Return a fresh random request id (32 hex digits)."""
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Give each HTTP request an id and echo it in the ``x-request-id`` response header.

    The id is the client's ``x-request-id`` header when it is 1-128 characters of
    ``[A-Za-z0-9._:/+=@-]``, a new random id otherwise. It is stored as ``request.state.request_id``
    (the routes forward it as gRPC metadata) and set on every response, errors included.

    The same response start gets the ``x-ratelimit-*`` headers that the request's gRPC calls
    received from the server (:data:`RATE_LIMIT_HEADERS_STATE`), unary and streamed answers
    alike, as OpenAI sends them on every answer. A header the response already has (a 429's own,
    from its refusal) is kept.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the wrapped app with a request id attached to the scope and the response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied = Headers(scope=scope).get(REQUEST_ID_HEADER)
        if supplied is not None and _VALID_REQUEST_ID.fullmatch(supplied):
            request_id = supplied
        else:
            if supplied is not None:
                logger.warning("replacing malformed %s header", REQUEST_ID_HEADER)
            request_id = new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers[REQUEST_ID_HEADER] = request_id
                # Six entries at most (service.shared.rate_limits.RATE_LIMIT_HEADERS).
                for name, value in state.get(RATE_LIMIT_HEADERS_STATE, {}).items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_id)


class BodySizeLimitMiddleware:
    """Reject HTTP request bodies over ``max_bytes`` with 413 and OpenAI's error body.

    A ``Content-Length`` over the limit is refused before any byte is read. Bodies without one
    (chunked) are counted as they arrive; the first chunk past the limit raises
    :class:`gateway.errors.GatewayError` (413) out of ``receive``, which FastAPI propagates to the
    error handlers instead of buffering the rest.

    Args:
        app: The wrapped ASGI app.
        max_bytes: Largest accepted body, in bytes.

    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> GatewayError:
        return GatewayError(
            413,
            f"Request body exceeds the limit of {self.max_bytes} bytes",
            code=MESSAGE_TOO_LARGE_CODE,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the wrapped app with a size-checking ``receive``, or answer 413 right away."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            error = self._too_large()
            response = JSONResponse(
                error_body(error.message, error_type=error.error_type, code=error.code), status_code=413
            )
            await response(scope, receive, send)
            return

        received = 0

        async def receive_with_limit() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, receive_with_limit, send)
