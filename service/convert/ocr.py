"""OcrOptions → engine options and limits, page selection, and OcrPage → OcrResponse."""

from __future__ import annotations

from dataclasses import dataclass

from universal_runtime.v1 import ocr_pb2 as pb

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.ocr.documents import SUPPORTED_MIME_TYPES
from engines.ocr.types import Box, OcrLimits, OcrOptions, OcrPage
from service.convert.validation import check_range, require
from service.settings import Settings

MAX_LANGUAGES = 8


@dataclass(frozen=True, slots=True)
class OcrJob:
    """A validated Ocr call: which engine, what to read, and the limits."""

    model: str
    keep_alive: str | None
    mime_type: str
    first_page: int
    last_page: int
    options: OcrOptions
    limits: OcrLimits


def ocr_job(options: pb.OcrOptions, settings: Settings) -> OcrJob:
    """Validate the options of the first OcrRequest.

    Raises:
        InvalidArgumentError: unknown MIME type, negative or inverted page range, dpi outside
            [36, 1200], empty or too many languages.

    """
    mime_type = options.mime_type.split(";")[0].strip().lower()
    require(
        not mime_type or mime_type in SUPPORTED_MIME_TYPES,
        "options.mime_type",
        f"unsupported type {options.mime_type!r}; supported: {', '.join(SUPPORTED_MIME_TYPES)}",
        reason="UNSUPPORTED_FORMAT",
    )
    require(options.first_page >= 0, "options.first_page", "must be >= 0 (1-based; 0 means the first page)")
    require(options.last_page >= 0, "options.last_page", "must be >= 0 (1-based; 0 means the last page)")
    require(
        not options.last_page or options.last_page >= max(options.first_page, 1),
        "options.last_page",
        f"must be >= first_page ({options.first_page})",
    )
    if options.pdf_dpi:
        check_range(options.pdf_dpi, "options.pdf_dpi", 36, 1200)
    languages = tuple(code.strip() for code in options.languages)
    require(len(languages) <= MAX_LANGUAGES, "options.languages", f"at most {MAX_LANGUAGES} languages")
    require(all(languages), "options.languages", "must not contain empty codes")
    return OcrJob(
        model=options.model or settings.ocr_default_model,
        keep_alive=options.keep_alive or None,
        mime_type=mime_type,
        first_page=options.first_page,
        last_page=options.last_page,
        options=OcrOptions(
            languages=languages,
            return_boxes=options.return_boxes,
            use_pdf_text_layer=options.use_pdf_text_layer,
            pdf_dpi=options.pdf_dpi or settings.ocr_pdf_dpi,
        ),
        limits=OcrLimits(
            max_bytes=settings.ocr_max_bytes,
            max_pixels=settings.ocr_max_pixels,
            max_pages=settings.ocr_max_pages,
        ),
    )


def select_pages(job: OcrJob, page_count: int) -> range:
    """1-based page numbers to read.

    Raises:
        InvalidArgumentError: the range starts or ends past the last page.
        ResourceExhaustedError: more pages than ``max_pages`` (reason TOO_MANY_PAGES).

    """
    first = job.first_page or 1
    last = job.last_page or page_count
    for name, value in (("options.first_page", first), ("options.last_page", last)):
        if value > page_count:
            raise InvalidArgumentError(
                f"{name} is {value} but the file has {page_count} page(s)",
                reason="PAGE_OUT_OF_RANGE",
                field=name,
                page_count=page_count,
            )
    count = last - first + 1
    if count > job.limits.max_pages:
        raise ResourceExhaustedError(
            f"{count} pages requested; the limit is {job.limits.max_pages} per call "
            "(read the rest with first_page/last_page)",
            reason="TOO_MANY_PAGES",
            pages=count,
            max_pages=job.limits.max_pages,
        )
    return range(first, last + 1)


def _box(box: Box) -> pb.BoundingBox:
    return pb.BoundingBox(x=box.x, y=box.y, width=box.width, height=box.height)


def ocr_response(page: OcrPage, return_boxes: bool) -> pb.OcrResponse:
    """One page's response; lines and words only when ``return_boxes``."""
    response = pb.OcrResponse(
        page_number=page.page_number,
        page_count=page.page_count,
        text=page.text,
        width=page.width,
        height=page.height,
        engine=page.engine,
        confidence=page.confidence,
    )
    if return_boxes:
        response.lines.extend(
            pb.OcrLine(
                text=line.text,
                box=_box(line.box),
                confidence=line.confidence,
                words=[pb.OcrWord(text=w.text, box=_box(w.box), confidence=w.confidence) for w in line.words],
            )
            for line in page.lines
        )
    return response
