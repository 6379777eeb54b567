"""Error translation: gRPC statuses and local failures to OpenAI-style HTTP errors.

Every error the gateway returns has OpenAI's body shape (https://platform.openai.com/docs/guides/error-codes)::

    {"error": {"message": str, "type": str, "param": str | None, "code": str | None}}

``code`` is the server's ``google.rpc.ErrorInfo.reason`` lowercased (``MODEL_NOT_FOUND`` ->
``"model_not_found"``) or, without ErrorInfo, the gRPC status code name lowercased. ``param`` is the
ErrorInfo metadata entry ``field`` when the server named the offending field.
"""

from __future__ import annotations

import logging
import math
import re
from http import HTTPStatus
from typing import Any

import grpc
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from google.rpc import error_details_pb2, status_pb2
from starlette.exceptions import HTTPException as StarletteHTTPException

from engines.reasons import HTTP_STATUS_BY_GRPC_CODE, REASONS, Reason, spec_of
from service.shared.rate_limits import openai_duration as openai_duration  # re-exported
from service.shared.rate_limits import rate_limit_headers

logger = logging.getLogger(__name__)

STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""Trailing metadata key carrying the serialized ``google.rpc.Status`` of a failed call."""

MESSAGE_TOO_LARGE_CODE = "message_too_large"
"""Error code of every "too large" failure: HTTP body, gRPC request or gRPC response."""

HTTP_CLIENT_CLOSED_REQUEST = HTTP_STATUS_BY_GRPC_CODE["CANCELLED"]
"""499 "Client Closed Request" (nginx): the client went away before the answer was ready."""

RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of a 429 for a full queue (reason OVERLOADED), in whole seconds: a queue place
frees when a request ahead finishes, so a short wait is enough, and one second keeps a retrying
client from hammering the server."""

OVERLOADED_REASON = Reason.OVERLOADED
"""ErrorInfo reason of RESOURCE_EXHAUSTED when a queue is full (retry later), as opposed to a
request over a size limit (FILE_TOO_LARGE, MESSAGE_TOO_LARGE…) that retrying cannot fix."""

RETRY_LATER_REASONS = frozenset(reason for reason, spec in REASONS.items() if spec.retry_later)
"""RESOURCE_EXHAUSTED reasons that mean "busy now" (:attr:`~engines.reasons.ReasonSpec.retry_later`):
a full queue, or a wait past the queue's limit. They get ``Retry-After``; size and memory limits do not."""

QUOTA_EXCEEDED_REASON = Reason.QUOTA_EXCEEDED
"""ErrorInfo reason of a call over its API key's quota (:mod:`service.quotas`): HTTP 429 with
``Retry-After`` from the status's ``google.rpc.RetryInfo`` and OpenAI's ``x-ratelimit-*`` headers."""

# The status of a code that comes without a reason the server sends (engines.reasons has both).
_HTTP_STATUS_BY_GRPC_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode[name]: status for name, status in HTTP_STATUS_BY_GRPC_CODE.items()
}

CONTEXT_LENGTH_EXCEEDED_CODE = "context_length_exceeded"
"""OpenAI's error code of an input over the model's context (LiteLLM's ContextWindowExceededError
and LangChain's context-overflow handling key on it, and on the message's opening words)."""

# The OpenAI routes, and what their input is called in OpenAI's context-overflow message. On
# them an INPUT_TOO_LONG context overflow is answered as OpenAI answers it; elsewhere it stays
# ``input_too_long`` with the server's own message.
_OPENAI_INPUT_BY_ROUTE: dict[str, str] = {
    "/v1/chat/completions": "messages",
    "/v1/completions": "prompt",
    "/v1/embeddings": "input",
    "/v1/responses": "input",
}

_ERROR_TYPE_BY_HTTP_STATUS: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}

# gRPC core's wording for a message over grpc.max_{send,receive}_message_length, raised locally
# by the client ("Sent message larger than max (N vs. M)") or relayed from the server ("Received
# message larger than max ..."). Core attaches no ErrorInfo, so the text is all there is.
_GRPC_SIZE_ERROR = re.compile(r"message larger than max", re.IGNORECASE)


class GatewayError(HTTPException):
    """An error raised by the gateway itself, rendered with OpenAI's error body.

    It subclasses FastAPI's ``HTTPException`` so that FastAPI re-raises it unchanged when it is
    raised while the request body is being read (the body size limit does that).

    Args:
        status_code: HTTP status of the response.
        message: Human-readable explanation sent to the client.
        code: Machine-readable error code (lower snake case).
        param: The request field at fault, if any.
        error_type: OpenAI error type; derived from ``status_code`` when omitted.

    """

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(status_code=status_code, detail=message)
        self.message = message
        self.code = code
        self.param = param
        self.error_type = error_type or error_type_for_status(status_code)


def error_type_for_status(status_code: int) -> str:
    """Return the OpenAI error ``type`` for an HTTP status (``server_error`` for every 5xx)."""
    if status_code >= 500:
        return "server_error"
    return _ERROR_TYPE_BY_HTTP_STATUS.get(status_code, "invalid_request_error")


def error_body(
    message: str, *, error_type: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    """Build OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_info_from_rpc_error(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """Extract the ``google.rpc.ErrorInfo`` detail of a failed call, or ``None`` when there is none.

    Works for ``grpc.aio.AioRpcError`` (whose trailing metadata ``grpc_status.rpc_status.from_call``
    cannot read) and for sync call errors. A malformed status payload counts as no detail: the
    status code alone still yields a correct HTTP answer.
    """
    return _status_detail(err, error_details_pb2.ErrorInfo)


def retry_info_from_rpc_error(err: grpc.RpcError) -> error_details_pb2.RetryInfo | None:
    """The ``google.rpc.RetryInfo`` detail of a failed call (its ``retry_delay``), or ``None``."""
    return _status_detail(err, error_details_pb2.RetryInfo)


def _status_detail(err: grpc.RpcError, message_type: type[Any]) -> Any:
    """The first detail of type ``message_type`` in the call's ``google.rpc.Status``, or ``None``."""
    trailing = err.trailing_metadata() if callable(getattr(err, "trailing_metadata", None)) else None
    for key, value in trailing or ():
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:  # a broken peer must not turn a clean error into a 500
            logger.warning("unparseable %s trailer ignored", STATUS_DETAILS_KEY)
            return None
        for detail in status.details:  # a few details at most
            if detail.Is(message_type.DESCRIPTOR):
                found = message_type()
                detail.Unpack(found)
                return found
    return None


def is_message_size_error(code: grpc.StatusCode, reason: str | None, details: str) -> bool:
    """Tell whether a RESOURCE_EXHAUSTED status means "message too large" (HTTP 413), not overload."""
    if code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return False
    return reason == Reason.MESSAGE_TOO_LARGE or bool(_GRPC_SIZE_ERROR.search(details))


def http_status_for_grpc(code: grpc.StatusCode, *, reason: str | None = None, details: str = "") -> int:
    """Map a failed call's gRPC status code and ErrorInfo reason to an HTTP status.

    A reason the server sends has its own status (:data:`engines.reasons.REASONS`: a size limit is
    413, a full store 507, where the code alone says 429). Otherwise the code decides
    (:data:`engines.reasons.HTTP_STATUS_BY_GRPC_CODE`): INVALID_ARGUMENT and FAILED_PRECONDITION
    400, NOT_FOUND 404, ALREADY_EXISTS 409, RESOURCE_EXHAUSTED 429 (413 when gRPC core says the
    message was too large), UNAUTHENTICATED 401, PERMISSION_DENIED 403, UNIMPLEMENTED 501,
    UNAVAILABLE 503, DEADLINE_EXCEEDED 504, CANCELLED 499; INTERNAL, UNKNOWN and the rest 500.

    Args:
        code: The call's status code.
        reason: Its ErrorInfo reason (UPPER_SNAKE_CASE), if any; an unknown one is ignored.
        details: Its status message (gRPC core's size errors have no reason, only this text).

    """
    spec = spec_of(reason)
    if spec is not None:
        return spec.http_status
    if is_message_size_error(code, reason, details):
        return 413
    return _HTTP_STATUS_BY_GRPC_CODE.get(code, 500)


def _openai_param(field: str | None) -> str | None:
    """Rename a server field path to the OpenAI request field the client actually sent.

    The server names proto fields: sampling options live under ``parameters`` and texts in
    ``inputs``, while the OpenAI request has them at top level and in ``input``; anomaly rows the
    gateway packed (``numeric_rows``) were the body's ``rows``.
    """
    if not field:
        return None
    field = field.removeprefix("parameters.")
    for proto_name, body_name in (("inputs", "input"), ("numeric_rows", "rows")):
        if field == proto_name or field.startswith((f"{proto_name}[", f"{proto_name}.")):
            return body_name + ("" if body_name == "rows" else field[len(proto_name) :])
    return field


# The contract's fields (as chat names them) under the Responses API's own names, longest first.
_RESPONSES_PARAMS: tuple[tuple[str, str], ...] = (
    ("response_format.json_schema", "text.format.schema"),
    ("response_format", "text.format"),
    ("tool_choice.function_name", "tool_choice.name"),
    ("max_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
)


def _responses_param(param: str | None) -> str | None:
    """Rename a chat-shaped ``param`` to the Responses API's field (``response_format`` -> ``text.format``).

    A message's place (``messages[3]``) becomes ``input``: instructions and a chain come before
    the request's own items, so the index is not the body's.
    """
    if param is None:
        return None
    if param == "messages" or param.startswith(("messages[", "messages.")):
        return "input"
    for contract, body in _RESPONSES_PARAMS:
        if param == contract or param.startswith((f"{contract}.", f"{contract}[")):
            return body + param[len(contract) :]
    return param


def retry_after_headers(err: grpc.RpcError) -> dict[str, str]:
    """HTTP headers telling the client when to retry a failed call: ``{"Retry-After": "1"}``.

    For RESOURCE_EXHAUSTED with a reason of :data:`RETRY_LATER_REASONS` (a full queue, a wait
    past the queue's limit), and for :data:`QUOTA_EXCEEDED_REASON` (:func:`quota_headers`);
    every other error (size limits, not enough memory to load a model, ...) gets ``{}``.
    """
    if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return {}
    info = error_info_from_rpc_error(err)
    if info is not None and info.reason == QUOTA_EXCEEDED_REASON:
        return quota_headers(info, retry_info_from_rpc_error(err))
    if info is None or info.reason not in RETRY_LATER_REASONS:
        return {}
    return {"Retry-After": str(RETRY_AFTER_SECONDS)}


def quota_headers(
    info: error_details_pb2.ErrorInfo, retry: error_details_pb2.RetryInfo | None
) -> dict[str, str]:
    """The headers of a 429 for a call over its key's quota, as OpenAI sends them.

    ``Retry-After`` (whole seconds, rounded up; RFC 9110 section 10.2.3) and ``retry-after-ms``
    (read by OpenAI's SDKs) from the RetryInfo's ``retry_delay``, when the server gave one (not
    for a request over the whole allowance, nor for a stream limit: waiting a known time cannot
    help there). ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and
    ``x-ratelimit-reset-requests`` when the key has a request rate (the limit is the bucket's
    size, the reset the time until it is full again, in OpenAI's form ``1s``, ``6m0s``,
    ``250ms``), and the ``-tokens`` variants when it has ``tokens_per_minute``; all from the
    ErrorInfo metadata that :mod:`service.quotas` fills in, written by
    :func:`service.shared.rate_limits.rate_limit_headers` (the same headers a successful call
    carries, see :func:`gateway.streaming.keep_rate_limit_headers`).
    """
    headers: dict[str, str] = {}
    if retry is not None and retry.HasField("retry_delay"):
        delay = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
        headers["Retry-After"] = str(math.ceil(delay))
        headers["retry-after-ms"] = str(math.ceil(delay * 1000))
    headers.update(rate_limit_headers(info.metadata))
    return headers


def context_length_message(info: error_details_pb2.ErrorInfo | None, route: str | None) -> str | None:
    """OpenAI's message for a context overflow on an OpenAI route; ``None`` for anything else.

    A context overflow is INVALID_ARGUMENT with reason INPUT_TOO_LONG whose metadata names the
    model's limit in tokens: ``context_length`` (generation) or ``max_tokens`` (encoders); other
    INPUT_TOO_LONG errors (a JSON schema over its character limit, too many token ids…) are not.
    The input's size is ``prompt_tokens``/``input_tokens``, or, for an input refused on its
    characters before it was tokenized, ``prompt_characters``/``input_characters`` and
    ``max_characters``. The form is OpenAI's (chat completions): "This model's maximum context
    length is N tokens. However, your messages resulted in M tokens. Please reduce the length of
    the messages." (``prompt`` on ``/v1/completions``, ``input`` on ``/v1/embeddings``).

    Args:
        info: The error's ErrorInfo, if any.
        route: The HTTP route's path, e.g. ``"/v1/chat/completions"``.

    """
    subject = _OPENAI_INPUT_BY_ROUTE.get(route or "")
    if subject is None or info is None or info.reason != Reason.INPUT_TOO_LONG:
        return None
    metadata = info.metadata
    limit = metadata.get("context_length") or metadata.get("max_tokens")
    if not limit:
        return None
    tokens = metadata.get("prompt_tokens") or metadata.get("input_tokens")
    characters = metadata.get("prompt_characters") or metadata.get("input_characters")
    if tokens:
        size = f"{tokens} tokens"
    elif characters:
        read = metadata.get("max_characters")
        size = f"{characters} characters (more than the {read} characters read for {limit} tokens)"
    else:
        size = "more tokens than that"
    return (
        f"This model's maximum context length is {limit} tokens. However, your {subject} resulted "
        f"in {size}. Please reduce the length of the {subject}."
    )


def rpc_error_to_http(err: grpc.RpcError, *, route: str | None = None) -> tuple[int, dict[str, Any]]:
    """Translate a failed gRPC call into ``(http_status, openai_error_body)``.

    Args:
        err: The call's error; ``code()`` and ``details()`` are read, plus the ErrorInfo detail.
        route: The HTTP route's path. On an OpenAI route (chat, completions, embeddings) a context
            overflow gets OpenAI's code ``context_length_exceeded`` and message
            (:func:`context_length_message`); elsewhere, and without a route, the server's.

    Returns:
        The HTTP status (see :func:`http_status_for_grpc`) and the body from :func:`error_body`.

    """
    code: grpc.StatusCode = err.code()
    details = err.details() or code.name
    info = error_info_from_rpc_error(err)
    reason = info.reason if info is not None and info.reason else None
    status_code = http_status_for_grpc(code, reason=reason, details=details)
    if reason:
        error_code = reason.lower()
    elif status_code == 413:
        error_code = MESSAGE_TOO_LARGE_CODE
    else:
        error_code = code.name.lower()
    param = _openai_param(info.metadata.get("field")) if info is not None else None
    if route == "/v1/responses":
        param = _responses_param(param)
    overflow = context_length_message(info, route)
    if overflow is not None:
        details, error_code = overflow, CONTEXT_LENGTH_EXCEEDED_CODE
        param = param or _OPENAI_INPUT_BY_ROUTE[route or ""]
    body = error_body(details, error_type=error_type_for_status(status_code), code=error_code, param=param)
    return status_code, body


def route_path(request: Request) -> str:
    """The path of the route that served ``request`` (its template), else the request's path."""
    return getattr(request.scope.get("route"), "path", request.url.path)


# Names pydantic gives the members of a union in error locations: a core type ("str", "none"),
# a schema with parameters ("list[...]", "function-after[...]", "literal[...]") or a model's class
# name. They are not fields of the request, and clients must not see them.
_CORE_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "bytes", "list", "dict", "json"})

# Leftovers of pydantic's rendering in a message (a ValidationError's text raised inside a validator).
_PYDANTIC_DETAIL = re.compile(
    r"\s*\[type=[^\]]*\]|\s*For further information visit \S+|^(Value error|Assertion failed), "
)


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and (
        part in _CORE_TYPE_TAGS or "[" in part or "-" in part or part[:1].isupper()
    )


def _validation_path(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """A pydantic error location as request fields: ``("body", ...)``, union tags and ``[key]`` dropped."""
    parts = loc[1:] if loc and loc[0] == "body" else loc
    # "[key]": pydantic's pseudo location of a dict key; the dict's name suffices.
    return tuple(part for part in parts if part != "[key]" and not _is_union_tag(part))


def _validation_param(loc: tuple[Any, ...]) -> str | None:
    """Render a pydantic error location as an OpenAI ``param`` path, e.g. ``messages[0].role``."""
    path = ""
    for part in _validation_path(loc):
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


# OpenAI's codes for a missing field and for one it does not know.
_VALIDATION_CODES = {"missing": "missing_required_parameter", "extra_forbidden": "unknown_parameter"}


def _validation_message(error: dict[str, Any]) -> str:
    if error.get("type") == "extra_forbidden":
        return "unknown field: this route does not accept it"
    return _PYDANTIC_DETAIL.sub("", str(error.get("msg", "invalid value"))).strip()


def _reported_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors worth telling: for a union, only the member that got furthest into the value.

    A value that fails every member of a union (``content: str | list[part]``) gets an error per
    member; one at a location that a deeper error extends ("not a string" at ``content`` beside
    ``content[1]``'s real problem) is noise, as is the same message twice.
    """
    paths = [_validation_path(tuple(error.get("loc", ()))) for error in errors]
    kept, seen = [], set()
    for error, path in zip(errors, paths, strict=True):
        extended = any(len(other) > len(path) and other[: len(path)] == path for other in paths)
        key = (path, _validation_message(error))
        if (extended and len(path) < len(tuple(error.get("loc", ())))) or key in seen:
            continue
        seen.add(key)
        kept.append(error)
    return kept or errors[:1]


def validation_error_to_http(exc: RequestValidationError) -> tuple[int, dict[str, Any]]:
    """Translate a request validation failure into ``(400, openai_error_body)`` (FastAPI says 422).

    The message names each field at fault as the client sent it (``messages[0].content[1]``) with
    pydantic's short message; pydantic's internals (union member names, ``input_value=``, links to
    its documentation) are left out. ``code`` is ``missing_required_parameter``,
    ``unknown_parameter`` or ``invalid_value`` (of the first error), ``invalid_json`` for a body
    that did not decode; ``param`` is the first field's path.
    """
    errors = list(exc.errors())
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        message = f"Request body is not valid JSON: {ctx.get('error', 'decode error')}"
        return 400, error_body(message, error_type="invalid_request_error", code="invalid_json")
    errors = _reported_errors(errors)
    first = errors[0] if errors else {}
    messages = []
    for error in errors:
        where = _validation_param(tuple(error.get("loc", ())))
        text = _validation_message(error)
        messages.append(f"{where}: {text}" if where else text)
    code = _VALIDATION_CODES.get(first.get("type", ""), "invalid_value")
    param = _validation_param(tuple(first.get("loc", ())))
    return 400, error_body("; ".join(messages), error_type="invalid_request_error", code=code, param=param)


def _validation_error_response(exc: RequestValidationError) -> JSONResponse:
    """Render a request validation failure (:func:`validation_error_to_http`) as a response."""
    status_code, body = validation_error_to_http(exc)
    return JSONResponse(body, status_code=status_code)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that give every error response OpenAI's body shape.

    Covers failed gRPC calls (``grpc.aio.AioRpcError``; an overload 429 carries ``Retry-After``,
    see :func:`retry_after_headers`), :class:`GatewayError`, request
    validation errors (400 instead of 422), Starlette HTTP errors (unknown route, wrong method) and,
    as a last resort, any other exception (500 without internals).
    """

    async def on_rpc_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, grpc.aio.AioRpcError)
        status_code, body = rpc_error_to_http(exc, route=route_path(request))
        level = logging.WARNING if status_code >= 500 else logging.INFO
        logger.log(
            level,
            "gRPC call failed: %s %s (%s) -> HTTP %d [request_id=%s]",
            exc.code().name,
            body["error"]["code"],
            exc.details(),
            status_code,
            getattr(request.state, "request_id", None),
        )
        return JSONResponse(body, status_code=status_code, headers=retry_after_headers(exc))

    async def on_gateway_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, GatewayError)
        body = error_body(exc.message, error_type=exc.error_type, code=exc.code, param=exc.param)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _validation_error_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        try:
            phrase = HTTPStatus(exc.status_code).phrase
        except ValueError:
            phrase = "error"
        code = phrase.lower().replace(" ", "_").replace("-", "_")
        if exc.status_code == 413:
            code = MESSAGE_TOO_LARGE_CODE
        body = error_body(str(exc.detail), error_type=error_type_for_status(exc.status_code), code=code)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def on_unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        # The traceback goes to the log only: clients must not see internals.
        logger.exception(
            "unhandled error [request_id=%s]", getattr(request.state, "request_id", None), exc_info=exc
        )
        body = error_body("Internal server error", error_type="server_error", code="internal_error")
        return JSONResponse(body, status_code=500)

    app.add_exception_handler(grpc.aio.AioRpcError, on_rpc_error)
    app.add_exception_handler(GatewayError, on_gateway_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected_error)
