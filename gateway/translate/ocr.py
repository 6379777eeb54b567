"""OCR: uploads to ``OcrRequest`` messages, ``OcrResponse`` pages to JSON."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from universal_runtime.v1 import ocr_pb2

from gateway.schemas.ocr import OcrJsonRequest
from gateway.schemas.uploads import READ_OPTION_FIELDS
from gateway.translate.common import BodyFields, proto_json
from gateway.uploads import upload_messages

# The file goes in the messages after the options (``ocr_messages``).
_OPTIONS = BodyFields(
    OcrJsonRequest,
    ocr_pb2.OcrOptions,
    ("model", "return_boxes", *READ_OPTION_FIELDS),
    by_hand=("file", "keep_alive"),
)


def to_ocr_options(body: OcrJsonRequest) -> ocr_pb2.OcrOptions:
    """Convert the request's fields (JSON or form) to ``OcrOptions``."""
    return ocr_pb2.OcrOptions(**_OPTIONS.values(body), keep_alive=body.keep_alive_value)


def ocr_messages(data: bytes, options: ocr_pb2.OcrOptions) -> Iterator[ocr_pb2.OcrRequest]:
    """The options on the first message, then the file in 1 MiB chunks (see ``upload_messages``)."""
    return upload_messages(ocr_pb2.OcrRequest, options, data)


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
