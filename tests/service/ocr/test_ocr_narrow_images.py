"""A blank narrow image of under 100 bytes (found by the edge fuzz, tests/fuzz/test_edge_fuzz.py)
is a bounded job: an answer (text or a refusal naming the dimensions) as fast as a normal page, and
the model's next caller is not kept waiting behind it. Past ``ocr_max_aspect_ratio`` (20) an image
is refused before the engine; within it (6x100, 1x20) tall images are padded to 4:1 as RapidOCR
letterboxes wide ones (engines/ocr/rapidocr_engine.py ``pad_tall``), since its detector scales the
short side up to 736 px (see docs/architecture/design-notes.md#narrow-images-and-rapidocr)."""

from __future__ import annotations

import io
import time

import grpc
import pytest
from PIL import Image

from tests.service.ocr.helpers import ocr, render_lines, requests

#: A normal one-line page takes about a second; an image of a few hundred pixels gets the same.
MAX_ANSWER_S = 5.0
#: ... and no more than a few normal pages' time on a busy machine (measured in the same test).
PAGES_OF_WORK = 3
GOOD = render_lines(["Still healthy"], "DejaVuSans", 36, width=600)


async def _ocr_within(inference, data: bytes, timeout_s: float) -> None:
    async def messages():
        for message in requests(data, model="rapidocr"):
            yield message

    async for _ in inference.Ocr(messages(), timeout=timeout_s):
        pass


def _blank_png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height), color=255).save(out, "PNG")
    return out.getvalue()


async def _normal_page_s(inference) -> float:
    started = time.monotonic()
    [response] = await ocr(inference, GOOD.png(), model="rapidocr")
    assert "healthy" in response.text.lower()
    return time.monotonic() - started


@pytest.mark.parametrize(("width", "height"), [(6, 200), (200, 6), (6, 100), (1, 20), (10, 150)])
async def test_a_narrow_blank_image_is_a_bounded_job(inference, width, height):
    data = _blank_png(width, height)
    assert len(data) < 100
    await _normal_page_s(inference)  # the model is loaded: what follows is the image's own work
    normal_s = await _normal_page_s(inference)
    started = time.monotonic()
    try:
        await _ocr_within(inference, data, timeout_s=MAX_ANSWER_S * 2)
    except grpc.aio.AioRpcError as err:
        assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, f"{err.code().name}: {err.details()}"
    elapsed = time.monotonic() - started
    bound = max(MAX_ANSWER_S, PAGES_OF_WORK * normal_s)
    assert elapsed <= bound, f"a blank {width}x{height} PNG took {elapsed:.1f} s (a page: {normal_s:.1f} s)"
    # The lane is free again: a normal page right after answers in time.
    assert await _normal_page_s(inference) <= bound
