"""``POST /v1/ocr``: a multipart upload or a JSON body with a base64 file, over the streaming ``Ocr``."""

from __future__ import annotations

import json
from typing import Any

import grpc
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from gateway.calls import Rpc
from gateway.errors import GatewayError, error_info_from_rpc_error
from gateway.schemas.ocr import OcrJsonRequest
from gateway.translate.ocr import decode_file, ocr_messages, ocr_result, to_ocr_options

router = APIRouter(tags=["ocr"])

# RESOURCE_EXHAUSTED reasons that mean "this input is too big" (HTTP 413), not "server busy" (429):
# sending it again fails the same way (PAGE_TOO_COMPLEX: a PDF page over ocr_page_timeout_s).
_TOO_LARGE_REASONS = {"FILE_TOO_LARGE", "IMAGE_TOO_LARGE", "TOO_MANY_PAGES", "PAGE_TOO_COMPLEX"}


async def _from_form(request: Request) -> tuple[bytes, OcrJsonRequest]:
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise GatewayError(400, "file: attach the image or PDF as the form field 'file'", code="invalid_file")
    data = await upload.read()
    fields: dict[str, Any] = {k: v for k, v in form.multi_items() if k not in ("file", "languages")}
    languages = [
        code.strip() for v in form.getlist("languages") for code in str(v).split(",") if code.strip()
    ]
    fields["mime_type"] = fields.get("mime_type") or (upload.content_type or "")
    if fields["mime_type"] == "application/octet-stream":
        fields["mime_type"] = ""
    try:
        body = OcrJsonRequest.model_validate({**fields, "file": "-", "languages": languages})
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    return data, body


async def _from_json(request: Request) -> tuple[bytes, OcrJsonRequest]:
    try:
        raw = json.loads(await request.body())
        body = OcrJsonRequest.model_validate(raw)
    except json.JSONDecodeError as exc:
        raise GatewayError(400, f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # json.loads gives up on thousands of nested levels
        raise GatewayError(400, "Request body is nested too deeply to parse", code="invalid_json") from None
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
    data, mime = decode_file(body.file)
    if mime and not body.mime_type:
        body.mime_type = mime
    return data, body


@router.post("/v1/ocr")
async def create_ocr(rpc: Rpc) -> dict[str, Any]:
    """Read text from an image or PDF; returns every page (see ``translate.ocr.ocr_result``).

    Takes ``multipart/form-data`` (the file as ``file``; other fields as in
    :class:`OcrJsonRequest`, ``languages`` repeated or comma-separated) or JSON with the file in
    base64 or a data URI. The file goes to the server in 1 MiB chunks.

    Raises:
        GatewayError: 400 for a missing or undecodable file; 413 when the server finds the file,
            a page (its pixels or its render time) or the page count over its limits.
        grpc.aio.AioRpcError: other server errors (see :mod:`gateway.errors`).

    """
    request = rpc.request
    content_type = request.headers.get("content-type", "")
    data, body = await (_from_form(request) if content_type.startswith("multipart/") else _from_json(request))
    try:
        pages = await rpc.collect(rpc.clients.inference.Ocr, ocr_messages(data, to_ocr_options(body)))
    except grpc.aio.AioRpcError as err:
        info = error_info_from_rpc_error(err)
        if (
            err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            and info is not None
            and info.reason in _TOO_LARGE_REASONS
        ):
            raise GatewayError(413, err.details() or "input too large", code=info.reason.lower()) from None
        raise
    return ocr_result(body.model, pages)
