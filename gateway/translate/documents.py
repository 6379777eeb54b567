"""Documents: request bodies to the upload messages of the document RPCs, their responses to JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from universal_runtime.v1 import documents_pb2 as pb

from gateway.errors import GatewayError
from gateway.schemas.documents import (
    DocumentAnalyzeRequest,
    DocumentAskRequest,
    DocumentClassifyRequest,
    DocumentExtractRequest,
    DocumentReadRequest,
)
from gateway.schemas.uploads import READ_OPTION_FIELDS
from gateway.translate.common import BodyFields, proto_json
from gateway.uploads import upload_messages

PAGE_SEPARATOR = "\n\n---\n\n"
"""Between the pages' Markdown in an analysis's ``markdown``."""

_BLOCK_TYPE_PREFIX = "BLOCK_TYPE_"

# The file goes in the messages after the options (``upload_messages``); the read options'
# fields go in ``document`` (``read_options``).
_READ = BodyFields(
    DocumentReadRequest,
    pb.DocumentReadOptions,
    ("ocr_model", "layout_model", *READ_OPTION_FIELDS),
    by_hand=("file", "keep_alive"),
)
_READ_FIELDS = tuple(DocumentReadRequest.model_fields)
_ASK = BodyFields(
    DocumentAskRequest,
    pb.AskDocumentOptions,
    ("question", "model", "embedding_model", "top_k", "max_tokens"),
    by_hand=_READ_FIELDS,
)
_EXTRACT = BodyFields(
    DocumentExtractRequest,
    pb.ExtractDocumentOptions,
    ("model", "max_tokens"),
    by_hand=(*_READ_FIELDS, "json_schema"),
)
_CLASSIFY = BodyFields(
    DocumentClassifyRequest, pb.ClassifyDocumentOptions, ("model", "candidate_labels"), by_hand=_READ_FIELDS
)


def read_options(body: DocumentReadRequest) -> pb.DocumentReadOptions:
    """Convert how the document is read (models, type, pages, languages, PDF) to ``DocumentReadOptions``."""
    return pb.DocumentReadOptions(**_READ.values(body), keep_alive=body.keep_alive_value)


def analyze_messages(body: DocumentAnalyzeRequest, data: bytes) -> Iterator[pb.AnalyzeDocumentRequest]:
    """The ``AnalyzeDocumentRequest`` messages: the options on the first, then the file in 1 MiB chunks."""
    options = pb.AnalyzeDocumentOptions(document=read_options(body), return_lines=body.return_lines)
    return upload_messages(pb.AnalyzeDocumentRequest, options, data)


def ask_messages(body: DocumentAskRequest, data: bytes) -> Iterator[pb.AskDocumentRequest]:
    """The ``AskDocumentRequest`` messages: the options on the first, then the file in 1 MiB chunks."""
    options = pb.AskDocumentOptions(
        document=read_options(body),
        **_ASK.values(body),
    )
    return upload_messages(pb.AskDocumentRequest, options, data)


def extract_messages(body: DocumentExtractRequest, data: bytes) -> Iterator[pb.ExtractDocumentRequest]:
    """The ``ExtractDocumentRequest`` messages (``json_schema`` sent as JSON text; none: empty)."""
    options = pb.ExtractDocumentOptions(
        document=read_options(body),
        json_schema=json.dumps(body.json_schema) if body.json_schema is not None else "",
        **_EXTRACT.values(body),
    )
    return upload_messages(pb.ExtractDocumentRequest, options, data)


def classify_messages(body: DocumentClassifyRequest, data: bytes) -> Iterator[pb.ClassifyDocumentRequest]:
    """The ``ClassifyDocumentRequest`` messages: the options on the first, then the file in 1 MiB chunks."""
    options = pb.ClassifyDocumentOptions(document=read_options(body), **_CLASSIFY.values(body))
    return upload_messages(pb.ClassifyDocumentRequest, options, data)


def block_type_name(block_type: int) -> str:
    """``BLOCK_TYPE_FIGURE_CAPTION`` -> ``"figure_caption"`` (``"unspecified"`` for 0 or an unknown value)."""
    try:
        name = pb.BlockType.Name(block_type)
    except ValueError:
        name = "BLOCK_TYPE_UNSPECIFIED"
    return name.removeprefix(_BLOCK_TYPE_PREFIX).lower()


def block_to_json(block: pb.DocumentBlock) -> dict[str, Any]:
    """One block: ``{type, text, box, confidence}``, plus ``table`` (a table) and ``lines`` (when asked)."""
    body = proto_json(block)
    body["type"] = block_type_name(block.type)
    if not block.HasField("table"):
        body.pop("table", None)
    if not block.lines:
        body.pop("lines", None)
    return body


def page_to_json(page: pb.AnalyzeDocumentResponse) -> dict[str, Any]:
    """One page: ``{page_number, width, height, markdown, ocr_engine, layout_engine, blocks}``."""
    return {
        "page_number": page.page_number,
        "width": page.width,
        "height": page.height,
        "markdown": page.markdown,
        "ocr_engine": page.ocr_engine,
        "layout_engine": page.layout_engine,
        "blocks": [block_to_json(block) for block in page.blocks],
    }


def analysis_result(model: str, pages: list[pb.AnalyzeDocumentResponse]) -> dict[str, Any]:
    """``{"object": "document.analysis", "model", "page_count", "markdown", "pages": [...]}``.

    ``model`` is the requested layout model (``""`` for the server's default); ``markdown`` is
    the pages' Markdown joined by :data:`PAGE_SEPARATOR`.
    """
    return {
        "object": "document.analysis",
        "model": model,
        "page_count": pages[0].page_count if pages else 0,
        "markdown": PAGE_SEPARATOR.join(page.markdown for page in pages),
        "pages": [page_to_json(page) for page in pages],
    }


def answer_result(response: pb.AskDocumentResponse) -> dict[str, Any]:
    """``{"object": "document.answer", "model", "answer", "score", "citations"}``.

    Each citation is ``{page_number, box: {x, y, width, height}, text}``, best first.
    """
    body = proto_json(response)
    return {
        "object": "document.answer",
        "model": body["model"],
        "answer": body["answer"],
        "score": body["score"],
        "citations": body["citations"],
    }


def _parse_json(text: str, what: str) -> Any:
    """Parse JSON the server sent (``None`` for an empty string).

    Raises:
        GatewayError: 502 ``invalid_server_response`` when it is not JSON.

    """
    if not text:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise GatewayError(
            502, f"the server sent {what} that is not valid JSON", code="invalid_server_response"
        ) from None


def extraction_result(response: pb.ExtractDocumentResponse) -> dict[str, Any]:
    """``{"object": "document.extraction", "model", "data", "fields"}``.

    Each field is ``{name, value, confidence, citations}``.

    ``data`` is the extracted object and each ``value`` the field's value, parsed from the JSON
    the server sent.

    Raises:
        GatewayError: 502 when the server's JSON does not parse.

    """
    fields = []
    for field, message in zip(proto_json(response)["fields"], response.fields, strict=True):
        value = _parse_json(message.value_json, f"a value of {message.name!r}")
        fields.append(
            {
                "name": field["name"],
                "value": value,
                "confidence": field["confidence"],
                "citations": field["citations"],
            }
        )
    return {
        "object": "document.extraction",
        "model": response.model,
        "data": _parse_json(response.json, "an extraction"),
        "fields": fields,
    }


def classification_result(response: pb.ClassifyDocumentResponse) -> dict[str, Any]:
    """``{"object": "document.classification", "model", "labels": [{label, score}]}``, best first."""
    labels = proto_json(response)["labels"]
    return {"object": "document.classification", "model": response.model, "labels": labels}
