"""Images the decoder accepts but the engines cannot use: INVALID_ARGUMENT / 400 naming
the aspect-ratio limit, through Ocr, AnalyzeDocument and their gateway routes, on the real engines.

Before the check, each of these (about 100 bytes) was INTERNAL/500 from RapidOCR's resize.
"""

from __future__ import annotations

import io

import grpc
import pytest
from PIL import Image
from universal_runtime.v1 import documents_pb2

from gateway.app import create_app
from tests.conftest import error_info
from tests.gateway.gateway_fakes import asgi_client
from tests.service.ocr.helpers import ocr, pdf_of, render_lines

GOOD = render_lines(["Still healthy"], "DejaVuSans", 36, width=600)


def _image(width: int, height: int, kind: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height), 255).save(out, kind)
    return out.getvalue()


DEGENERATE = {
    "20000x1 png": _image(20000, 1),
    "1x20000 png": _image(1, 20000),
    "4000x3 png": _image(4000, 3),
    "wide webp": _image(16000, 2, "WEBP"),
    "4000x32 png": _image(4000, 32),  # 125:1, RapidOCR's own edge
    "thin pdf page": pdf_of([Image.new("L", (4000, 8), 255)]),
}


def _check(err: grpc.aio.AioRpcError, settings) -> None:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    info = error_info(err)
    assert info.reason == "IMAGE_ASPECT_RATIO_TOO_LARGE"
    assert float(info.metadata["max_aspect_ratio"]) == settings.ocr_max_aspect_ratio
    assert f"{settings.ocr_max_aspect_ratio:g}:1" in err.details()


@pytest.mark.parametrize("case", list(DEGENERATE))
@pytest.mark.parametrize("model", ["rapidocr", "tesseract"])
async def test_ocr_refuses_them(inference, settings, case, model):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ocr(inference, DEGENERATE[case], model=model)
    _check(err.value, settings)


@pytest.mark.parametrize("case", list(DEGENERATE))
async def test_document_analysis_refuses_them(inference, settings, case):
    data = DEGENERATE[case]
    request = documents_pb2.AnalyzeDocumentRequest(options=documents_pb2.AnalyzeDocumentOptions(), chunk=data)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        [_ async for _ in inference.AnalyzeDocument(iter([request]))]
    _check(err.value, settings)


async def test_the_limit_is_inclusive_and_small_images_are_read(inference, settings):
    """The largest ratio allowed and a 1x1 image are read by every engine (no error, no text)."""
    ratio = int(settings.ocr_max_aspect_ratio)
    wide, tall, dot = _image(ratio * 10, 10), _image(10, ratio * 10), _image(1, 1)
    for data in (wide, tall, dot):
        for model in ("rapidocr", "tesseract"):
            [page] = await ocr(inference, data, model=model)
            assert page.text.strip() == ""
    for data in (wide, dot):  # the layout model after RapidOCR (a tall page is RapidOCR's slowest)
        request = documents_pb2.AnalyzeDocumentRequest(chunk=data)
        [page] = [p async for p in inference.AnalyzeDocument(iter([request]))]
        assert page.page_number == 1
    [page] = await ocr(inference, GOOD.png(), model="rapidocr")
    assert "healthy" in page.text.lower()


@pytest.fixture
async def http(server):
    async with asgi_client(create_app(f"127.0.0.1:{server.port}")) as client:
        yield client


@pytest.mark.parametrize("route", ["/v1/ocr", "/v1/documents/analyze"])
@pytest.mark.parametrize("case", ["20000x1 png", "4000x3 png", "wide webp"])
async def test_the_gateway_answers_400(http, route, case):
    response = await http.post(route, files={"file": ("page", DEGENERATE[case], "application/octet-stream")})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "image_aspect_ratio_too_large"
    assert "aspect ratio" in error["message"]
