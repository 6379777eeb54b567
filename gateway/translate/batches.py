"""``BatchService`` messages as OpenAI's File, Batch and list objects (:mod:`gateway.schemas.batches`).

The proto leaves a string or time empty (``""``, 0) where OpenAI's JSON has ``null``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from universal_runtime.v1 import batch_pb2

from gateway.errors import GatewayError

_STATUSES = {
    batch_pb2.BATCH_STATUS_VALIDATING: "validating",
    batch_pb2.BATCH_STATUS_FAILED: "failed",
    batch_pb2.BATCH_STATUS_IN_PROGRESS: "in_progress",
    batch_pb2.BATCH_STATUS_FINALIZING: "finalizing",
    batch_pb2.BATCH_STATUS_COMPLETED: "completed",
    batch_pb2.BATCH_STATUS_EXPIRED: "expired",
    batch_pb2.BATCH_STATUS_CANCELLING: "cancelling",
    batch_pb2.BATCH_STATUS_CANCELLED: "cancelled",
}

_TIMES = (
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def file_object(file: batch_pb2.File) -> dict[str, Any]:
    """OpenAI's File object: ``{"id", "object": "file", "bytes", "created_at", "filename", "purpose", ...}``.

    ``status`` is always ``processed`` (a stored file was checked whole at upload);
    ``expires_at`` is when it expires (Unix seconds), ``null`` for a file that never does (0:
    stored before files expired).
    """
    return {
        "id": file.id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": file.created_at,
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "expires_at": file.expires_at or None,
        "status_details": None,
    }


def batch_object(batch: batch_pb2.Batch) -> dict[str, Any]:
    """OpenAI's Batch object of a ``Batch`` message.

    Raises:
        GatewayError: 502 ``bad_answer`` for a status the gateway does not know (a newer server).

    """
    status = _STATUSES.get(batch.status)
    if status is None:
        raise GatewayError(
            502, f"the server answered an unknown batch status {batch.status}", code="bad_answer"
        )
    errors = [
        {
            "code": error.code or None,
            "message": error.message or None,
            "param": error.param or None,
            "line": error.line or None,
        }
        for error in batch.errors
    ]
    counts = batch.request_counts
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": status,
        "output_file_id": batch.output_file_id or None,
        "error_file_id": batch.error_file_id or None,
        "created_at": batch.created_at,
        **{name: getattr(batch, name) or None for name in _TIMES},
        "request_counts": {"total": counts.total, "completed": counts.completed, "failed": counts.failed},
        "metadata": dict(batch.metadata) or None,
        "model": None,
        "usage": None,
    }


def list_object(data: Sequence[dict[str, Any]], page: Any) -> dict[str, Any]:
    """A cursor page, OpenAI's list: ``{"object": "list", "data", "first_id", "last_id", "has_more"}``.

    ``page`` is a ``ListFilesResponse`` or ``ListBatchesResponse`` (its ``first_id``, ``last_id``
    and ``has_more``); ``data`` its items, already translated.
    """
    return {
        "object": "list",
        "data": list(data),
        "first_id": page.first_id or None,
        "last_id": page.last_id or None,
        "has_more": page.has_more,
    }
