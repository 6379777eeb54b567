"""Plain dataclasses of the OCR engines (no protobuf here). Boxes are in pixels of the page image."""

from __future__ import annotations

from dataclasses import dataclass, field

PDF = "application/pdf"
# MIME type -> Pillow format name.
IMAGE_FORMATS = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/tiff": "TIFF",
    "image/webp": "WEBP",
    "image/bmp": "BMP",
}
SUPPORTED_MIME_TYPES = (*IMAGE_FORMATS, PDF)


@dataclass(frozen=True, slots=True)
class Box:
    """Axis-aligned box, origin at the top-left of the page image, in pixels."""

    x: float
    y: float
    width: float
    height: float

    @staticmethod
    def around(points: list[tuple[float, float]] | list[list[float]]) -> Box:
        """The smallest box holding ``points`` ((x, y) pairs, e.g. a quadrilateral's corners)."""
        xs = [float(p[0]) for p in points]
        ys = [float(p[1]) for p in points]
        return Box(min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys))

    @staticmethod
    def union(boxes: list[Box]) -> Box:
        """The smallest box holding every box of ``boxes`` (non-empty)."""
        left = min(b.x for b in boxes)
        top = min(b.y for b in boxes)
        right = max(b.x + b.width for b in boxes)
        bottom = max(b.y + b.height for b in boxes)
        return Box(left, top, right - left, bottom - top)


@dataclass(slots=True)
class OcrWord:
    """A recognized word; ``confidence`` in [0, 1]."""

    text: str
    box: Box
    confidence: float


@dataclass(slots=True)
class OcrLine:
    """A recognized line; ``words`` is empty when the engine gives no word boxes."""

    text: str
    box: Box
    confidence: float
    words: list[OcrWord] = field(default_factory=list)


@dataclass(slots=True)
class OcrPage:
    """Result of one page.

    Attributes:
        page_number: 1-based page number in the file.
        page_count: pages in the file.
        text: lines in reading order, separated by newlines.
        lines: the lines with boxes.
        width, height: size of the page image in pixels (PDF pages: rendered at the request's dpi).
        engine: ``rapidocr``, ``tesseract`` or ``pdf_text_layer``.
        confidence: mean line confidence in [0, 1] (0 for a page without text).

    """

    page_number: int
    page_count: int
    text: str
    lines: list[OcrLine]
    width: int
    height: int
    engine: str
    confidence: float


@dataclass(frozen=True, slots=True)
class OcrOptions:
    """What to read and how.

    Attributes:
        languages: ISO 639-1 codes (``en``, ``de``), or engine-native codes; empty means the
            engine default.
        return_boxes: whether the caller wants lines and words; without it an engine may skip
            work that only word boxes need (RapidOCR's per-character positions).
        use_pdf_text_layer: for PDF pages with a text layer, return it instead of running OCR.
        pdf_dpi: resolution PDF pages are rendered at, dots per inch.

    """

    languages: tuple[str, ...] = ()
    return_boxes: bool = False
    use_pdf_text_layer: bool = False
    pdf_dpi: int = 200


@dataclass(frozen=True, slots=True)
class OcrLimits:
    """Limits on one file: bytes, pixels per page (decoded or rendered), pages read.

    ``page_timeout_s`` bounds the seconds one PDF page may take to open, render or read its
    text layer (PDFium work, in a child process that is killed past it). ``max_aspect_ratio``
    bounds a page image's long side over its short side (see
    :func:`engines.ocr.documents.check_page_shape`).
    """

    max_bytes: int
    max_pixels: int
    max_pages: int
    page_timeout_s: float = 30.0
    max_aspect_ratio: float = 20.0
