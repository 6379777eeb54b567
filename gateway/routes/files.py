"""The Batch API's files: ``POST|GET /v1/files``, ``GET|DELETE /v1/files/{file_id}``, ``GET .../content``.

Each is a call to the server's ``BatchService`` (the server stores and checks the files; see
``protos/universal_runtime/v1/batch.proto``), answered in OpenAI's shapes
(https://platform.openai.com/docs/api-reference/files). A key sees only its own files: another
key's id is 404, as an absent one.

An upload is ``multipart/form-data`` with the file as ``file`` and ``purpose=batch`` (the only
purpose; others are 400), and optionally OpenAI's ``expires_after[anchor]=created_at`` and
``expires_after[seconds]`` (3600 to 2592000; the file is kept 30 days without them; the File
object's ``expires_at`` says when it goes). Its body is bounded while it arrives by the
gateway's body limit (:class:`gateway.middleware.BodySizeLimitMiddleware`: 413 past
``max_message_bytes``); the form's parts are spooled to disk past 1 MiB, and the file goes to the
server in 1 MiB messages, so neither side holds more than a chunk of it in a message. The server
then checks every line (400 naming the first bad line) and its own size and line limits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import grpc
from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile
from universal_runtime.v1 import batch_pb2

from engines.reasons import REASONS, Reason
from gateway.calls import Rpc
from gateway.errors import GatewayError
from gateway.responses import JsonResponse
from gateway.schemas.batches import (
    EXPIRY_ANCHOR,
    MAX_EXPIRES_AFTER_S,
    MAX_FILES_PAGE,
    MAX_ID_CHARS,
    MIN_EXPIRES_AFTER_S,
    FileDeleted,
    FileList,
    FileObject,
)
from gateway.schemas.errors import ErrorResponse
from gateway.streaming import call_until_disconnect, keep_rate_limit_headers
from gateway.translate.batches import file_object, list_object
from gateway.uploads import CHUNK_BYTES, resource_reasons_as

router = APIRouter(tags=["batches"])

FileId = Annotated[str, Path(max_length=MAX_ID_CHARS)]

MAX_FILENAME_CHARS = 256
"""Longest file name kept (the server's bound); a longer one is cut to it."""

MAX_FORM_FIELDS = 8
"""Most form fields an upload may have besides the file (OpenAI sends ``purpose`` and
``expires_after[...]``); more is a 400 before the form is read further."""

# OpenAPI of the upload: a form, read by the route itself so the key is checked before the body.
_UPLOAD_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "JSONL: one request a line.",
                        },
                        "purpose": {"type": "string", "enum": ["batch"]},
                        "expires_after[anchor]": {"type": "string", "enum": [EXPIRY_ANCHOR]},
                        "expires_after[seconds]": {
                            "type": "integer",
                            "minimum": MIN_EXPIRES_AFTER_S,
                            "maximum": MAX_EXPIRES_AFTER_S,
                            "description": "Seconds the file is kept after its upload (30 days without it).",
                        },
                    },
                }
            }
        },
    }
}

TOO_MANY_FILES = frozenset({Reason.TOO_MANY_FILES})
"""RESOURCE_EXHAUSTED reason of a key over its number of files: 507 Insufficient Storage (as a full
store), not 429, which OpenAI's clients retry: the client must delete files first."""
_TOO_MANY_FILES_STATUS = REASONS[Reason.TOO_MANY_FILES].http_status

_UPLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    _TOO_MANY_FILES_STATUS: {
        "model": ErrorResponse,
        "description": "The key has as many files as it may keep: delete some first.",
    }
}

_CONTENT_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The file's bytes.",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def expires_after_seconds(form: Any) -> int:
    """OpenAI's ``expires_after[anchor]`` and ``expires_after[seconds]`` form fields: the seconds, 0 without.

    Both or neither (the SDK sends both); the anchor must be ``created_at`` and the seconds an
    integer of 3600 to 2592000 (1 hour to 30 days; OpenAI's bounds).

    Raises:
        GatewayError: 400 ``invalid_expires_after`` with ``param`` the field at fault.

    """
    anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return 0

    def bad(field: str, problem: str) -> GatewayError:
        return GatewayError(
            400,
            f"expires_after[{field}]: {problem}",
            code="invalid_expires_after",
            param=f"expires_after.{field}",
        )

    if anchor != EXPIRY_ANCHOR:
        shown = "missing" if anchor is None else f"got {str(anchor)[:64]!r}"
        raise bad("anchor", f"must be {EXPIRY_ANCHOR!r} ({shown})")
    text = seconds.strip() if isinstance(seconds, str) else ""
    # At most 8 digits: anything longer is out of range anyway, and int() never reads a long string.
    if not (text.isascii() and text.isdigit() and len(text) <= 8):
        shown = "missing" if seconds is None else f"got {str(seconds)[:64]!r}"
        raise bad(
            "seconds", f"must be an integer of {MIN_EXPIRES_AFTER_S} to {MAX_EXPIRES_AFTER_S} ({shown})"
        )
    value = int(text)
    if not MIN_EXPIRES_AFTER_S <= value <= MAX_EXPIRES_AFTER_S:
        raise bad(
            "seconds",
            f"must be {MIN_EXPIRES_AFTER_S} to {MAX_EXPIRES_AFTER_S} (1 hour to 30 days), got {value}",
        )
    return value


async def _chunks(
    upload: UploadFile, filename: str, expires_after_s: int
) -> AsyncIterator[batch_pb2.CreateFileRequest]:
    """The upload's messages: the name, purpose and expiry, then the file in :data:`CHUNK_BYTES` pieces.

    Bounded by the file, which the body limit bounds: at most ``max_message_bytes / CHUNK_BYTES`` reads.
    """
    yield batch_pb2.CreateFileRequest(
        filename=filename, purpose="batch", expires_after_seconds=expires_after_s
    )
    while chunk := await upload.read(CHUNK_BYTES):
        yield batch_pb2.CreateFileRequest(data=chunk)


@router.post("/v1/files", response_model=FileObject, openapi_extra=_UPLOAD_OPENAPI, responses=_UPLOAD_ERRORS)
async def create_file(rpc: Rpc) -> JsonResponse:
    """Upload a JSONL file of batch requests (OpenAI ``files.create`` with ``purpose="batch"``).

    Raises:
        GatewayError: 400 ``invalid_file`` without a file part, 400 ``invalid_file_purpose`` for
            another purpose, 400 ``invalid_expires_after`` for a bad ``expires_after[anchor]`` or
            ``expires_after[seconds]`` (``param`` names it; see :func:`expires_after_seconds`),
            400 for more than :data:`MAX_FORM_FIELDS` fields; 413 for a body
            over the gateway's limit (while it arrives); 507 ``too_many_files``.
        grpc.aio.AioRpcError: 400 ``invalid_batch_line`` (the message names the line and the
            problem), ``batch_file_too_large``, ``batch_file_too_many_lines``,
            ``invalid_batch_file`` (see :mod:`gateway.errors`).

    """
    content_type = rpc.request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise GatewayError(
            400, "send the file as multipart/form-data (fields file and purpose)", code="invalid_file"
        )
    async with rpc.request.form(max_files=1, max_fields=MAX_FORM_FIELDS) as form:
        upload = form.get("file")
        purpose = form.get("purpose")
        if purpose != "batch":
            raise GatewayError(
                400,
                f"purpose: must be 'batch', got {str(purpose)[:64]!r}"
                if purpose
                else "purpose: missing; send 'batch'",
                code="invalid_file_purpose",
                param="purpose",
            )
        if not isinstance(upload, UploadFile):
            raise GatewayError(
                400, "file: attach the JSONL file as the form field 'file'", code="invalid_file", param="file"
            )
        expires_after_s = expires_after_seconds(form)
        filename = (upload.filename or "batch.jsonl")[:MAX_FILENAME_CHARS]
        with resource_reasons_as(_TOO_MANY_FILES_STATUS, TOO_MANY_FILES):
            reply = await rpc.unary(
                rpc.clients.batches.CreateFile, _chunks(upload, filename, expires_after_s)
            )
    return JsonResponse(file_object(reply.file))


@router.get("/v1/files", response_model=FileList)
async def list_files(
    rpc: Rpc,
    purpose: Annotated[Literal["batch", "batch_output"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_FILES_PAGE)] = MAX_FILES_PAGE,
    after: Annotated[str | None, Query(max_length=MAX_ID_CHARS)] = None,
    order: Literal["asc", "desc"] = "desc",
) -> JsonResponse:
    """The key's files (OpenAI ``files.list``): newest first unless ``order=asc``, after the id ``after``.

    Raises:
        grpc.aio.AioRpcError: 400 ``invalid_pagination`` for an ``after`` that names no file of the key.

    """
    request = batch_pb2.ListFilesRequest(purpose=purpose or "", limit=limit, after=after or "", order=order)
    reply = await rpc.unary(rpc.clients.batches.ListFiles, request)
    return JsonResponse(list_object([file_object(file) for file in reply.data], reply))


@router.get("/v1/files/{file_id}", response_model=FileObject)
async def get_file(file_id: FileId, rpc: Rpc) -> JsonResponse:
    """One file's description (OpenAI ``files.retrieve``).

    Raises:
        grpc.aio.AioRpcError: 404 ``file_not_found`` (absent, deleted or another key's), 400
            ``invalid_file_id``.

    """
    reply = await rpc.unary(rpc.clients.batches.GetFile, batch_pb2.GetFileRequest(id=file_id))
    return JsonResponse(file_object(reply.file))


@router.delete("/v1/files/{file_id}", response_model=FileDeleted)
async def delete_file(file_id: FileId, rpc: Rpc) -> JsonResponse:
    """Delete a file (OpenAI ``files.delete``): ``{"id", "object": "file", "deleted": true}``.

    Raises:
        grpc.aio.AioRpcError: 404 ``file_not_found``, 400 ``invalid_file_id``.

    """
    reply = await rpc.unary(rpc.clients.batches.DeleteFile, batch_pb2.DeleteFileRequest(id=file_id))
    return JsonResponse({"id": reply.id, "object": "file", "deleted": reply.deleted})


@router.get("/v1/files/{file_id}/content", response_class=StreamingResponse, responses=_CONTENT_RESPONSE)
async def get_file_content(file_id: FileId, rpc: Rpc) -> StreamingResponse:
    """A file's bytes (OpenAI ``files.content``), streamed from the server's 1 MiB chunks.

    The first chunk is read before answering, so a missing file is a 404, not a broken stream;
    ``Content-Length`` is the file's size, so a stream cut later is seen as short by the client.

    Raises:
        grpc.aio.AioRpcError: 404 ``file_not_found``, 400 ``invalid_file_id``.

    """
    call = rpc.clients.batches.GetFileContent(
        batch_pb2.GetFileContentRequest(id=file_id), metadata=rpc.metadata
    )
    try:
        first = await call_until_disconnect(rpc.request, call, call.read())
    except BaseException:
        call.cancel()
        raise
    if first is grpc.aio.EOF:  # the server always sends the description first; an empty answer is broken
        raise GatewayError(502, "the server answered no file", code="bad_answer")
    await keep_rate_limit_headers(rpc.request, call)

    async def chunks() -> AsyncIterator[bytes]:
        # Bounded by the file's size: the server sends it in chunks of at most 1 MiB, then ends.
        try:
            data = first.data
            while True:
                if data:
                    yield data
                message = await call.read()
                if message is grpc.aio.EOF:
                    return
                data = message.data
        finally:
            call.cancel()  # no-op once the stream ended; stops the server's read when the client left

    headers = {"content-length": str(first.file.bytes)}
    return StreamingResponse(chunks(), media_type="application/octet-stream", headers=headers)
