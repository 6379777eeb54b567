"""``/v1/documents/*`` through the REST gateway to the real server and default models."""

from __future__ import annotations

import base64

import pytest

from gateway.app import create_app
from tests.gateway.gateway_fakes import asgi_client
from tests.service.documents.pages import render_invoice_page, render_report_page

INVOICE, INVOICE_TRUTH = render_invoice_page()
REPORT, _ = render_report_page()


@pytest.fixture
async def http(server):
    async with asgi_client(create_app(f"127.0.0.1:{server.port}")) as client:
        yield client


async def test_analyze_multipart_returns_markdown_and_blocks(http):
    response = await http.post("/v1/documents/analyze", files={"file": ("report.png", REPORT, "image/png")})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "document.analysis" and body["page_count"] == 1
    [page] = body["pages"]
    types = [block["type"] for block in page["blocks"]]
    assert "title" in types and "table" in types
    table = next(block["table"] for block in page["blocks"] if block["type"] == "table")
    assert any(cell["text"] == "1,250" for cell in table["cells"])
    assert "| North | 1,250 |" in body["markdown"]


async def test_ask_json_base64_cites_the_total(http):
    body = {"file": base64.b64encode(INVOICE).decode(), "question": "What is the invoice total?"}
    response = await http.post("/v1/documents/ask", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["object"] == "document.answer" and INVOICE_TRUTH["total"] in answer["answer"]
    assert answer["citations"] and answer["citations"][0]["page_number"] == 1


async def test_bad_input_is_400_not_500(http):
    missing = await http.post("/v1/documents/ask", json={"file": base64.b64encode(INVOICE).decode()})
    assert missing.status_code == 400, missing.text
    corrupt = await http.post("/v1/documents/analyze", files={"file": ("x.png", INVOICE[:300], "image/png")})
    assert corrupt.status_code == 400 and corrupt.json()["error"]["code"] == "corrupt_file"
