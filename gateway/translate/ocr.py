"""OCR: uploads to ``OcrRequest`` messages, ``OcrResponse`` pages to JSON."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from typing import Any

from universal_runtime.v1 import ocr_pb2

from gateway.errors import GatewayError
from gateway.schemas.ocr import OcrJsonRequest
from gateway.translate.common import proto_json, set_fields

CHUNK_BYTES = 1024 * 1024
"""Bytes per OcrRequest message: far under any gRPC message limit, however large the file."""

# Body fields copied as they are into the same-named OcrOptions fields.
_OPTION_FIELDS = (
    "model",
    "mime_type",
    "first_page",
    "last_page",
    "languages",
    "return_boxes",
    "use_pdf_text_layer",
    "pdf_dpi",
)

_DATA_URI = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[^,]*)?;base64,", re.IGNORECASE)


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


def to_ocr_options(body: OcrJsonRequest) -> ocr_pb2.OcrOptions:
    """Convert the request's fields (JSON or form) to ``OcrOptions``."""
    return ocr_pb2.OcrOptions(**set_fields(body, *_OPTION_FIELDS), keep_alive=body.keep_alive_value)


def ocr_messages(data: bytes, options: ocr_pb2.OcrOptions) -> Iterator[ocr_pb2.OcrRequest]:
    """The options on the first message, then the file in ``CHUNK_BYTES`` chunks."""
    yield ocr_pb2.OcrRequest(options=options, chunk=data[:CHUNK_BYTES])
    for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
        yield ocr_pb2.OcrRequest(chunk=data[start : start + CHUNK_BYTES])


def page_to_json(page: ocr_pb2.OcrResponse) -> dict[str, Any]:
    """One page as JSON (proto field names; lines only when boxes were asked for)."""
    body = proto_json(page)
    if not page.lines:
        body.pop("lines", None)
    return body


def ocr_result(model: str, pages: list[ocr_pb2.OcrResponse]) -> dict[str, Any]:
    """``{"object": "ocr.result", "model", "page_count", "text", "pages": [...]}``."""
    return {
        "object": "ocr.result",
        "model": model,
        "page_count": pages[0].page_count if pages else 0,
        "text": "\n\n".join(p.text for p in pages),
        "pages": [page_to_json(p) for p in pages],
    }
