"""Rendered document pages for the layout and document tests: PNG bytes plus ground truth.

The pages imitate real documents (the layout model, PP-PicoDet trained on CDLA, saw scanned
papers and reports): an A4 page at 150 dpi (1240 x 1754 pixels), margins of about 110 pixels,
a bold title of 40-44 pixels, body text of 25-26 pixels with 1.45 line spacing, tables with
ruled grid lines, and a page number at the bottom. Fonts are DejaVu (Debian fonts-dejavu-core,
see :mod:`tests.service.ocr.helpers`).

Every renderer returns ``(png_bytes, truth)``; ``truth`` holds the texts drawn, and where
useful their boxes as ``(left, top, right, bottom)`` pixels.
"""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont

from tests.service.ocr.helpers import font

PAGE_WIDTH = 1240
PAGE_HEIGHT = 1754
MARGIN = 110


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def wrap(text: str, face: ImageFont.FreeTypeFont, width: float) -> list[str]:
    """Greedy word wrap of ``text`` into lines no wider than ``width`` pixels."""
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if current and face.getlength(candidate) > width:
            lines.append(current)
            current = word
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


class _Writer:
    """Draws text on a page and records where each line went."""

    def __init__(self, width: int = PAGE_WIDTH, height: int = PAGE_HEIGHT) -> None:
        self.image = Image.new("RGB", (width, height), "white")
        self.draw = ImageDraw.Draw(self.image)
        self.placed: list[tuple[str, tuple[float, float, float, float]]] = []

    def line(self, x: float, y: float, text: str, face: ImageFont.FreeTypeFont) -> tuple[float, ...]:
        self.draw.text((x, y), text, font=face, fill="black")
        box = self.draw.textbbox((x, y), text, font=face)
        self.placed.append((text, box))
        return box

    def paragraph(
        self, x: float, y: float, width: float, text: str, face: ImageFont.FreeTypeFont, spacing: float = 1.45
    ) -> float:
        """Wrap ``text`` into ``width`` and draw it from ``y``; returns the y under the paragraph."""
        step = face.size * spacing
        for i, line in enumerate(wrap(text, face, width)):
            self.line(x, y + i * step, line, face)
        return y + len(wrap(text, face, width)) * step

    def centered(self, y: float, text: str, face: ImageFont.FreeTypeFont) -> tuple[float, ...]:
        return self.line((self.image.width - face.getlength(text)) / 2, y, text, face)


TWO_COLUMN_TITLE = "Alpine Lakes and Coastal Harbours"
TWO_COLUMN_LEFT = [
    "Glacier meltwater feeds the alpine lakes every summer, and the meadow streams carry fine "
    "silt that colours the water a pale turquoise. Researchers sampled the glacier basins "
    "each week from June to September.",
    "The meadow plots around each lake showed that moss and sedge recover quickly after the "
    "snow retreats, while the glacier moraine stays bare for many years.",
]
TWO_COLUMN_RIGHT = [
    "Harbour traffic along the coast follows the fishing calendar, and the lantern ships that "
    "once guided boats into port are now kept as museums. Every harbour office keeps a log.",
    "Tide gauges near the lantern piers recorded higher water in the winter storms, and the "
    "harbour walls were raised twice during the last century.",
]


def render_two_column_page() -> tuple[bytes, dict]:
    """A paper-like page: a bold full-width title over two columns of two paragraphs each.

    The left column speaks of glaciers and meadows, the right one of harbours and lanterns, so
    a test can tell from any word which column it came from.

    Returns:
        ``(png, truth)`` with truth keys ``title``, ``left`` and ``right`` (paragraph texts),
        ``left_words`` and ``right_words`` (words found only in that column).

    """
    w = _Writer()
    title = font("DejaVuSerif-Bold", 42)
    body = font("DejaVuSerif", 25)
    w.centered(140, TWO_COLUMN_TITLE, title)
    gutter = 70
    column_width = (PAGE_WIDTH - 2 * MARGIN - gutter) / 2
    for x, paragraphs in ((MARGIN, TWO_COLUMN_LEFT), (MARGIN + column_width + gutter, TWO_COLUMN_RIGHT)):
        y = 280.0
        for text in paragraphs:
            y = w.paragraph(x, y, column_width, text, body) + 30
    truth = {
        "title": TWO_COLUMN_TITLE,
        "left": TWO_COLUMN_LEFT,
        "right": TWO_COLUMN_RIGHT,
        "left_words": ["glacier", "meadow", "moraine", "turquoise"],
        "right_words": ["harbour", "lantern", "tide", "museums"],
        "lines": w.placed,
    }
    return _png(w.image), truth


REPORT_TITLE = "Annual Operations Report 2023"
REPORT_PARAGRAPHS = [
    "This report summarises the operating results of the company for the financial year. "
    "Sales rose in every region, driven by steady demand for replacement parts and by the new "
    "service contracts signed in the spring.",
    "The table below lists the units shipped and the growth against the previous year for "
    "each sales region. Figures are unaudited and may change in the final statement.",
]
REPORT_TABLE = [
    ["Region", "Units", "Growth %"],
    ["North", "1,250", "38.5"],
    ["South", "2,140", "12.75"],
    ["West", "980", "7.2"],
]
REPORT_CAPTION = "Table 1: Units shipped by region"


def draw_table(
    w: _Writer,
    x: float,
    y: float,
    rows: list[list[str]],
    widths: list[float],
    face: ImageFont.FreeTypeFont,
    header_face: ImageFont.FreeTypeFont,
    row_height: float = 56,
    align_right_from: int = 1,
) -> tuple[float, float, float, float]:
    """A table with ruled grid lines; returns its box. Columns from ``align_right_from`` on are
    right-aligned (numbers), the others left-aligned."""
    right = x + sum(widths)
    bottom = y + row_height * len(rows)
    for r in range(len(rows) + 1):
        w.draw.line([(x, y + r * row_height), (right, y + r * row_height)], fill="black", width=2)
    edges = [x]
    for width in widths:
        edges.append(edges[-1] + width)
    for edge in edges:
        w.draw.line([(edge, y), (edge, bottom)], fill="black", width=2)
    for r, row in enumerate(rows):
        f = header_face if r == 0 else face
        for c, text in enumerate(row):
            top = y + r * row_height + (row_height - f.size) / 2 - 3
            left = edges[c + 1] - 16 - f.getlength(text) if c >= align_right_from else edges[c] + 16
            w.line(left, top, text, f)
    return x, y, right, bottom


def render_report_page() -> tuple[bytes, dict]:
    """A report page: running header, bold title, two paragraphs, a captioned 4 x 3 ruled table
    of numbers (``1,250``, ``38.5``...), a closing paragraph and a page-number footer.

    Returns:
        ``(png, truth)`` with keys ``title``, ``paragraphs``, ``table`` (rows of cell texts,
        header first), ``table_box``, ``caption``, ``header`` and ``footer``.

    """
    w = _Writer()
    small = font("DejaVuSans", 20)
    title = font("DejaVuSans-Bold", 44)
    body = font("DejaVuSerif", 26)
    cell = font("DejaVuSans", 26)
    cell_bold = font("DejaVuSans-Bold", 26)
    header = "Northwind Components Ltd."
    w.line(MARGIN, 60, header, small)
    w.draw.line([(MARGIN, 92), (PAGE_WIDTH - MARGIN, 92)], fill="black", width=1)
    w.line(MARGIN, 170, REPORT_TITLE, title)
    y = 280.0
    width = PAGE_WIDTH - 2 * MARGIN
    for text in REPORT_PARAGRAPHS:
        y = w.paragraph(MARGIN, y, width, text, body) + 34
    y += 20
    w.centered(y, REPORT_CAPTION, font("DejaVuSerif-Italic", 24))
    y += 60
    widths = [420, 270, 270]
    x = (PAGE_WIDTH - sum(widths)) / 2
    table_box = draw_table(w, x, y, REPORT_TABLE, widths, cell, cell_bold, row_height=64)
    y = table_box[3] + 70
    closing = (
        "Operating costs stayed within the budget approved by the board, and the company expects "
        "similar growth in the coming year as the new plant reaches full capacity."
    )
    w.paragraph(MARGIN, y, width, closing, body)
    footer = "Page 3"
    w.centered(PAGE_HEIGHT - 90, footer, small)
    truth = {
        "title": REPORT_TITLE,
        "paragraphs": [*REPORT_PARAGRAPHS, closing],
        "table": REPORT_TABLE,
        "table_box": table_box,
        "caption": REPORT_CAPTION,
        "header": header,
        "footer": footer,
        "lines": w.placed,
    }
    return _png(w.image), truth


INVOICE_ITEMS = [
    ["Description", "Quantity", "Unit price", "Amount"],
    ["Steel brackets", "10", "45.00", "450.00"],
    ["Installation hours", "8", "75.00", "600.00"],
    ["Freight", "1", "84.56", "84.56"],
]


def render_invoice_page() -> tuple[bytes, dict]:
    """An invoice: vendor header with address, invoice number and date, a bill-to block, a ruled
    item table (description, quantity, unit price, amount), subtotal, tax and a clearly labelled
    ``Total due: $1,234.56``.

    Returns:
        ``(png, truth)``; truth holds ``total`` (``"1,234.56"``), ``invoice_number``, ``date``,
        ``vendor``, ``bill_to`` (lines), ``items`` (rows, header first), ``subtotal``, ``tax``
        and ``currency``.

    """
    w = _Writer()
    vendor_face = font("DejaVuSans-Bold", 40)
    small = font("DejaVuSans", 22)
    body = font("DejaVuSans", 26)
    bold = font("DejaVuSans-Bold", 26)
    vendor = "Brightwater Supply Co."
    address = ["48 Harbour Road", "Portsmouth PO1 3AX", "billing@brightwater.example"]
    invoice_number = "INV-2024-0173"
    date = "2024-03-15"
    w.line(MARGIN, 100, vendor, vendor_face)
    for i, text in enumerate(address):
        w.line(MARGIN, 165 + i * 34, text, small)
    w.line(PAGE_WIDTH - MARGIN - vendor_face.getlength("INVOICE"), 100, "INVOICE", vendor_face)
    meta = [f"Invoice number: {invoice_number}", f"Date: {date}", "Due date: 2024-04-14"]
    for i, text in enumerate(meta):
        w.line(PAGE_WIDTH - MARGIN - body.getlength(text), 170 + i * 40, text, body)
    bill_to = ["Harlow Engineering GmbH", "Attn: Accounts Payable", "Ringstrasse 12, 10115 Berlin"]
    w.line(MARGIN, 390, "Bill to:", bold)
    for i, text in enumerate(bill_to):
        w.line(MARGIN, 432 + i * 38, text, body)
    widths = [440, 180, 200, 200]
    table_box = draw_table(w, MARGIN, 600, INVOICE_ITEMS, widths, body, bold, row_height=62)
    right = table_box[2]
    y = table_box[3] + 40
    totals = [("Subtotal:", "1,134.56"), ("Tax:", "100.00")]
    for label, value in totals:
        text = f"{label} ${value}"
        w.line(right - body.getlength(text) - 16, y, text, body)
        y += 44
    total_text = "Total due: $1,234.56"
    w.line(right - bold.getlength(total_text) - 16, y + 10, total_text, bold)
    w.paragraph(
        MARGIN,
        y + 140,
        PAGE_WIDTH - 2 * MARGIN,
        "Payment is due within 30 days. Please quote the invoice number with your payment. "
        "Thank you for your business.",
        body,
    )
    w.centered(PAGE_HEIGHT - 90, "Page 1 of 1", small)
    truth = {
        "total": "1,234.56",
        "currency": "USD",
        "invoice_number": invoice_number,
        "date": date,
        "vendor": vendor,
        "bill_to": bill_to,
        "items": INVOICE_ITEMS,
        "subtotal": "1,134.56",
        "tax": "100.00",
        "lines": w.placed,
    }
    return _png(w.image), truth
