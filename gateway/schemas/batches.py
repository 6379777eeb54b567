"""Bodies and answers of the Batch API: ``/v1/files`` and ``/v1/batches`` (OpenAI's shapes).

Source: https://platform.openai.com/docs/api-reference/batch and .../files; the field sets are
those of the OpenAI Python SDK's ``openai.types.Batch``, ``FileObject`` and ``FileDeleted``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from gateway.schemas.base import OpenAIRequestModel

MAX_ID_CHARS = 64
"""Longest file or batch id a path or cursor may hold (the server's are 29 and 30 characters)."""

MAX_FILES_PAGE = 10_000
"""Most files one ``GET /v1/files`` page returns (OpenAI's bound of ``limit``, and its default)."""

MAX_BATCHES_PAGE = 100
"""Most batches one ``GET /v1/batches`` page returns (OpenAI's bound of ``limit``)."""

DEFAULT_BATCHES_PAGE = 20
"""Batches a ``GET /v1/batches`` page returns without ``limit`` (OpenAI's default)."""

MAX_METADATA_PAIRS = 16
"""Most ``metadata`` pairs of a batch (OpenAI's bound); keys up to 64 characters, values up to 512."""

EXPIRY_ANCHOR = "created_at"
"""The only ``expires_after.anchor`` OpenAI accepts: the file's creation."""

MIN_EXPIRES_AFTER_S, MAX_EXPIRES_AFTER_S = 3600, 2_592_000
"""OpenAI's bounds of ``expires_after.seconds`` and ``output_expires_after.seconds``: 1 hour to 30 days."""

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]


class ExpiresAfter(OpenAIRequestModel):
    """OpenAI's expiry policy of a file: ``seconds`` after ``anchor`` (its creation)."""

    anchor: Literal["created_at"] = Field(description="Only `created_at`: the file's creation.")
    seconds: int = Field(
        ge=MIN_EXPIRES_AFTER_S,
        le=MAX_EXPIRES_AFTER_S,
        description="Seconds the file is kept after it is written: 3600 to 2592000 (1 hour to 30 days).",
    )


class CreateBatchRequest(OpenAIRequestModel):
    """``POST /v1/batches``: run the lines of an uploaded file (purpose ``batch``) against one endpoint."""

    input_file_id: str = Field(max_length=MAX_ID_CHARS, description="An uploaded file of purpose `batch`.")
    endpoint: str = Field(
        max_length=64,
        description="The url every line names: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, "
        "`/v1/rerank`, `/v1/classify`, `/v1/ocr` or `/v1/documents/{analyze,ask,extract,classify}`.",
    )
    completion_window: Literal["24h"] = Field(description="The time the batch has to finish; only `24h`.")
    metadata: dict[str, str] | None = Field(
        default=None,
        max_length=MAX_METADATA_PAIRS,
        description="At most 16 pairs, kept with the batch; keys up to 64 characters, values up to 512.",
    )
    output_expires_after: ExpiresAfter | None = Field(
        default=None,
        description="How long the batch's output and error files are kept after they are written "
        "(30 days without it).",
    )


class FileObject(BaseModel):
    """OpenAI's File object."""

    id: str
    object: Literal["file"] = "file"
    bytes: int = Field(description="Size in bytes.")
    created_at: int = Field(description="Unix seconds.")
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["processed"] = Field(
        default="processed", description="Deprecated by OpenAI; a stored file is always `processed`."
    )
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    """A page of files: OpenAI's list object."""

    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    """The answer of ``DELETE /v1/files/{file_id}``."""

    id: str
    object: Literal["file"] = "file"
    deleted: bool


class BatchRequestCounts(BaseModel):
    """How many lines ran: in all, answered 2xx, and the rest."""

    total: int
    completed: int
    failed: int


class BatchError(BaseModel):
    """One problem with a batch's input (``line`` is 1-based)."""

    code: str | None
    message: str | None
    param: str | None
    line: int | None


class BatchErrors(BaseModel):
    """The problems found validating a batch's input."""

    object: Literal["list"] = "list"
    data: list[BatchError]


class BatchObject(BaseModel):
    """OpenAI's Batch object. Times are Unix seconds, ``null`` until the batch has been there."""

    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: BatchRequestCounts
    metadata: dict[str, str] | None
    model: str | None = Field(default=None, description="Always null: a batch's lines name their own models.")
    usage: dict[str, Any] | None = Field(default=None, description="Always null (not counted).")


class BatchList(BaseModel):
    """A page of batches: OpenAI's list object, newest first."""

    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
