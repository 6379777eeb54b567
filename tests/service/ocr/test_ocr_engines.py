"""Ocr on rendered pages through RapidOCR and Tesseract: text (CER <= 5%) and boxes."""

from __future__ import annotations

import pytest

from tests.service.ocr.helpers import (
    cer,
    contains,
    ocr,
    render_lines,
    render_rotated,
    render_two_columns,
)

ENGINES = ["rapidocr", "tesseract"]

PAGES = {
    "sans-32": lambda: render_lines(
        ["Invoice 4711 dated 3 March 2024", "Total amount due: 1,250.00 EUR", "Thank you for your order"],
        "DejaVuSans",
        32,
    ),
    "serif-26": lambda: render_lines(
        ["The quick brown fox jumps over the lazy dog", "Pack my box with five dozen liquor jugs"],
        "DejaVuSerif",
        26,
    ),
    "bold-40": lambda: render_lines(["Shipping label", "Order 58213 to Berlin"], "DejaVuSans-Bold", 40),
    "mono-30": lambda: render_lines(["def main(): return 42", "Serial ABC-123-XYZ"], "DejaVuSansMono", 30),
    "rotated-7deg": lambda: render_rotated("Rotated line of text 2024", 7.0),
    "two-columns": lambda: render_two_columns(
        "Quarterly report",
        [
            "Revenue grew in every",
            "region this quarter and",
            "costs stayed flat over",
            "the same period of time",
        ],
        [
            "Hiring slowed down after",
            "the spring and the new",
            "office opens in autumn",
            "as planned last year",
        ],
    ),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", list(PAGES))
async def test_text_and_boxes(inference, engine, case):
    page = PAGES[case]()
    [response] = await ocr(inference, page.png(), model=engine, return_boxes=True)
    assert response.engine == engine
    assert (response.page_number, response.page_count) == (1, 1)
    assert (response.width, response.height) == page.image.size
    error = cer(page.text, response.text)
    assert error <= 0.05, f"CER {error:.3f}: expected {page.text!r}, got {response.text!r}"
    assert 0.0 < response.confidence <= 1.0
    for line in response.lines:
        assert 0.0 <= line.confidence <= 1.0
        assert all(0.0 <= w.confidence <= 1.0 for w in line.words)
    # Every rendered line's centre lies in the box of a recognized line holding (most of) its text.
    for text, (left, top, right, bottom) in page.lines:
        centre = ((left + right) / 2, (top + bottom) / 2)
        boxes = [line for line in response.lines if contains(line.box, centre)]
        assert boxes, f"no box around {text!r} at {centre}"
        assert any(
            cer(text, line.text) <= 0.35 or text.replace(" ", "") in line.text.replace(" ", "")
            for line in boxes
        )
        for line in boxes:  # and no box is far bigger than the text it holds
            assert line.box.x >= left - 30 and line.box.x + line.box.width <= right + 30


@pytest.mark.parametrize("engine", ENGINES)
async def test_words_have_boxes_inside_their_line(inference, engine):
    page = render_lines(["alpha beta gamma delta"], "DejaVuSans", 36)
    [response] = await ocr(inference, page.png(), model=engine, return_boxes=True)
    [line] = response.lines
    assert line.words
    for word in line.words:
        centre = (word.box.x + word.box.width / 2, word.box.y + word.box.height / 2)
        assert contains(line.box, centre)
    # Without return_boxes only the text comes back.
    [plain] = await ocr(inference, page.png(), model=engine)
    assert not plain.lines and plain.text == response.text


@pytest.mark.parametrize("case", ["serif-26", "two-columns"])
async def test_rapidocr_text_does_not_depend_on_return_boxes(inference, case):
    # Without return_boxes RapidOCR skips the per-character positions; the text must not change.
    page = PAGES[case]()
    [boxed] = await ocr(inference, page.png(), model="rapidocr", return_boxes=True)
    [plain] = await ocr(inference, page.png(), model="rapidocr")
    assert boxed.lines and not plain.lines
    assert plain.text == boxed.text
