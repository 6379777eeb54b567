"""``POST /v1/ocr``: a multipart upload or a JSON body with a base64 file, over the streaming ``Ocr``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.calls import CallSite, Rpc
from gateway.json_body import off_loop_if_large
from gateway.responses import JsonResponse
from gateway.schemas.ocr import OcrJsonRequest
from gateway.translate.ocr import ocr_messages, ocr_result, to_ocr_options
from gateway.uploads import read_upload, too_large_as_413, upload_openapi

router = APIRouter(tags=["ocr"])


# The answer is returned already encoded (gateway.responses); response_model documents its type.
@router.post("/v1/ocr", response_model=dict[str, Any], openapi_extra=upload_openapi(OcrJsonRequest))
async def create_ocr(rpc: Rpc) -> JsonResponse:
    """Read text from an image or PDF; returns every page (see ``translate.ocr.ocr_result``).

    Takes ``multipart/form-data`` (the file as ``file``; other fields as in
    :class:`OcrJsonRequest`, ``languages`` repeated or comma-separated) or JSON with the file in
    base64 or a data URI (:func:`gateway.uploads.read_upload`). The file goes to the server in
    1 MiB chunks.

    Raises:
        GatewayError: 400 for a missing or undecodable file; 413 when the server finds the file,
            a page (its pixels or its render time) or the page count over its limits.
        grpc.aio.AioRpcError: other server errors (see :mod:`gateway.errors`).

    """
    data, body = await read_upload(rpc.request, OcrJsonRequest)
    return await answer_ocr(rpc, data, body)


async def answer_ocr(site: CallSite, data: bytes, body: OcrJsonRequest) -> JsonResponse:
    """The answer of :func:`create_ocr` for the file ``data`` read with ``body``, calls made at ``site``.

    Raises:
        GatewayError: 413 when the server finds the file, a page or the page count over its
            limits; the site's own bound (499: the HTTP client left).
        grpc.aio.AioRpcError: other server errors (see :mod:`gateway.errors`).

    """
    with too_large_as_413():
        pages = await site.collect(site.clients.inference.Ocr, ocr_messages(data, to_ocr_options(body)))
    # Many pages of lines and word boxes are a large answer: built off the event loop then.
    size = sum(page.ByteSize() for page in pages)
    return await off_loop_if_large(size, lambda: JsonResponse(ocr_result(body.model, pages)))
