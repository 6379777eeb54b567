"""The real rapid_layout engine (PP-PicoDet CDLA) with real RapidOCR on rendered document pages.

The engines are loaded directly (no server): RapidOCR reads each page through the same calls
the service makes (``open_document`` + ``read_page_and_image`` with word boxes), then
``analyze_page`` detects the layout and structures the lines. Each page is analysed once per
module (OCR of a page takes seconds on a busy CPU).
"""

from __future__ import annotations

import asyncio
import io
import re
import socket

import pytest
from PIL import Image

from engines.base import ModelSpec
from engines.capabilities import LayoutAnalyzer
from engines.documents.types import RegionType, StructuredPage
from engines.errors import InvalidArgumentError
from engines.executor import DeviceExecutor
from engines.ocr.types import OcrLimits, OcrOptions, OcrPage
from engines.registry import engine_class
from engines.types import Task
from tests.service.documents.pages import render_invoice_page, render_report_page, render_two_column_page

LAYOUT_SOURCE = "pkg://rapid_layout/models"
OCR_SOURCE = "pkg://rapidocr_onnxruntime/models"
LIMITS = OcrLimits(max_bytes=32 << 20, max_pixels=40_000_000, max_pages=4)
OPTIONS = OcrOptions(languages=("en",), return_boxes=True)


def load(backend: str, task: Task, source: str, **options):
    spec = ModelSpec(name=f"test-{backend}", backend=backend, tasks=(task,), source=source, options=options)
    cls = engine_class(backend)
    cls.check_spec(spec)
    engine = cls(spec, cls.select_device("auto"), DeviceExecutor("cpu", f"test-{backend}"))
    engine.load()
    return engine


def squash(text: str) -> str:
    """Lower case without whitespace (PP-OCRv4 sometimes drops the space between Latin words)."""
    return re.sub(r"\s+", "", text).lower()


@pytest.fixture(scope="module")
def engines():
    layout = load("rapid_layout", Task.LAYOUT, LAYOUT_SOURCE, threads=2)
    ocr = load("rapidocr", Task.OCR, OCR_SOURCE, threads=2)
    yield layout, ocr
    for engine in (layout, ocr):
        engine.unload()
        engine.executor.shutdown()


async def read(ocr, png: bytes) -> tuple[OcrPage, Image.Image]:
    document = await ocr.open_document(png, "image/png", LIMITS)
    try:
        return await ocr.read_page_and_image(document, 1, OPTIONS)
    finally:
        ocr.close_document(document)


@pytest.fixture(scope="module")
def analysed(engines) -> dict[str, tuple[StructuredPage, dict, OcrPage, Image.Image]]:
    """Each rendered page read by RapidOCR and analysed by rapid_layout, once."""
    layout, ocr = engines

    async def run() -> dict:
        out = {}
        for name, render in (
            ("two_column", render_two_column_page),
            ("report", render_report_page),
            ("invoice", render_invoice_page),
        ):
            png, truth = render()
            page, image = await read(ocr, png)
            out[name] = (await layout.analyze_page(image, page), truth, page, image)
        return out

    return asyncio.run(run())


def body(page: StructuredPage):
    return [b for b in page.blocks if b.type not in (RegionType.PAGE_HEADER, RegionType.PAGE_FOOTER)]


def test_the_engine_is_a_layout_analyzer_on_the_cpu(engines):
    layout, _ = engines
    assert isinstance(layout, LayoutAnalyzer)
    assert layout.device == "cpu" and layout.tasks == frozenset({Task.LAYOUT})
    assert layout.estimated_load_bytes() > 1_000_000


def test_the_two_column_page_reads_title_then_left_column_then_right_column(analysed):
    result, truth, _, _ = analysed["two_column"]
    blocks = body(result)
    assert blocks[0].type is RegionType.TITLE
    assert squash(blocks[0].text) == squash(truth["title"])
    assert all(b.type is RegionType.TEXT for b in blocks[1:]), [(b.type, b.text) for b in blocks]
    # After the title: every left-column word comes before every right-column word.
    text = squash(" ".join(b.text for b in blocks[1:]))
    left = [m.start() for w in truth["left_words"] for m in re.finditer(w, text)]
    right = [m.start() for w in truth["right_words"] for m in re.finditer(w, text)]
    assert len(left) >= len(truth["left_words"]) and len(right) >= len(truth["right_words"])
    assert max(left) < min(right), text
    # Each paragraph is one block, in order, holding its text (OCR slips allowed at the edges).
    assert len(blocks[1:]) == len(truth["left"]) + len(truth["right"])
    for block, paragraph in zip(blocks[1:], truth["left"] + truth["right"], strict=True):
        assert squash(paragraph)[:20] in squash(block.text)
    assert result.markdown.startswith("# ")


def test_the_report_page_has_a_title_paragraphs_and_a_table_with_the_numbers_in_place(analysed):
    result, truth, _, _ = analysed["report"]
    types = [b.type for b in body(result)]
    titles = [b for b in result.blocks if b.type is RegionType.TITLE]
    assert [squash(b.text) for b in titles] == [squash(truth["title"])]
    paragraphs = [b for b in result.blocks if b.type is RegionType.TEXT]
    assert len(paragraphs) >= 1
    assert any("summarises" in squash(b.text) for b in paragraphs)
    [table_block] = [b for b in result.blocks if b.type is RegionType.TABLE]
    # Reading order: title, then the paragraphs above the table, then the table.
    assert types.index(RegionType.TITLE) < types.index(RegionType.TEXT) < types.index(RegionType.TABLE)
    table = table_block.table
    assert (table.row_count, table.column_count) == (len(truth["table"]), len(truth["table"][0]))
    assert [[squash(cell) for cell in row] for row in table.rows()] == [
        [squash(cell) for cell in row] for row in truth["table"]
    ]
    north = next(c for c in table.cells if c.text == "1,250")
    assert (north.row, north.column) == (1, 1)
    # The table's cells lie inside the rendered table.
    left, top, right, bottom = truth["table_box"]
    for cell in table.cells:
        assert left - 5 <= cell.box.x and cell.box.x + cell.box.width <= right + 5
        assert top - 5 <= cell.box.y and cell.box.y + cell.box.height <= bottom + 5
    # The running header comes first and the page number last.
    assert result.blocks[0].type is RegionType.PAGE_HEADER and "northwind" in squash(result.blocks[0].text)
    assert result.blocks[-1].type is RegionType.PAGE_FOOTER and squash(result.blocks[-1].text) == "page3"


def test_the_report_markdown_has_a_heading_and_a_pipe_table(analysed):
    result, truth, _, _ = analysed["report"]
    markdown = result.markdown
    assert markdown.splitlines()[0] == f"# {truth['title']}"
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    assert "| North | 1,250 | 38.5 |" in rows
    assert "| West | 980 | 7.2 |" in rows
    assert rows[1] == "| --- | --- | --- |"
    # Headers and footers stay out; the paragraphs are single lines.
    assert "Northwind" not in markdown and "Page 3" not in markdown
    assert any(
        line.startswith("This report summarises") and line.endswith("spring.")
        for line in markdown.splitlines()
    )


def test_the_invoice_page_gives_its_total_and_an_item_table(analysed):
    result, truth, _, _ = analysed["invoice"]
    assert any(truth["total"] in b.text and "total" in b.text.lower() for b in result.blocks)
    tables = [b.table for b in result.blocks if b.type is RegionType.TABLE]
    assert len(tables) == 1
    rows = tables[0].rows()
    assert len(rows) == len(truth["items"]) and len(rows[0]) == len(truth["items"][0])
    # The amount column holds the amounts, row by row.
    assert [row[3] for row in rows[1:]] == [row[3] for row in truth["items"][1:]]


def test_an_image_at_another_resolution_is_scaled_to_the_ocr_page(engines, analysed):
    layout, _ = engines
    full, _, page, image = analysed["report"]
    half = image.resize((image.width // 2, image.height // 2))
    result = asyncio.run(layout.analyze_page(half, page))
    assert [b.type for b in result.blocks if b.type is RegionType.TABLE] == [RegionType.TABLE]
    table = next(b for b in result.blocks if b.type is RegionType.TABLE).table
    assert table.rows() == next(b for b in full.blocks if b.type is RegionType.TABLE).table.rows()


def test_a_blank_page_gives_no_blocks_and_empty_markdown(engines):
    layout, ocr = engines
    blank = io.BytesIO()
    Image.new("RGB", (1240, 1754), "white").save(blank, "PNG")

    async def run():
        page, image = await read(ocr, blank.getvalue())
        return page, await layout.analyze_page(image, page)

    page, result = asyncio.run(run())
    assert page.lines == []
    assert result.blocks == [] and result.markdown == ""
    assert (result.page_number, result.page_count, result.width, result.height) == (1, 1, 1240, 1754)
    assert (result.ocr_engine, result.layout_engine) == ("rapidocr", "rapid_layout")


def test_loading_and_detecting_touch_no_network(monkeypatch):
    """The packaged model only: any socket connection or rapid-layout download fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("network access during layout load/detect")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    from rapid_layout.utils.download_file import DownloadFile

    monkeypatch.setattr(DownloadFile, "run", classmethod(lambda cls, *a, **k: refuse()))
    engine = load("rapid_layout", Task.LAYOUT, LAYOUT_SOURCE, threads=1, score_threshold=0.3)
    try:
        png, _ = render_report_page()
        regions = engine.detect(Image.open(io.BytesIO(png)).convert("RGB"))
        assert {RegionType.TITLE, RegionType.TABLE} <= {r.type for r in regions}
        assert all(0.3 <= r.confidence <= 1.0 for r in regions)
    finally:
        engine.unload()
        engine.executor.shutdown()


@pytest.mark.parametrize(
    "options",
    [{"score_threshold": 1.5}, {"iou_threshold": "x"}, {"threads": 0}, {"threads": "two"}, {"niceness": 25}],
)
def test_bad_options_are_refused_before_loading(options):
    spec = ModelSpec(
        name="bad", backend="rapid_layout", tasks=(Task.LAYOUT,), source=LAYOUT_SOURCE, options=options
    )
    with pytest.raises(InvalidArgumentError):
        engine_class("rapid_layout").check_spec(spec)
