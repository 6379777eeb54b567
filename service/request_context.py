"""Per-RPC context carried in context variables (visible in executor threads too)."""

from __future__ import annotations

import contextvars
import uuid

from engines.errors import clip_text

REQUEST_ID_UNSET = "-"
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default=REQUEST_ID_UNSET)
model_var: contextvars.ContextVar[str] = contextvars.ContextVar("model", default="")

REQUEST_ID_METADATA_KEY = "x-request-id"
MAX_REQUEST_ID_CHARS = 128
"""Longest client-sent request id kept (longer ones are clipped): it is logged with every line
of the request and echoed in its initial metadata."""


def new_request_id() -> str:
    """A fresh random request id (32 hex characters)."""
    return uuid.uuid4().hex


def note_model(name: str) -> None:
    """Record the model a request uses, for the per-RPC log line (clipped: a client may send 10 KB)."""
    model_var.set(clip_text(name))


def client_request_id(value: str | None) -> str:
    """The id of a call: the client's ``x-request-id`` or, when it sent none, a new one.

    A client's id is cut to :data:`MAX_REQUEST_ID_CHARS` (a plain cut: metadata values must stay
    ASCII, so no clip marker).
    """
    return value[:MAX_REQUEST_ID_CHARS] if value else new_request_id()
