"""The error body every route answers with, and the error responses the OpenAPI document lists."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """OpenAI's error object: what went wrong, its kind, the offending field and a stable code."""

    message: str = Field(description="What went wrong, for people.")
    type: str = Field(description="OpenAI's error kind, e.g. invalid_request_error, rate_limit_error.")
    param: str | None = Field(None, description="The request field at fault, when one is.")
    code: str | None = Field(None, description="Stable machine-readable reason, e.g. model_not_found.")


class ErrorResponse(BaseModel):
    """``{"error": {"message", "type", "param", "code"}}``, the body of every 4xx/5xx answer."""

    error: ErrorDetail


# HTTP status → when a route answers it (gateway/errors.py maps the gRPC statuses).
_ERROR_STATUSES: dict[int, str] = {
    400: "Invalid request: a malformed body, a value out of range, or a model that cannot do the task.",
    401: "Missing or wrong API key (`Authorization: Bearer <key>`).",
    404: "Unknown model, classifier or detector.",
    413: "Request body over the gateway's size limit, or an input over a model's limit.",
    422: "Not sent: validation errors answer 400 (as OpenAI does); listed with the error schema for clients.",
    429: (
        "Overloaded (the model's queue is full), or over the API key's quota (`quota_exceeded`, with"
        " OpenAI's `x-ratelimit-*` headers); retry after the `Retry-After` seconds."
    ),
    500: "Internal error (details only in the server log, under the request id).",
    503: "The server is starting, shutting down, or the gRPC server is unreachable.",
    504: "The request's deadline passed before it finished.",
}

#: ``responses=`` for routers: every error status with the :class:`ErrorResponse` schema.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in _ERROR_STATUSES.items()
}
#: The subset ``GET /health`` can answer (it takes no body, no key and no model).
HEALTH_ERROR_RESPONSES = {status: ERROR_RESPONSES[status] for status in (500, 503, 504)}
# /metrics answers from this process alone: a key when probes are guarded, or a failure of its own.
METRICS_ERROR_RESPONSES = {status: ERROR_RESPONSES[status] for status in (401, 500)}
