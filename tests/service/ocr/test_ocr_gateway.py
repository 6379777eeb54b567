"""``POST /v1/ocr`` through the REST gateway to the real server: multipart, JSON base64, data URIs."""

from __future__ import annotations

import base64

import pytest

from gateway.app import create_app
from tests.gateway.gateway_fakes import asgi_client
from tests.service.ocr.helpers import cer, pdf_of, render_lines

PAGE = render_lines(["Gateway upload works", "Second line 77"], "DejaVuSans", 34, width=800)


@pytest.fixture
async def http(server):
    async with asgi_client(create_app(f"127.0.0.1:{server.port}")) as client:
        yield client


async def test_multipart_upload(http):
    response = await http.post(
        "/v1/ocr",
        files={"file": ("page.png", PAGE.png(), "image/png")},
        data={"model": "tesseract", "return_boxes": "true", "languages": "en"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "ocr.result" and body["page_count"] == 1
    [page] = body["pages"]
    assert cer(PAGE.text, page["text"]) <= 0.05
    assert page["engine"] == "tesseract" and page["lines"][0]["box"]["width"] > 0


async def test_json_base64_and_data_uri(http):
    encoded = base64.b64encode(PAGE.png()).decode()
    plain = await http.post("/v1/ocr", json={"file": encoded, "model": "tesseract"})
    assert plain.status_code == 200, plain.text
    assert cer(PAGE.text, plain.json()["text"]) <= 0.05
    assert "lines" not in plain.json()["pages"][0]
    pdf = base64.b64encode(pdf_of([PAGE.image, PAGE.image])).decode()
    uri = await http.post(
        "/v1/ocr",
        json={
            "file": f"data:application/pdf;base64,{pdf}",
            "model": "tesseract",
            "first_page": 2,
            "pdf_dpi": 100,
        },
    )
    assert uri.status_code == 200, uri.text
    assert [p["page_number"] for p in uri.json()["pages"]] == [2]


async def test_gateway_errors(http):
    bad_base64 = await http.post("/v1/ocr", json={"file": "%%% not base64", "model": "tesseract"})
    assert bad_base64.status_code == 400 and bad_base64.json()["error"]["code"] == "invalid_file"
    corrupt = await http.post("/v1/ocr", json={"file": base64.b64encode(PAGE.png()[:500]).decode()})
    assert corrupt.status_code == 400 and corrupt.json()["error"]["code"] == "corrupt_file"
    no_file = await http.post("/v1/ocr", data={"model": "tesseract"}, files={"other": ("x", b"1")})
    assert no_file.status_code == 400
    missing = await http.post("/v1/ocr", json={"model": "tesseract"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "file"
    bad_page = await http.post("/v1/ocr", json={"file": "aGVsbG8=", "first_page": -1})
    assert bad_page.status_code == 400
    empty = await http.post(
        "/v1/ocr", files={"file": ("empty.png", b"", "image/png")}, data={"model": "tesseract"}
    )
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "empty_file"
    unknown = await http.post(
        "/v1/ocr", json={"file": base64.b64encode(PAGE.png()).decode(), "model": "nope"}
    )
    assert unknown.status_code == 404


async def test_over_limit_is_413(settings):
    from service.server import start_server

    server = await start_server(settings.model_copy(update={"ocr_max_pixels": 10_000}))
    try:
        async with asgi_client(create_app(f"127.0.0.1:{server.port}")) as client:
            response = await client.post(
                "/v1/ocr", files={"file": ("page.png", PAGE.png(), "image/png")}, data={"model": "tesseract"}
            )
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "image_too_large"
    finally:
        await server.stop(grace=1.0)
