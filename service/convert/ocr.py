"""OcrOptions (and documents' read options) → OcrJob, and OcrPage → OcrResponse."""

from __future__ import annotations

from universal_runtime.v1 import ocr_pb2 as pb
from universal_runtime.v1.documents_pb2 import DocumentReadOptions

from engines.ocr.types import SUPPORTED_MIME_TYPES, Box, OcrLimits, OcrLine, OcrOptions, OcrPage, OcrWord
from engines.reasons import Reason
from service.convert.messages import MessageCopy
from service.convert.validation import check_range, require
from service.settings import Settings
from service.tasks.ocr import OcrJob

MAX_LANGUAGES = 8


def ocr_job(options: pb.OcrOptions, settings: Settings) -> OcrJob:
    """Validate the options of the first OcrRequest (errors: see :func:`read_job`)."""
    return read_job(
        options, settings, model=options.model, return_boxes=options.return_boxes, prefix="options"
    )


def read_job(
    options: pb.OcrOptions | DocumentReadOptions,
    settings: Settings,
    *,
    model: str,
    prefix: str,
    return_boxes: bool = False,
) -> OcrJob:
    """Validate how a file is read: type, pages, languages, dpi; the limits come from ``settings``.

    Args:
        options: an Ocr call's options, or a document call's read options (the same fields).
        settings: server settings (limits, defaults).
        model: the OCR model named by the call; empty means ``settings.ocr_default_model``.
        return_boxes: whether the caller wants word boxes (the document tasks ask for them
            themselves).
        prefix: the options' path in the request, for error fields (``options``,
            ``options.document``).

    Raises:
        InvalidArgumentError: unknown MIME type, negative or inverted page range, dpi outside
            [36, 1200], empty or too many languages.

    """
    mime_type = options.mime_type.split(";")[0].strip().lower()
    require(
        not mime_type or mime_type in SUPPORTED_MIME_TYPES,
        f"{prefix}.mime_type",
        f"unsupported type {options.mime_type!r}; supported: {', '.join(SUPPORTED_MIME_TYPES)}",
        reason=Reason.UNSUPPORTED_FORMAT,
    )
    require(options.first_page >= 0, f"{prefix}.first_page", "must be >= 0 (1-based; 0 means the first page)")
    require(options.last_page >= 0, f"{prefix}.last_page", "must be >= 0 (1-based; 0 means the last page)")
    require(
        not options.last_page or options.last_page >= max(options.first_page, 1),
        f"{prefix}.last_page",
        f"must be >= first_page ({options.first_page})",
    )
    if options.pdf_dpi:
        check_range(options.pdf_dpi, f"{prefix}.pdf_dpi", 36, 1200)
    languages = tuple(code.strip() for code in options.languages)
    require(len(languages) <= MAX_LANGUAGES, f"{prefix}.languages", f"at most {MAX_LANGUAGES} languages")
    require(all(languages), f"{prefix}.languages", "must not contain empty codes")
    return OcrJob(
        model=model or settings.ocr_default_model,
        keep_alive=options.keep_alive or None,
        mime_type=mime_type,
        first_page=options.first_page,
        last_page=options.last_page,
        options=OcrOptions(
            languages=languages,
            return_boxes=return_boxes,
            use_pdf_text_layer=options.use_pdf_text_layer,
            pdf_dpi=options.pdf_dpi or settings.ocr_pdf_dpi,
        ),
        limits=OcrLimits(
            max_bytes=settings.ocr_max_bytes,
            max_pixels=settings.ocr_max_pixels,
            max_pages=settings.ocr_max_pages,
            page_timeout_s=settings.ocr_page_timeout_s,
            max_aspect_ratio=settings.ocr_max_aspect_ratio,
        ),
    )


box_message = MessageCopy(pb.BoundingBox, Box)
"""A box as its message."""
_WORD = MessageCopy(pb.OcrWord, OcrWord, given=("box",))
_LINE = MessageCopy(pb.OcrLine, OcrLine, given=("box", "words"))
# Lines are added after, and only when boxes were asked for.
_PAGE = MessageCopy(pb.OcrResponse, OcrPage, dropped=("lines",))


def line_message(line: OcrLine) -> pb.OcrLine:
    """A line with its box and words."""
    return _LINE(
        line,
        box=box_message(line.box),
        words=[_WORD(w, box=box_message(w.box)) for w in line.words],
    )


def ocr_response(page: OcrPage, return_boxes: bool) -> pb.OcrResponse:
    """One page's response; lines and words only when ``return_boxes``."""
    response = _PAGE(page)
    if return_boxes:
        response.lines.extend(line_message(line) for line in page.lines)
    return response
