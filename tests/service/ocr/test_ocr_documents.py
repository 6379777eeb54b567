"""Ocr on PDFs and large files: pages streamed in order, page ranges, text layers, chunked uploads."""

from __future__ import annotations

import io

from PIL import Image

from tests.service.ocr.helpers import (
    cer,
    ocr,
    pdf_of,
    pdf_with_text_layer,
    png_with_padding,
    render_lines,
)

PAGE_TEXTS = [
    ["Page one of the report", "Introduction and scope"],
    ["Page two of the report", "Methods and data 2023"],
    ["Page three of the report", "Results and next steps"],
]


def three_page_pdf() -> bytes:
    """Pages rendered as images (no text layer): OCR is the only way to read them."""
    images = [render_lines(lines, "DejaVuSans", 30, width=800).image for lines in PAGE_TEXTS]
    return pdf_of(images, resolution=100.0)


async def test_pdf_pages_stream_in_order(inference):
    responses = await ocr(inference, three_page_pdf(), model="tesseract", pdf_dpi=100)
    assert [r.page_number for r in responses] == [1, 2, 3]
    assert all(r.page_count == 3 for r in responses)
    for response, lines in zip(responses, PAGE_TEXTS, strict=True):
        assert response.engine == "tesseract"
        assert cer("\n".join(lines), response.text) <= 0.05
        assert (response.width, response.height) == (
            800,
            render_lines(lines, width=800, size=30).image.height,
        )


async def test_pdf_page_range_with_rapidocr(inference):
    responses = await ocr(
        inference, three_page_pdf(), model="rapidocr", first_page=2, last_page=3, pdf_dpi=100
    )
    assert [r.page_number for r in responses] == [2, 3]
    assert cer("\n".join(PAGE_TEXTS[1]), responses[0].text) <= 0.05
    only_first = await ocr(inference, three_page_pdf(), model="tesseract", last_page=1, pdf_dpi=100)
    assert [r.page_number for r in only_first] == [1]


async def test_pdf_dpi_sets_the_page_image_size(inference):
    [response] = await ocr(
        inference, three_page_pdf(), model="tesseract", first_page=1, last_page=1, pdf_dpi=200
    )
    assert response.width == 1600  # an 8-inch page at 200 dpi
    assert cer("\n".join(PAGE_TEXTS[0]), response.text) <= 0.05


async def test_pdf_text_layer_is_used_when_asked(inference):
    lines = ["Text layer line one", "Second line 2024"]
    pdf = pdf_with_text_layer(lines)
    [layer] = await ocr(
        inference, pdf, model="tesseract", use_pdf_text_layer=True, return_boxes=True, pdf_dpi=72
    )
    assert layer.engine == "pdf_text_layer"
    assert layer.text.split("\n") == lines
    assert (layer.width, layer.height) == (612, 792)
    first = layer.lines[0].box
    assert 60 <= first.x <= 80 and 60 <= first.y <= 100  # 72 pt from the left, 700 pt from the bottom
    # Without the flag the same page is rendered and read by OCR.
    [ocred] = await ocr(inference, pdf, model="tesseract", pdf_dpi=150)
    assert ocred.engine == "tesseract"
    assert cer("\n".join(lines), ocred.text) <= 0.05


async def test_a_pdf_with_a_wrong_xref_but_intact_objects_is_repaired(inference):
    # PDFium rebuilds a damaged cross-reference table from the objects, as PDF readers do; a PDF
    # whose objects are damaged too is refused (see test_ocr_bad_files).
    data = three_page_pdf()
    xref = data.rindex(b"xref")
    damaged = data[:xref] + b"xref\n0 2\nnot an xref table\ntrailer\n<< >>\nstartxref\n123\n%%EOF\n"
    responses = await ocr(inference, damaged, model="tesseract", last_page=1, pdf_dpi=100)
    assert responses[0].page_count == 3
    assert cer("\n".join(PAGE_TEXTS[0]), responses[0].text) <= 0.05


async def test_a_20_mb_file_arrives_in_chunks(inference, settings):
    page = render_lines(["Large upload arrived intact"], "DejaVuSans", 36, width=900)
    data = png_with_padding(page.png(), 20 * 1024 * 1024)
    assert len(data) > 20 * 1024 * 1024 > settings.max_receive_message_bytes
    [response] = await ocr(inference, data, chunk_bytes=1 << 20, model="tesseract")
    assert cer(page.text, response.text) <= 0.05


async def test_multi_page_tiff_and_other_image_formats(inference):
    pages = [render_lines(lines, "DejaVuSans", 30, width=800).image for lines in PAGE_TEXTS[:2]]
    tiff = io.BytesIO()
    pages[0].save(tiff, "TIFF", save_all=True, append_images=pages[1:], compression="tiff_deflate")
    responses = await ocr(inference, tiff.getvalue(), model="tesseract")
    assert [(r.page_number, r.page_count) for r in responses] == [(1, 2), (2, 2)]
    assert cer("\n".join(PAGE_TEXTS[1]), responses[1].text) <= 0.05
    for fmt, mime in (("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("BMP", "image/bmp")):
        out = io.BytesIO()
        pages[0].save(out, fmt, **({"quality": 95} if fmt != "BMP" else {}))
        [response] = await ocr(inference, out.getvalue(), model="tesseract", mime_type=mime)
        assert cer("\n".join(PAGE_TEXTS[0]), response.text) <= 0.05, fmt
    # Transparency is composited on white (black text on a transparent background stays readable).
    rgba = Image.new("RGBA", pages[0].size, (0, 0, 0, 0))
    rgba.paste(
        Image.new("RGBA", pages[0].size, (0, 0, 0, 255)), mask=pages[0].convert("L").point(lambda v: 255 - v)
    )
    out = io.BytesIO()
    rgba.save(out, "PNG")
    [response] = await ocr(inference, out.getvalue(), model="tesseract")
    assert cer("\n".join(PAGE_TEXTS[0]), response.text) <= 0.05
