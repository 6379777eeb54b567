"""Multi-page TIFFs: pages counted cheaply and bounded before any is decoded, and a
cancelled call stops between pages (see docs/architecture/design-notes.md#counting-tiff-pages)."""

from __future__ import annotations

import asyncio
import io
import struct
import time

import grpc
import pytest

from engines.errors import InvalidArgumentError
from engines.ocr.documents import tiff_page_count
from tests.conftest import error_info
from tests.service.ocr.helpers import ocr, render_lines, requests

GOOD = render_lines(["Still healthy"], "DejaVuSans", 36, width=600)


def one_pixel_tiff(pages: int, loop: bool = False) -> bytes:
    """A little-endian TIFF of ``pages`` 1x1 grey pages sharing one pixel byte (102 bytes a page).

    TIFF 6.0 §2 and §8: width, length, bits per sample, compression (none), photometric
    interpretation, strip offsets, rows per strip, strip byte counts. ``loop``: the last IFD links
    back to the first.
    """
    pixel_at, first = 8, 10
    out = bytearray(struct.pack("<2sHI", b"II", 42, first) + b"\xff\x00")
    tags = [(256, 3, 1), (257, 3, 1), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, pixel_at), (278, 3, 1)]
    tags.append((279, 4, 1))
    for page in range(pages):
        offset = len(out)
        following = offset + 2 + 12 * len(tags) + 4 if page < pages - 1 else (first if loop else 0)
        out += struct.pack("<H", len(tags))
        for tag, kind, value in tags:
            out += struct.pack("<HHII", tag, kind, 1, value)
        out += struct.pack("<I", following)
    return bytes(out)


def text_tiff(pages: int) -> bytes:
    """A TIFF of ``pages`` copies of a page of text (Pillow)."""
    out = io.BytesIO()
    GOOD.image.save(out, "TIFF", save_all=True, append_images=[GOOD.image] * (pages - 1))
    return out.getvalue()


def test_the_count_stops_past_the_limit_and_refuses_a_loop():
    assert tiff_page_count(one_pixel_tiff(3), 100) == 3
    assert tiff_page_count(one_pixel_tiff(60_000), 100) == 101
    assert tiff_page_count(text_tiff(2), 100) == 2
    with pytest.raises(InvalidArgumentError) as err:
        tiff_page_count(one_pixel_tiff(5, loop=True), 100)
    assert err.value.reason == "CORRUPT_FILE"
    with pytest.raises(InvalidArgumentError):
        tiff_page_count(one_pixel_tiff(5)[:300], 100)


async def test_a_tiff_over_the_page_limit_is_refused_before_decoding(inference, settings):
    started = time.perf_counter()
    [page] = await ocr(inference, GOOD.png(), model="tesseract")
    one_page_s = time.perf_counter() - started
    assert "healthy" in page.text.lower()
    pages = await ocr(inference, one_pixel_tiff(5), model="tesseract")
    assert [p.page_number for p in pages] == [1, 2, 3, 4, 5] and pages[0].page_count == 5
    for count in (settings.ocr_max_pages + 1, 60_000):
        started = time.perf_counter()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ocr(inference, one_pixel_tiff(count), model="tesseract")
        refused_s = time.perf_counter() - started
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
        info = error_info(err.value)
        assert info.reason == "TOO_MANY_PAGES"
        assert info.metadata["max_pages"] == str(settings.ocr_max_pages)
        # Counting the pages costs less than reading one page (Pillow's count is quadratic).
        assert refused_s < max(one_page_s, 0.05) * 2, (count, refused_s, one_page_s)


async def test_cancelling_stops_between_pages(inference):
    """After a cancel, the lane is free within about a page: the remaining pages are not read."""
    pages = 40
    call = inference.Ocr(iter(requests(text_tiff(pages), model="tesseract")))
    started = time.perf_counter()
    first = await call.read()
    assert first.page_number == 1 and first.page_count == pages
    second = await call.read()
    per_page_s = (time.perf_counter() - started) / 2
    call.cancel()
    await asyncio.sleep(0)
    started = time.perf_counter()
    [page] = await ocr(inference, GOOD.png(), model="tesseract")
    probe_s = time.perf_counter() - started
    assert second.page_number == 2 and "healthy" in page.text.lower()
    # Had the call gone on, the probe would wait for up to 38 pages.
    assert probe_s < per_page_s * 10, (probe_s, per_page_s)
