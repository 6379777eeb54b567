"""Per-RPC context carried in context variables (visible in executor threads too)."""

from __future__ import annotations

import contextvars
import uuid

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
model_var: contextvars.ContextVar[str] = contextvars.ContextVar("model", default="")

REQUEST_ID_METADATA_KEY = "x-request-id"


def new_request_id() -> str:
    """A fresh random request id (32 hex characters)."""
    return uuid.uuid4().hex


def note_model(name: str) -> None:
    """Record the model a request uses, for the per-RPC log line."""
    model_var.set(name)
