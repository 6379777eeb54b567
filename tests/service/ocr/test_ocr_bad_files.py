"""Bad OCR input: each a clear INVALID_ARGUMENT / RESOURCE_EXHAUSTED, and the server stays healthy."""

from __future__ import annotations

import io
import os

import grpc
import pytest
from PIL import Image
from universal_runtime.v1 import inference_service_pb2_grpc

from service.server import start_server
from tests.conftest import error_info
from tests.service.ocr.helpers import ocr, pdf_of, render_lines

GOOD = render_lines(["Still healthy"], "DejaVuSans", 36, width=600)


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _broken_xref_pdf() -> bytes:
    """A PDF whose xref table points nowhere and whose page objects are cut off."""
    data = pdf_of([GOOD.image])
    xref = data.rindex(b"xref")
    return (
        data[: xref // 3]
        + b"\nxref\n0 9\nthis is not an xref table\ntrailer\n<< /Size 9 >>\nstartxref\n999999\n%%EOF\n"
    )


BAD_FILES = {
    "truncated png": (
        GOOD.png()[: len(GOOD.png()) // 2],
        {},
        grpc.StatusCode.INVALID_ARGUMENT,
        "CORRUPT_FILE",
    ),
    "pixel bomb": (
        _png(Image.new("1", (9000, 9000))),  # a few kB that decode to 81 megapixels
        {},
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "IMAGE_TOO_LARGE",
    ),
    "broken xref pdf": (_broken_xref_pdf(), {}, grpc.StatusCode.INVALID_ARGUMENT, "CORRUPT_FILE"),
    "random bytes": (os.urandom(4096), {}, grpc.StatusCode.INVALID_ARGUMENT, "UNSUPPORTED_FORMAT"),
    "empty upload": (b"", {}, grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_FILE"),
    "png sent as pdf": (
        GOOD.png(),
        {"mime_type": "application/pdf"},
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNSUPPORTED_FORMAT",
    ),
    "unsupported mime type": (
        GOOD.png(),
        {"mime_type": "image/gif"},
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNSUPPORTED_FORMAT",
    ),
    "unknown language": (
        GOOD.png(),
        {"languages": ["xx"]},
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNSUPPORTED_LANGUAGE",
    ),
    "rapidocr language": (
        GOOD.png(),
        {"languages": ["de"], "model": "rapidocr"},
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNSUPPORTED_LANGUAGE",
    ),
    "page past the end": (
        GOOD.png(),
        {"first_page": 2},
        grpc.StatusCode.INVALID_ARGUMENT,
        "PAGE_OUT_OF_RANGE",
    ),
    "inverted range": (GOOD.png(), {"first_page": 3, "last_page": 2}, grpc.StatusCode.INVALID_ARGUMENT, None),
    "negative page": (GOOD.png(), {"first_page": -1}, grpc.StatusCode.INVALID_ARGUMENT, None),
    "dpi out of range": (GOOD.png(), {"pdf_dpi": 5000}, grpc.StatusCode.INVALID_ARGUMENT, None),
    "unknown model": (GOOD.png(), {"model": "no-such-ocr"}, grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND"),
    "model of another task": (
        GOOD.png(),
        {"model": "all-minilm-l6-v2"},
        grpc.StatusCode.FAILED_PRECONDITION,
        None,
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
async def test_bad_files_are_clear_errors(inference, case):
    data, options, code, reason = BAD_FILES[case]
    options = {"model": "tesseract", **options}
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ocr(inference, data, **options)
    assert err.value.code() == code, err.value.details()
    if reason:
        assert error_info(err.value).reason == reason
    [response] = await ocr(inference, GOOD.png(), model="tesseract")
    assert "healthy" in response.text.lower()


async def test_a_call_with_no_messages_is_invalid(inference):
    async def nothing():
        return
        yield

    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in inference.Ocr(nothing()):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(err.value).reason == "EMPTY_FILE"


async def test_one_message_over_the_grpc_limit_is_refused_but_chunks_pass(inference, settings):
    data = GOOD.png() + bytes(settings.max_receive_message_bytes)  # trailing bytes after IEND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ocr(inference, data, chunk_bytes=len(data), model="tesseract")
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    [response] = await ocr(inference, data, chunk_bytes=1 << 20, model="tesseract")
    assert "healthy" in response.text.lower()


async def test_configured_limits(settings):
    limited = settings.model_copy(
        update={"ocr_max_bytes": 200_000, "ocr_max_pixels": 1_000_000, "ocr_max_pages": 2}
    )
    server = await start_server(limited)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = inference_service_pb2_grpc.InferenceServiceStub(channel)
            cases = [
                (GOOD.png() + bytes(300_000), {}, "FILE_TOO_LARGE"),
                (_png(Image.new("L", (1200, 1000), 255)), {}, "IMAGE_TOO_LARGE"),
                (pdf_of([GOOD.image] * 3), {}, "TOO_MANY_PAGES"),
                (pdf_of([GOOD.image]), {"pdf_dpi": 1200}, "IMAGE_TOO_LARGE"),
            ]
            for data, options, reason in cases:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await ocr(stub, data, chunk_bytes=64_000, model="tesseract", **options)
                assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, reason
                assert error_info(err.value).reason == reason
            # Two of three pages are within the limit.
            responses = await ocr(stub, pdf_of([GOOD.image] * 3), model="tesseract", first_page=2)
            assert [r.page_number for r in responses] == [2, 3]
    finally:
        await server.stop(grace=1.0)
