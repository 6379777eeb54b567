"""``POST /v1/documents/*`` against the fake gRPC server: uploads, options, JSON answers, errors."""

from __future__ import annotations

import base64
import json
import os

import grpc
import pytest
from universal_runtime.v1 import documents_pb2

from gateway.schemas.documents import (
    DocumentAnalysis,
    DocumentAnswer,
    DocumentClassification,
    DocumentExtraction,
)
from gateway.uploads import CHUNK_BYTES
from tests.gateway.gateway_fakes import RpcFailure

S = grpc.StatusCode

# Over two chunks, so the split (1 MiB, 1 MiB, rest) is seen.
FILE = os.urandom(2 * CHUNK_BYTES + 12345)
SMALL = b"%PDF-1.7 not really a pdf"
SMALL_B64 = base64.b64encode(SMALL).decode()

ROUTES = {
    "/v1/documents/analyze": ("AnalyzeDocument", {}),
    "/v1/documents/ask": ("AskDocument", {"question": "What is the total?"}),
    "/v1/documents/extract": ("ExtractDocument", {}),
    "/v1/documents/classify": ("ClassifyDocument", {"candidate_labels": ["invoice", "letter"]}),
}
RESPONSE_MODELS = {
    "/v1/documents/analyze": DocumentAnalysis,
    "/v1/documents/ask": DocumentAnswer,
    "/v1/documents/extract": DocumentExtraction,
    "/v1/documents/classify": DocumentClassification,
}


def received_upload(fake, method: str):
    """The first request message of the one upload the fake saw (it carries the options)."""
    [call] = fake.inference.received
    assert call.method == method
    return call.request


def assert_chunks(fake, data: bytes) -> None:
    chunks = fake.inference.upload_chunks
    assert b"".join(chunks) == data
    assert all(len(chunk) <= CHUNK_BYTES for chunk in chunks)
    assert all(len(chunk) == CHUNK_BYTES for chunk in chunks[:-1])


async def test_analyze_multipart_sends_chunks_and_options(client, fake):
    response = await client.post(
        "/v1/documents/analyze",
        files={"file": ("scan.pdf", FILE, "application/pdf")},
        data={
            "ocr_model": "tesseract",
            "layout_model": "rapid-layout",
            "languages": ["en,de", "fr"],
            "first_page": "2",
            "last_page": "3",
            "use_pdf_text_layer": "true",
            "pdf_dpi": "150",
            "keep_alive": "5m",
            "return_lines": "true",
        },
    )
    assert response.status_code == 200, response.text
    assert len(fake.inference.upload_chunks) == 3
    assert_chunks(fake, FILE)
    first = received_upload(fake, "AnalyzeDocument")
    assert first.options.return_lines
    document = first.options.document
    assert (document.ocr_model, document.layout_model, document.mime_type) == (
        "tesseract",
        "rapid-layout",
        "application/pdf",
    )
    assert list(document.languages) == ["en", "de", "fr"]
    assert (document.first_page, document.last_page, document.pdf_dpi) == (2, 3, 150)
    assert document.use_pdf_text_layer and document.keep_alive == "5m"


async def test_analyze_json_data_uri_sends_the_same_bytes(client, fake):
    uri = "data:application/pdf;base64," + base64.b64encode(FILE).decode()
    response = await client.post("/v1/documents/analyze", json={"file": uri, "keep_alive": 60})
    assert response.status_code == 200, response.text
    assert_chunks(fake, FILE)
    document = received_upload(fake, "AnalyzeDocument").options.document
    assert document.mime_type == "application/pdf" and document.keep_alive == "60s"
    assert (document.ocr_model, document.layout_model, document.first_page) == ("", "", 0)


async def test_analyze_translates_pages_and_blocks(client, fake):
    response = await client.post("/v1/documents/analyze", json={"file": SMALL_B64, "layout_model": "rl"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "document.analysis" and body["model"] == "rl"
    assert body["page_count"] == 2
    assert body["markdown"] == "# Invoice\n\nBody text.\n\n---\n\nPage two."
    first, second = body["pages"]
    assert {key: first[key] for key in ("page_number", "width", "height", "ocr_engine", "layout_engine")} == {
        "page_number": 1,
        "width": 800,
        "height": 1000,
        "ocr_engine": "rapidocr",
        "layout_engine": "rapid_layout",
    }
    assert first["markdown"] == "# Invoice\n\nBody text."
    title, text, table = first["blocks"]
    assert [title["type"], text["type"], table["type"]] == ["title", "text", "table"]
    assert second["blocks"][0]["type"] == "page_footer"
    assert title == {
        "type": "title",
        "text": "Invoice",
        "box": {"x": 10.0, "y": 10.0, "width": 100.0, "height": 20.0},
        "confidence": 0.75,
    }
    assert text["lines"][0]["text"] == "Body text." and text["lines"][0]["confidence"] == 0.5
    assert "lines" not in table and "table" not in text
    assert table["table"]["row_count"] == 2 and table["table"]["column_count"] == 2
    assert [cell["text"] for cell in table["table"]["cells"]] == ["r0c0", "r0c1", "r1c0", "r1c1"]
    assert table["table"]["cells"][3] == {
        "row": 1,
        "column": 1,
        "row_span": 1,
        "column_span": 1,
        "text": "r1c1",
        "box": {"x": 0.0, "y": 0.0, "width": 5.0, "height": 5.0},
    }


async def test_ask_json(client, fake):
    response = await client.post(
        "/v1/documents/ask",
        json={
            "file": SMALL_B64,
            "question": "  What is the total?  ",
            "model": "fake-llm",
            "embedding_model": "fake-embedder",
            "top_k": 16,
            "max_tokens": 512,
            "ocr_model": "rapidocr",
        },
    )
    assert response.status_code == 200, response.text
    assert_chunks(fake, SMALL)
    options = received_upload(fake, "AskDocument").options
    assert (options.question, options.model, options.embedding_model) == (
        "What is the total?",
        "fake-llm",
        "fake-embedder",
    )
    assert (options.top_k, options.max_tokens, options.document.ocr_model) == (16, 512, "rapidocr")
    assert response.json() == {
        "object": "document.answer",
        "model": "fake-llm",
        "answer": "42.00 EUR",
        "score": 0.75,
        "citations": [
            {
                "page_number": 1,
                "box": {"x": 10.0, "y": 20.0, "width": 30.0, "height": 8.0},
                "text": "42.00 EUR",
            }
        ],
    }


async def test_ask_multipart(client, fake):
    response = await client.post(
        "/v1/documents/ask",
        files={"file": ("page.png", FILE, "application/octet-stream")},
        data={"question": "Who?", "top_k": "3"},
    )
    assert response.status_code == 200, response.text
    assert_chunks(fake, FILE)
    options = received_upload(fake, "AskDocument").options
    assert (options.question, options.top_k, options.document.mime_type) == ("Who?", 3, "")


SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}, "vendor": {"type": "string"}}}


async def test_extract_json(client, fake):
    response = await client.post(
        "/v1/documents/extract",
        json={"file": SMALL_B64, "json_schema": SCHEMA, "model": "fake-llm", "max_tokens": 1024},
    )
    assert response.status_code == 200, response.text
    options = received_upload(fake, "ExtractDocument").options
    assert json.loads(options.json_schema) == SCHEMA
    assert (options.model, options.max_tokens) == ("fake-llm", 1024)
    body = response.json()
    assert body["object"] == "document.extraction" and body["model"] == "fake-llm"
    assert body["data"] == {"total": 42.0, "vendor": "ACME", "paid": None}
    total, vendor, paid = body["fields"]
    assert total == {
        "name": "total",
        "value": 42.0,
        "confidence": 1.0,
        "citations": [
            {"page_number": 1, "box": {"x": 10.0, "y": 20.0, "width": 30.0, "height": 8.0}, "text": "42.00"}
        ],
    }
    assert (vendor["value"], vendor["citations"], paid["value"]) == ("ACME", [], None)


async def test_extract_multipart_takes_the_schema_as_json_text(client, fake):
    response = await client.post(
        "/v1/documents/extract",
        files={"file": ("doc.pdf", SMALL, "application/pdf")},
        data={"json_schema": json.dumps(SCHEMA)},
    )
    assert response.status_code == 200, response.text
    assert json.loads(received_upload(fake, "ExtractDocument").options.json_schema) == SCHEMA


async def test_extract_without_schema_sends_none(client, fake):
    response = await client.post("/v1/documents/extract", json={"file": SMALL_B64, "model": "layoutlm"})
    assert response.status_code == 200, response.text
    assert received_upload(fake, "ExtractDocument").options.json_schema == ""


async def test_extract_bad_json_from_the_server_is_502(client, fake):
    fake.inference.extract_response = documents_pb2.ExtractDocumentResponse(json="{not json", model="m")
    response = await client.post("/v1/documents/extract", json={"file": SMALL_B64})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "invalid_server_response"


@pytest.mark.parametrize(
    "send",
    [
        {"data": {"candidate_labels": ["invoice, letter", "receipt"]}},
        {"data": {"candidate_labels": "invoice,letter,receipt"}},
        {"json": ["invoice", "letter", "receipt"]},
    ],
)
async def test_classify_labels_from_form_or_json(client, fake, send):
    if "json" in send:
        response = await client.post(
            "/v1/documents/classify",
            json={"file": SMALL_B64, "candidate_labels": send["json"], "model": "fake-embedder"},
        )
    else:
        response = await client.post(
            "/v1/documents/classify",
            files={"file": ("doc.pdf", SMALL, "application/pdf")},
            data={**send["data"], "model": "fake-embedder"},
        )
    assert response.status_code == 200, response.text
    options = received_upload(fake, "ClassifyDocument").options
    assert list(options.candidate_labels) == ["invoice", "letter", "receipt"]
    assert options.model == "fake-embedder"
    assert response.json() == {
        "object": "document.classification",
        "model": "fake-embedder",
        "labels": [{"label": "invoice", "score": 0.75}, {"label": "letter", "score": 0.25}],
    }


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/documents/ask", {"file": SMALL_B64}, "question"),
        ("/v1/documents/ask", {"file": SMALL_B64, "question": "   "}, "question"),
        ("/v1/documents/ask", {"file": SMALL_B64, "question": "q" * 2001}, "question"),
        ("/v1/documents/ask", {"file": SMALL_B64, "question": "q", "top_k": 17}, "top_k"),
        ("/v1/documents/ask", {"file": SMALL_B64, "question": "q", "top_k": -1}, "top_k"),
        ("/v1/documents/ask", {"file": SMALL_B64, "question": "q", "max_tokens": 513}, "max_tokens"),
        ("/v1/documents/extract", {"file": SMALL_B64, "max_tokens": 1025}, "max_tokens"),
        ("/v1/documents/extract", {"file": SMALL_B64, "json_schema": [1, 2]}, "json_schema"),
        ("/v1/documents/extract", {"file": SMALL_B64, "json_schema": "{}"}, "json_schema"),
        ("/v1/documents/extract", {"file": SMALL_B64, "json_schema": {"type": "string"}}, "json_schema"),
        (
            "/v1/documents/classify",
            {"file": SMALL_B64, "candidate_labels": [f"l{i}" for i in range(65)]},
            "candidate_labels",
        ),
        ("/v1/documents/classify", {"file": SMALL_B64, "candidate_labels": ["a", "a"]}, "candidate_labels"),
        (
            "/v1/documents/classify",
            {"file": SMALL_B64, "candidate_labels": ["a", " "]},
            "candidate_labels[1]",
        ),
        ("/v1/documents/analyze", {"file": SMALL_B64, "first_page": -1}, "first_page"),
        ("/v1/documents/analyze", {}, "file"),
    ],
)
async def test_bad_fields_are_refused_before_the_server(client, fake, path, body, param):
    # Validation errors answer 400 on every route (gateway.errors: as OpenAI does, not FastAPI's 422).
    response = await client.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert fake.inference.received == []


async def test_bad_form_fields_are_refused(client, fake):
    bad_schema = await client.post(
        "/v1/documents/extract",
        files={"file": ("doc.pdf", SMALL, "application/pdf")},
        data={"json_schema": "{not json"},
    )
    assert bad_schema.status_code == 400 and bad_schema.json()["error"]["param"] == "json_schema"
    no_question = await client.post(
        "/v1/documents/ask", files={"file": ("doc.pdf", SMALL, "application/pdf")}
    )
    assert no_question.status_code == 400
    assert no_question.json()["error"]["code"] == "missing_required_parameter"
    assert fake.inference.received == []


@pytest.mark.parametrize("path", sorted(ROUTES))
async def test_missing_or_undecodable_file_is_400(client, fake, path):
    extra = ROUTES[path][1]
    no_file = await client.post(path, data={"model": "m"}, files={"other": ("x", b"1")})
    assert no_file.status_code == 400 and no_file.json()["error"]["code"] == "invalid_file"
    bad_base64 = await client.post(path, json={"file": "%%% not base64", **extra})
    assert bad_base64.status_code == 400
    assert bad_base64.json()["error"] == {
        "message": "file: not valid base64 (or a data: URI with base64)",
        "type": "invalid_request_error",
        "param": "file",
        "code": "invalid_file",
    }
    not_json = await client.post(path, content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_json"
    assert fake.inference.received == []


@pytest.mark.parametrize("path", sorted(ROUTES))
@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (RpcFailure(S.RESOURCE_EXHAUSTED, "file over 50 MiB", "FILE_TOO_LARGE"), 413, "file_too_large"),
        (RpcFailure(S.RESOURCE_EXHAUSTED, "over 20 pages", "TOO_MANY_PAGES"), 413, "too_many_pages"),
        (RpcFailure(S.RESOURCE_EXHAUSTED, "queue full", "OVERLOADED"), 429, "overloaded"),
        (
            RpcFailure(S.INVALID_ARGUMENT, "not an image or PDF", "CORRUPT_FILE", {"field": "chunk"}),
            400,
            "corrupt_file",
        ),
        (
            RpcFailure(S.NOT_FOUND, "model 'nope' is not in the catalog", "MODEL_NOT_FOUND"),
            404,
            "model_not_found",
        ),
    ],
)
async def test_server_errors(client, fake, path, failure, status, code):
    fake.inference.fail = failure
    response = await client.post(path, json={"file": SMALL_B64, **ROUTES[path][1]})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"] == failure.message
    assert ("retry-after" in response.headers) == (status == 429)
    assert fake.inference.received[0].method == ROUTES[path][0]


@pytest.mark.parametrize("path", sorted(ROUTES))
async def test_bodies_too_deep_to_parse_are_400(client, fake, path):
    body = '{"file": "aGk=", "json_schema": ' + "[" * 5000 + "]" * 5000 + "}"
    response = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_json"
    assert fake.inference.received == []


@pytest.mark.parametrize("path", sorted(ROUTES))
async def test_answers_match_their_documented_models(client, fake, path):
    response = await client.post(path, json={"file": SMALL_B64, **ROUTES[path][1]})
    assert response.status_code == 200, response.text
    model = RESPONSE_MODELS[path]
    parsed = model.model_validate(response.json())
    # Nothing the route sends is missing from the documented shape (unset optional keys aside).
    assert _without_none(parsed.model_dump()) == _without_none(response.json())


def _without_none(value):
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_none(item) for item in value]
    return value
