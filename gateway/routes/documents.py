"""``POST /v1/documents/{analyze,ask,extract,classify}``: uploads over the document RPCs.

Every route takes ``multipart/form-data`` (the file as ``file``) or JSON with the file in base64
or a data URI (:func:`gateway.uploads.read_upload`); the file goes to the server in 1 MiB chunks.
Errors, for every route:

* 400: a missing or undecodable file, a field out of range or missing (the gateway's checks), or
  the server's INVALID_ARGUMENT (an unreadable file, a model that cannot do the task).
* 404: an unknown model.
* 413: the file, a page (its pixels or render time) or the page count over the server's limits.
* 429: the model's queue is full (``Retry-After``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fastapi import APIRouter
from google.protobuf.message import Message
from universal_runtime.v1.inference_service_pb2_grpc import InferenceServiceStub

from gateway.calls import CallSite, Rpc
from gateway.json_body import off_loop_if_large
from gateway.responses import JsonResponse
from gateway.schemas.documents import (
    DocumentAnalysis,
    DocumentAnalyzeRequest,
    DocumentAnswer,
    DocumentAskRequest,
    DocumentClassification,
    DocumentClassifyRequest,
    DocumentExtraction,
    DocumentExtractRequest,
)
from gateway.translate.documents import (
    analysis_result,
    analyze_messages,
    answer_result,
    ask_messages,
    classification_result,
    classify_messages,
    extract_messages,
    extraction_result,
)
from gateway.uploads import read_upload, too_large_as_413, upload_openapi

router = APIRouter(tags=["documents"])

# The response models document the answers; the routes return them already encoded (gateway.responses).

UploadBody = TypeVar("UploadBody", DocumentAskRequest, DocumentExtractRequest, DocumentClassifyRequest)
Response = TypeVar("Response", bound=Message)


async def _unary_document(
    site: CallSite,
    data: bytes,
    body: UploadBody,
    method: Callable[[InferenceServiceStub], Callable[..., Any]],
    messages: Callable[[UploadBody, bytes], Iterator[Message]],
    result: Callable[[Response], dict[str, Any]],
) -> JsonResponse:
    """Answer ``result`` of the unary document RPC ``method`` for the file ``data`` read with ``body``.

    The call goes to the stub serving ``body.model`` (model-affinity routing), with ``messages``:
    the options, then the file in chunks.

    Raises:
        GatewayError: 413 for an input over the limits; the site's own bound (499: the HTTP
            client left).
        grpc.aio.AioRpcError: other server errors (see :mod:`gateway.errors`).

    """
    site = site.for_model(body.model)
    with too_large_as_413():
        response = await site.unary(method(site.clients.inference), messages(body, data))
    return JsonResponse(result(response))


async def answer_analyze(site: CallSite, data: bytes, body: DocumentAnalyzeRequest) -> JsonResponse:
    """The answer of :func:`analyze_document` for the file ``data`` read with ``body``, at ``site``.

    Raises:
        GatewayError: 413 for an input over the limits; the site's own bound (499).
        grpc.aio.AioRpcError: other server errors (see :mod:`gateway.errors`).

    """
    site = site.for_model(body.layout_model)
    with too_large_as_413():
        pages = await site.collect(site.clients.inference.AnalyzeDocument, analyze_messages(body, data))
    # Many pages of blocks and lines are a large answer: built off the event loop then.
    size = sum(page.ByteSize() for page in pages)
    return await off_loop_if_large(size, lambda: JsonResponse(analysis_result(body.layout_model, pages)))


async def answer_ask(site: CallSite, data: bytes, body: DocumentAskRequest) -> JsonResponse:
    """The answer of :func:`ask_document` (the errors of :func:`_unary_document`)."""
    return await _unary_document(site, data, body, lambda stub: stub.AskDocument, ask_messages, answer_result)


async def answer_extract(site: CallSite, data: bytes, body: DocumentExtractRequest) -> JsonResponse:
    """The answer of :func:`extract_document`.

    Raises:
        GatewayError: 502 when the server's JSON does not parse; the errors of :func:`_unary_document`.

    """
    return await _unary_document(
        site, data, body, lambda stub: stub.ExtractDocument, extract_messages, extraction_result
    )


async def answer_classify(site: CallSite, data: bytes, body: DocumentClassifyRequest) -> JsonResponse:
    """The answer of :func:`classify_document` (the errors of :func:`_unary_document`)."""
    return await _unary_document(
        site, data, body, lambda stub: stub.ClassifyDocument, classify_messages, classification_result
    )


@router.post(
    "/v1/documents/analyze",
    response_model=DocumentAnalysis,
    openapi_extra=upload_openapi(DocumentAnalyzeRequest),
)
async def analyze_document(rpc: Rpc) -> JsonResponse:
    """Read every page as blocks in reading order (titles, text, tables with cells...) and Markdown.

    Fields as in :class:`DocumentAnalyzeRequest`; returns
    ``{"object": "document.analysis", "model", "page_count", "markdown", "pages": [...]}``
    (:func:`gateway.translate.documents.analysis_result`).

    Raises:
        GatewayError: 400 for a missing or undecodable file; 413 for an input over the limits.
        grpc.aio.AioRpcError: other server errors (see :mod:`gateway.errors`).

    """
    data, body = await read_upload(rpc.request, DocumentAnalyzeRequest)
    return await answer_analyze(rpc, data, body)


@router.post(
    "/v1/documents/ask",
    response_model=DocumentAnswer,
    openapi_extra=upload_openapi(DocumentAskRequest),
)
async def ask_document(rpc: Rpc) -> JsonResponse:
    """Answer a question from the document, with the places the answer was found.

    Fields as in :class:`DocumentAskRequest` (``question`` required); returns
    ``{"object": "document.answer", "model", "answer", "score", "citations": [...]}``.

    Raises:
        GatewayError: 400 for a missing or undecodable file; the errors of :func:`_unary_document`.

    """
    data, body = await read_upload(rpc.request, DocumentAskRequest)
    return await answer_ask(rpc, data, body)


@router.post(
    "/v1/documents/extract",
    response_model=DocumentExtraction,
    openapi_extra=upload_openapi(DocumentExtractRequest),
)
async def extract_document(rpc: Rpc) -> JsonResponse:
    """Extract fields (an object following ``json_schema``, or a model's own labels) with their sources.

    Fields as in :class:`DocumentExtractRequest`; returns
    ``{"object": "document.extraction", "model", "data", "fields": [...]}``.

    Raises:
        GatewayError: 400 for a missing or undecodable file; 502 when the server's JSON does not
            parse; the errors of :func:`_unary_document`.

    """
    data, body = await read_upload(rpc.request, DocumentExtractRequest)
    return await answer_extract(rpc, data, body)


@router.post(
    "/v1/documents/classify",
    response_model=DocumentClassification,
    openapi_extra=upload_openapi(DocumentClassifyRequest),
)
async def classify_document(rpc: Rpc) -> JsonResponse:
    """Classify the document: a classification model's classes, or ``candidate_labels`` zero-shot.

    Fields as in :class:`DocumentClassifyRequest`; returns
    ``{"object": "document.classification", "model", "labels": [{label, score}]}``, best first.

    Raises:
        GatewayError: 400 for a missing or undecodable file; the errors of :func:`_unary_document`.

    """
    data, body = await read_upload(rpc.request, DocumentClassifyRequest)
    return await answer_classify(rpc, data, body)
