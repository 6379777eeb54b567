"""Anthropic's error shape for the Messages API routes, and the route class that applies it.

Every error of ``/v1/messages`` and ``/v1/messages/count_tokens`` has Anthropic's body
(https://docs.claude.com/en/api/errors)::

    {"type": "error", "error": {"type": str, "message": str}, "request_id": str}

with the HTTP status Anthropic uses for the type: 400 ``invalid_request_error`` (also for other
4xx Anthropic does not list), 401 ``authentication_error``, 403 ``permission_error``, 404
``not_found_error``, 413 ``request_too_large``, 429 ``rate_limit_error``, 529
``overloaded_error`` (a full queue: "busy now, retry", which Anthropic reports as 529, not 429),
500 and other 5xx ``api_error``. The gateway's own error handling (:mod:`gateway.errors`) decides
the status and message of each failure once; this module only re-spells the OpenAI body it makes,
so the two APIs never disagree on what went wrong.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import RETRY_LATER_REASONS
from gateway.json_body import JsonBodyRoute

logger = logging.getLogger(__name__)

OVERLOADED_STATUS = 529
"""Anthropic's status for "the API is temporarily overloaded" (a full queue here)."""

_TYPE_BY_STATUS: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    OVERLOADED_STATUS: "overloaded_error",
}

# OpenAI error codes (a server ErrorInfo reason, lowercased) that mean "busy now, retry".
_OVERLOADED_CODES = frozenset(reason.lower() for reason in RETRY_LATER_REASONS)


def anthropic_error_type(status_code: int) -> str:
    """Anthropic's ``error.type`` for an HTTP status (``api_error`` for any 5xx it does not name)."""
    if status_code in _TYPE_BY_STATUS:
        return _TYPE_BY_STATUS[status_code]
    return "api_error" if status_code >= 500 else "invalid_request_error"


def anthropic_error(
    status_code: int, openai_body: dict[str, Any], request_id: str | None = None
) -> tuple[int, dict[str, Any]]:
    """Re-spell an OpenAI error ``(status, {"error": {...}})`` as Anthropic's ``(status, body)``.

    A 429 whose code is a "retry later" reason (``overloaded``, ``queue_wait_exceeded``) becomes
    529 ``overloaded_error``; other statuses keep their number. The message keeps the field at
    fault (``param``) in front when the OpenAI message does not already start with it.

    Args:
        status_code: The HTTP status :mod:`gateway.errors` chose.
        openai_body: Its body, ``{"error": {"message", "type", "param", "code"}}``.
        request_id: The request's id (``x-request-id``), sent as ``request_id`` as Anthropic does.

    Returns:
        The status and ``{"type": "error", "error": {"type", "message"}, "request_id"?}``.

    """
    error = openai_body.get("error") or {}
    message = str(error.get("message") or "error")
    param = error.get("param")
    if param and not message.startswith(str(param)):
        message = f"{param}: {message}"
    if status_code == 429 and error.get("code") in _OVERLOADED_CODES:
        status_code = OVERLOADED_STATUS
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": anthropic_error_type(status_code), "message": message},
    }
    if request_id:
        body["request_id"] = request_id
    return status_code, body


class AnthropicSse:
    """The SSE dialect of Anthropic Messages streams (for :func:`gateway.streaming.stream_generation`).

    Each payload is one event named by its ``type`` (``event: message_start`` + ``data: {...}``);
    a failure after the stream started is an ``error`` event with Anthropic's error body; there
    is no terminator after ``message_stop``. Source: Anthropic Messages API, "Streaming Messages".
    """

    done = None

    def fields(self, payload: dict[str, Any]) -> dict[str, str]:
        """``{"event": payload["type"], "data": compact JSON}``."""
        return {
            "event": str(payload["type"]),
            "data": json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
        }

    def error_payloads(self, status_code: int, body: dict[str, Any]) -> Iterable[dict[str, Any]]:
        """One ``error`` event: :func:`anthropic_error` of the OpenAI body (no request id)."""
        return [anthropic_error(status_code, body)[1]]


ANTHROPIC_SSE = AnthropicSse()
"""The dialect instance the Messages route streams with."""


def _handler_for(request: Request, exc: Exception) -> Callable[..., Any] | None:
    """The app's exception handler for ``exc`` (the most specific class first, as Starlette looks)."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls in handlers:
            return handlers[cls]
    return None


async def anthropic_error_response(request: Request, exc: Exception) -> Response:
    """Answer ``exc`` as the app would, re-spelled in Anthropic's shape (:func:`anthropic_error`).

    Headers the app's handler set (``Retry-After`` of an overload) are kept.

    Raises:
        Exception: ``exc`` itself when the app has no handler for it.

    """
    handler = _handler_for(request, exc)
    if handler is None:
        raise exc
    response = await handler(request, exc)
    try:
        openai_body = json.loads(bytes(response.body))
    except (ValueError, AttributeError):
        return response  # not a JSON error body (never the case for the gateway's handlers)
    request_id = getattr(request.state, "request_id", None)
    status_code, body = anthropic_error(response.status_code, openai_body, request_id)
    headers = {
        key: value
        for key, value in response.headers.items()
        if key.lower() not in ("content-length", "content-type")
    }
    return JSONResponse(body, status_code=status_code, headers=headers)


class AnthropicRoute(JsonBodyRoute):
    """A :class:`~gateway.json_body.JsonBodyRoute` whose every error has Anthropic's shape.

    The key check, the body's parse and validation, and the handler all run inside it, so a 401,
    a 400, a gRPC failure (404 unknown model, 529 overload...) or an unexpected 500 is answered as
    :func:`anthropic_error_response` spells it. Errors raised before routing (a body over the
    size limit announced by ``Content-Length``, an unknown path) keep the gateway's OpenAI shape.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The JSON-body handler, with its exceptions answered in Anthropic's shape."""
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # every error of these routes is re-spelled, none escapes
                return await anthropic_error_response(request, exc)

        return handle
