"""File uploads shared by ``POST /v1/ocr`` and ``POST /v1/documents/*``.

A route reads its body with :func:`read_upload` (a multipart form with the file as ``file``, or
JSON with the file in base64 or a data URI), sends the file to the server's client-streaming RPC
as :func:`upload_messages` (the options on the first message, then 1 MiB chunks), and makes the
call inside :func:`too_large_as_413`, so an input over the server's limits answers 413.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import grpc
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import FormData, UploadFile

from engines.reasons import REASONS
from gateway.errors import GatewayError, error_info_from_rpc_error
from gateway.json_body import object_key_limit, off_loop_if_large, parse_body
from gateway.schemas.uploads import FileUploadRequest

CHUNK_BYTES = 1024 * 1024
"""Bytes per request message of an upload: far under any gRPC message limit, however large the file."""

TOO_LARGE_REASONS = frozenset(
    reason
    for reason, spec in REASONS.items()
    if spec.grpc_code == "RESOURCE_EXHAUSTED" and spec.http_status == 413
)
"""RESOURCE_EXHAUSTED reasons that mean "this input is too big" (HTTP 413), not "server busy" (429):
sending it again fails the same way (FILE_TOO_LARGE, IMAGE_TOO_LARGE, TOO_MANY_PAGES; PAGE_TOO_COMPLEX:
a PDF page over ocr_page_timeout_s). Read from :data:`engines.reasons.REASONS`."""

_DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[^,]*)?;base64,", re.IGNORECASE)

Body = TypeVar("Body", bound=FileUploadRequest)
Message = TypeVar("Message")


def decode_file(value: str) -> tuple[bytes, str]:
    """Decode a base64 string or a ``data:<mime>;base64,`` URI into ``(bytes, mime_type or "")``.

    Raises:
        GatewayError: 400 ``invalid_file`` when the text is not valid base64.

    """
    mime = ""
    match = _DATA_URI.match(value)
    if match:
        mime = (match.group("mime") or "").lower()
        value = value[match.end() :]
    try:
        return base64.b64decode(value, validate=True), mime
    except (binascii.Error, ValueError):
        raise GatewayError(
            400, "file: not valid base64 (or a data: URI with base64)", code="invalid_file", param="file"
        ) from None


def _bare_type(annotation: Any) -> Any:
    """The container type of a field annotation, for reading a form.

    ``list`` for ``list[str]``, ``dict`` for ``JsonObject | None``; the annotation itself for
    anything else.
    """
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return origin or annotation


def _form_fields(form: FormData, schema: type[FileUploadRequest]) -> dict[str, Any]:
    """The form's fields other than ``file`` as the body's values.

    List fields (``languages``, ``candidate_labels``) are repeated or comma-separated; object
    fields (``json_schema``) are JSON text, parsed here (text that does not parse is left for the
    schema to reject); other fields are taken as they are (the last one when repeated).
    """
    fields: dict[str, Any] = {}
    for name, value in form.multi_items():
        if name == "file":
            continue
        info = schema.model_fields.get(name)
        kind = _bare_type(info.annotation) if info is not None else None
        if kind is list:
            fields.setdefault(name, []).extend(item.strip() for item in str(value).split(",") if item.strip())
        elif kind is dict and isinstance(value, str):
            try:
                fields[name] = json.loads(value)
            except (json.JSONDecodeError, RecursionError):
                fields[name] = value
        else:
            fields[name] = value
    return fields


async def _from_form(request: Request, schema: type[Body]) -> tuple[bytes, Body]:
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise GatewayError(400, "file: attach the image or PDF as the form field 'file'", code="invalid_file")
    data = await upload.read()
    fields = _form_fields(form, schema)
    fields["mime_type"] = fields.get("mime_type") or (upload.content_type or "")
    if fields["mime_type"] == "application/octet-stream":
        fields["mime_type"] = ""
    try:
        body = schema.model_validate({**fields, "file": "-"})
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    return data, body


def parse_json_upload(schema: type[Body], raw: bytes, max_object_keys: int) -> tuple[bytes, Body]:
    """A JSON upload body's ``(file bytes, body)``: parsed as ``schema``, its ``file`` decoded.

    ``file`` is base64 or a data URI, whose type becomes ``mime_type`` unless one is given.

    Raises:
        GatewayError: 400 ``invalid_json`` (:func:`gateway.json_body.decode_json`); 400
            ``invalid_file`` for a file that is not base64.
        RequestValidationError: fields that ``schema`` rejects.

    """
    body = parse_body(schema, raw, max_object_keys)
    data, mime = decode_file(body.file)
    if mime and not body.mime_type:
        body.mime_type = mime
    return data, body


async def _from_json(request: Request, schema: type[Body]) -> tuple[bytes, Body]:
    # Parsed, checked and base64-decoded like every JSON body: off the event loop when large.
    raw = await request.body()
    return await off_loop_if_large(len(raw), parse_json_upload, schema, raw, object_key_limit(request))


async def read_upload(request: Request, schema: type[Body]) -> tuple[bytes, Body]:
    """Read an upload request into ``(file bytes, body)``, ``body`` an instance of ``schema``.

    ``multipart/form-data``: the file is the form field ``file`` (its content type is the
    ``mime_type`` unless one is given or it is ``application/octet-stream``), the other fields
    are read as described in :func:`_form_fields`, and ``body.file`` is a placeholder. Any other
    content type is read as JSON with ``file`` in base64 or a data URI (whose type becomes
    ``mime_type`` unless one is given).

    Raises:
        GatewayError: 400 ``invalid_file`` for a form without a file part or a file that is not
            base64; 400 ``invalid_json`` for a body that is not JSON
            (:func:`gateway.json_body.decode_json`).
        RequestValidationError: fields that ``schema`` rejects (rendered as 400 by
            :mod:`gateway.errors`).

    """
    if request.headers.get("content-type", "").startswith("multipart/"):
        return await _from_form(request, schema)
    return await _from_json(request, schema)


def upload_messages(message_type: Callable[..., Message], options: Any, data: bytes) -> Iterator[Message]:
    """The messages of an upload RPC: ``options`` and the first chunk, then ``CHUNK_BYTES`` chunks.

    Args:
        message_type: The request message class, e.g. ``ocr_pb2.OcrRequest``.
        options: The options message, sent on the first message only.
        data: The file; an empty file still sends one message (the options).

    """
    yield message_type(options=options, chunk=data[:CHUNK_BYTES])
    for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
        yield message_type(chunk=data[start : start + CHUNK_BYTES])


@contextmanager
def resource_reasons_as(status_code: int, reasons: frozenset[str]) -> Iterator[None]:
    """Turn a failed call's RESOURCE_EXHAUSTED with a reason in ``reasons`` into ``status_code``.

    For RESOURCE_EXHAUSTED that retrying cannot fix: :mod:`gateway.errors` answers 429 for it,
    which clients retry.

    Raises:
        GatewayError: ``status_code`` with the server's message and its reason lowercased as ``code``.
        grpc.aio.AioRpcError: every other failure, unchanged.

    """
    try:
        yield
    except grpc.aio.AioRpcError as err:
        info = error_info_from_rpc_error(err)
        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and info is not None and info.reason in reasons:
            raise GatewayError(status_code, err.details() or info.reason, code=info.reason.lower()) from None
        raise


def too_large_as_413() -> AbstractContextManager[None]:
    """:func:`resource_reasons_as` 413 for :data:`TOO_LARGE_REASONS` (an input too big)."""
    return resource_reasons_as(413, TOO_LARGE_REASONS)


def upload_openapi(schema: type[FileUploadRequest]) -> dict[str, Any]:
    """``openapi_extra`` of an upload route: its request body as JSON and as ``multipart/form-data``.

    The JSON body is ``schema``'s JSON Schema; the form is the same with ``file`` as binary and
    object fields as JSON text. ``schema`` must not nest other models (the schemas are inlined).
    """
    json_schema = schema.model_json_schema()
    properties = dict(json_schema["properties"])
    properties["file"] = {"type": "string", "format": "binary", "description": "The image or PDF."}
    for name, info in schema.model_fields.items():
        if _bare_type(info.annotation) is dict:
            properties[name] = {"type": "string", "description": f"{name} as JSON text."}
    form_schema = {**json_schema, "properties": properties}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": json_schema},
                "multipart/form-data": {"schema": form_schema},
            },
        }
    }
