"""Files to page images, under limits: PNG, JPEG, TIFF (multi-page), WebP, BMP and PDF.

The format is read from the file's first bytes (magic numbers), never trusted from the name.
Limits are checked before anything large is decoded: an image's size comes from its header
(Pillow opens lazily) and a PDF page's from its media box, so a decompression bomb is refused
before its pixels exist. PDF pages are rendered with pypdfium2; PDFium is not thread-safe, so
every call on a :class:`PdfDocument` (closing included) must run on one thread: the engine's
PDF worker process (:mod:`engines.ocr.pdf_worker`), which also bounds a page's render time.

Errors: an empty file, an unknown format, a truncated or corrupt file, a page of an aspect ratio
the engines cannot use is INVALID_ARGUMENT (reasons EMPTY_FILE, UNSUPPORTED_FORMAT, CORRUPT_FILE,
IMAGE_ASPECT_RATIO_TOO_LARGE); a page over the pixel limit or a
request over the page limit is RESOURCE_EXHAUSTED (IMAGE_TOO_LARGE, TOO_MANY_PAGES).
"""

from __future__ import annotations

import abc
import io
import struct
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.ocr.types import IMAGE_FORMATS, PDF, SUPPORTED_MIME_TYPES, Box, OcrLimits, OcrLine
from engines.reasons import Reason


def sniff_mime_type(data: bytes) -> str | None:
    """MIME type from the magic number at the start of ``data``, or None when unknown.

    Sources: PNG spec §5.2; JFIF/EXIF SOI marker FF D8 FF; TIFF 6.0 §2 (``II*`` NUL or ``MM`` NUL ``*``);
    RIFF/WEBP container; BMP "BM"; PDF 1.7 §7.5.2 (``%PDF-`` within the first 1024 bytes).
    """
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "image/tiff"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"BM"):
        return "image/bmp"
    if b"%PDF-" in data[:1024]:
        return PDF
    return None


def _corrupt(kind: str, detail: str = "") -> InvalidArgumentError:
    suffix = f" ({detail})" if detail else ""
    return InvalidArgumentError(
        f"the {kind} file is truncated or corrupt{suffix}",
        reason=Reason.CORRUPT_FILE,
        field="chunk",
        format=kind,
    )


def _too_large(page: int, width: int, height: int, limit: int, hint: str = "") -> ResourceExhaustedError:
    return ResourceExhaustedError(
        f"page {page} is {width}x{height} = {width * height} pixels; the limit is {limit}{hint}",
        reason=Reason.IMAGE_TOO_LARGE,
        page=page,
        width=width,
        height=height,
        max_pixels=limit,
    )


def tiff_page_count(data: bytes, limit: int) -> int:
    """Pages of a TIFF file, counted by walking its IFD chain, up to ``limit + 1`` (cheap).

    TIFF 6.0 §2: an 8-byte header (byte order ``II``/``MM``, 42, offset of the first IFD); each IFD
    is a 2-byte entry count, 12 bytes per entry, and the 4-byte offset of the next IFD (0 ends the
    chain). Reading 6 bytes per page, this stops at ``limit + 1`` pages: Pillow's ``n_frames``
    loads every IFD and checks each offset against a list of all those before it, quadratic in
    the pages (see docs/architecture/design-notes.md#counting-tiff-pages).

    Raises:
        InvalidArgumentError: CORRUPT_FILE (an offset outside the file, or a chain that loops).

    """
    order = "<" if data[:2] == b"II" else ">"
    (offset,) = struct.unpack_from(f"{order}I", data, 4) if len(data) >= 8 else (0,)
    seen: set[int] = set()
    while offset and len(seen) <= limit:
        if offset in seen or offset + 2 > len(data):
            raise _corrupt("TIFF", "bad IFD offset")
        seen.add(offset)
        (entries,) = struct.unpack_from(f"{order}H", data, offset)
        link = offset + 2 + 12 * entries
        if link + 4 > len(data):
            raise _corrupt("TIFF", "bad IFD offset")
        (offset,) = struct.unpack_from(f"{order}I", data, link)
    if not seen:
        raise _corrupt("TIFF", "no pages")
    return len(seen)


def check_page_shape(page: int, width: int, height: int, limits: OcrLimits) -> None:
    """Refuse a page image the engines cannot use, from its size alone (before its pixels exist).

    One check for every page before any engine (RapidOCR, Tesseract, the layout and document
    models) sees it, decoded or rendered. Tesseract and the layout model take any size from 1x1;
    RapidOCR takes 1x1 too (it scales the short side up to 30 px) but fails past about 117:1 (its
    long side is cut to 2000 px and the short side rounded to a multiple of 32 becomes 0), and its
    detector scales the short side up to 736 px, so its work grows with the ratio (see
    docs/architecture/design-notes.md#narrow-images-and-rapidocr). So the bound is
    on the ratio, ``limits.max_aspect_ratio``; no page is too small once it has a pixel.

    Raises:
        InvalidArgumentError: IMAGE_ASPECT_RATIO_TOO_LARGE, with ``page``, ``width``, ``height``
            and ``max_aspect_ratio`` in the metadata.

    """
    long_side, short_side = max(width, height), min(width, height)
    if short_side > 0 and long_side > limits.max_aspect_ratio * short_side:
        raise InvalidArgumentError(
            f"page {page} is {width}x{height} pixels, an aspect ratio of {long_side / short_side:.4g}:1; "
            f"the limit is {limits.max_aspect_ratio:g}:1 (ocr_max_aspect_ratio)",
            reason=Reason.IMAGE_ASPECT_RATIO_TOO_LARGE,
            field="chunk",
            page=page,
            width=width,
            height=height,
            max_aspect_ratio=limits.max_aspect_ratio,
        )


@dataclass(slots=True)
class TextLayer:
    """Text of a PDF page's own text layer, with its runs as lines (pixels at the render dpi)."""

    text: str
    lines: list[OcrLine]
    width: int
    height: int


class Document(abc.ABC):
    """An opened file: its page count and its pages as RGB images."""

    mime_type: str
    page_count: int

    @abc.abstractmethod
    def render(self, page_number: int, dpi: int) -> Image.Image:
        """Page ``page_number`` (1-based) as an RGB image (``dpi`` applies to PDFs only).

        Raises:
            InvalidArgumentError: the page cannot be decoded (CORRUPT_FILE).
            ResourceExhaustedError: the page is over the pixel limit (IMAGE_TOO_LARGE).

        """

    def text_layer(self, page_number: int, dpi: int) -> TextLayer | None:
        """The page's own text (PDFs with a text layer), or None."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release native resources."""


class ImageDocument(Document):
    """A raster image; TIFF frames are pages (at most ``limits.max_pages``), other formats have one page.

    Raises (on opening):
        ResourceExhaustedError: IMAGE_TOO_LARGE (the first page), TOO_MANY_PAGES (a TIFF of more
            than ``limits.max_pages`` pages, counted before any is decoded).
        InvalidArgumentError: CORRUPT_FILE, IMAGE_ASPECT_RATIO_TOO_LARGE.

    """

    def __init__(self, data: bytes, mime_type: str, limits: OcrLimits) -> None:
        self.mime_type = mime_type
        self._limits = limits
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                self._image = Image.open(io.BytesIO(data), formats=[IMAGE_FORMATS[mime_type]])
        except Image.DecompressionBombError as exc:
            raise ResourceExhaustedError(
                f"the image is over the pixel limit ({exc})",
                reason=Reason.IMAGE_TOO_LARGE,
                max_pixels=limits.max_pixels,
            ) from None
        except (OSError, SyntaxError, ValueError) as exc:
            raise _corrupt(IMAGE_FORMATS[mime_type], type(exc).__name__) from None
        self.page_count = 1
        if mime_type == "image/tiff":
            self.page_count = tiff_page_count(data, limits.max_pages)
            if self.page_count > limits.max_pages:
                self._image.close()
                raise ResourceExhaustedError(
                    f"the TIFF file has more than {limits.max_pages} pages; the limit is "
                    f"{limits.max_pages} (ocr_max_pages)",
                    reason=Reason.TOO_MANY_PAGES,
                    max_pages=limits.max_pages,
                )
        self._check(1)

    def _check(self, page_number: int) -> None:
        width, height = self._image.size
        if width * height > self._limits.max_pixels:
            raise _too_large(page_number, width, height, self._limits.max_pixels)
        if width == 0 or height == 0:
            raise _corrupt(IMAGE_FORMATS[self.mime_type], "empty image")
        check_page_shape(page_number, width, height, self._limits)

    def render(self, page_number: int, dpi: int) -> Image.Image:
        """Decode frame ``page_number``; EXIF orientation applied, transparency composited on white."""
        kind = IMAGE_FORMATS[self.mime_type]
        try:
            self._image.seek(page_number - 1)
            self._check(page_number)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                self._image.load()
                image = ImageOps.exif_transpose(self._image) or self._image
                return _to_rgb(image)
        except Image.DecompressionBombError:
            width, height = self._image.size
            raise _too_large(page_number, width, height, self._limits.max_pixels) from None
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise _corrupt(kind, type(exc).__name__) from None

    def close(self) -> None:
        """Close the image."""
        self._image.close()


def _to_rgb(image: Image.Image) -> Image.Image:
    """RGB copy of ``image``; transparent areas become white (OCR wants dark text on light)."""
    if image.mode == "F" or image.mode.startswith("I"):  # 16/32-bit grey: stretch to 8 bits
        values = np.asarray(image, dtype=np.float64)
        low, high = float(values.min()), float(values.max())
        values = (values - low) * (255.0 / (high - low)) if high > low else np.zeros_like(values)
        image = Image.fromarray(values.astype(np.uint8), mode="L")
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


class PdfDocument(Document):
    """A PDF rendered page by page with pypdfium2 (all calls on one thread)."""

    def __init__(self, data: bytes, limits: OcrLimits) -> None:
        import pypdfium2 as pdfium

        self.mime_type = PDF
        self._limits = limits
        try:
            self._pdf = pdfium.PdfDocument(data)
            self.page_count = len(self._pdf)
        except pdfium.PdfiumError as exc:
            if "password" in str(exc).lower():
                raise InvalidArgumentError(
                    "the PDF is encrypted; send it without a password",
                    reason=Reason.ENCRYPTED_PDF,
                    field="chunk",
                ) from None
            raise _corrupt("PDF", str(exc)) from None
        if self.page_count < 1:
            self._pdf.close()
            raise _corrupt("PDF", "no pages")

    def _page_pixels(self, page, page_number: int, dpi: int) -> tuple[int, int, float]:
        width_pt, height_pt = page.get_size()
        scale = dpi / 72.0  # PDF user space unit = 1/72 inch (PDF 1.7 §8.3.2.3)
        width, height = round(width_pt * scale), round(height_pt * scale)
        if width * height > self._limits.max_pixels:
            raise _too_large(page_number, width, height, self._limits.max_pixels, "; lower pdf_dpi")
        check_page_shape(page_number, max(width, 1), max(height, 1), self._limits)
        return width, height, scale

    def render(self, page_number: int, dpi: int) -> Image.Image:
        """Render page ``page_number`` at ``dpi`` on a white background."""
        import pypdfium2 as pdfium

        try:
            page = self._pdf[page_number - 1]
            try:
                _, _, scale = self._page_pixels(page, page_number, dpi)
                return page.render(scale=scale, fill_color=(255, 255, 255, 255)).to_pil().convert("RGB")
            finally:
                page.close()
        except pdfium.PdfiumError as exc:
            raise _corrupt("PDF", str(exc)) from None

    def text_layer(self, page_number: int, dpi: int) -> TextLayer | None:
        """The page's text runs as lines, or None when the page has no text layer."""
        page = self._pdf[page_number - 1]
        try:
            width, height, scale = self._page_pixels(page, page_number, dpi)
            _, page_height = page.get_size()
            textpage = page.get_textpage()
            try:
                lines = []
                for i in range(textpage.count_rects()):
                    left, bottom, right, top = textpage.get_rect(i)
                    text = textpage.get_text_bounded(left, bottom, right, top).strip()
                    if text:
                        box = Box(
                            left * scale,
                            (page_height - top) * scale,
                            (right - left) * scale,
                            (top - bottom) * scale,
                        )
                        lines.append(OcrLine(text=text, box=box, confidence=1.0))
            finally:
                textpage.close()
        finally:
            page.close()
        if not lines:
            return None
        return TextLayer("\n".join(line.text for line in lines), lines, width, height)

    def close(self) -> None:
        """Close the PDF (on the thread that opened it)."""
        self._pdf.close()


@dataclass(frozen=True, slots=True)
class PdfFile:
    """A PDF checked and counted by the engine's PDF worker; its pages are rendered there.

    Holds the file's bytes (sent to the worker with each page request) and no native object,
    so it needs no thread of its own and closing it is a no-op.
    """

    data: bytes
    limits: OcrLimits
    page_count: int
    mime_type: str = PDF

    def close(self) -> None:
        """Nothing to release."""


def check_file(data: bytes, mime_type: str, limits: OcrLimits) -> str:
    """The MIME type of ``data`` after the checks that need no decoding (cheap).

    Args:
        data: the whole file.
        mime_type: the client's declared type, or ``""`` to detect it from the bytes.
        limits: the byte limit applies here.

    Raises:
        InvalidArgumentError: empty file, unsupported or mismatched format.
        ResourceExhaustedError: over the byte limit (FILE_TOO_LARGE).

    """
    if not data:
        raise InvalidArgumentError(
            "the file is empty: send its bytes in chunk", reason=Reason.EMPTY_FILE, field="chunk"
        )
    if len(data) > limits.max_bytes:
        raise ResourceExhaustedError(
            f"the file is {len(data)} bytes; the limit is {limits.max_bytes}",
            reason=Reason.FILE_TOO_LARGE,
            size_bytes=len(data),
            max_bytes=limits.max_bytes,
        )
    sniffed = sniff_mime_type(data)
    if sniffed is None:
        raise InvalidArgumentError(
            f"unsupported file format; supported: {', '.join(SUPPORTED_MIME_TYPES)}",
            reason=Reason.UNSUPPORTED_FORMAT,
            field="chunk",
        )
    if mime_type and mime_type != sniffed:
        raise InvalidArgumentError(
            f"options.mime_type is {mime_type} but the bytes are {sniffed}",
            reason=Reason.UNSUPPORTED_FORMAT,
            field="options.mime_type",
            mime_type=mime_type,
            detected=sniffed,
        )
    return sniffed


def open_document(data: bytes, mime_type: str, limits: OcrLimits) -> Document:
    """Open ``data`` as a document (blocking; PDFs only in the engine's PDF worker process).

    Args:
        data: the whole file.
        mime_type: the client's declared type, or ``""`` to detect it from the bytes.
        limits: byte, pixel and page limits.

    Raises:
        InvalidArgumentError: empty file, unsupported or mismatched format, corrupt file.
        ResourceExhaustedError: over the byte limit or the first page over the pixel limit.

    """
    sniffed = check_file(data, mime_type, limits)
    if sniffed == PDF:
        return PdfDocument(data, limits)
    return ImageDocument(data, sniffed, limits)
