"""OcrRequest stream → OcrJob and file bytes, and OcrPage → OcrResponse."""

from __future__ import annotations

from collections.abc import AsyncIterable

from universal_runtime.v1 import ocr_pb2 as pb

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.ocr.types import SUPPORTED_MIME_TYPES, Box, OcrLimits, OcrOptions, OcrPage
from service.convert.messages import message_from
from service.convert.validation import check_range, require
from service.settings import Settings
from service.tasks.ocr import OcrJob

MAX_LANGUAGES = 8


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
            page_timeout_s=settings.ocr_page_timeout_s,
        ),
    )


async def read_upload(messages: AsyncIterable[pb.OcrRequest], settings: Settings) -> tuple[OcrJob, bytes]:
    """Read every message: options from the first, the file from the chunks in order.

    Bounded by ``settings.ocr_max_bytes``: reading stops at the first chunk past it. Bad options
    are reported only once the upload has been read (still within that bound): refused while it
    was still writing, grpc-python's client reports its own INTERNAL "Internal error from Core"
    about one time in thirty instead of the server's status (found by the fuzz tests).

    Raises:
        InvalidArgumentError: no message at all; bad options (see :func:`ocr_job`).
        ResourceExhaustedError: the chunks add up to more than ``ocr_max_bytes`` (FILE_TOO_LARGE).

    """
    job: OcrJob | None = None
    refused: InvalidArgumentError | None = None
    data = bytearray()
    limit = settings.ocr_max_bytes
    received = 0
    async for message in messages:
        if job is None and refused is None:
            try:
                job = ocr_job(message.options, settings)
            except InvalidArgumentError as exc:
                refused = exc
        chunk = message.chunk  # read once: each read copies the bytes
        received += len(chunk)
        if received > limit:
            raise ResourceExhaustedError(
                f"the file is over the limit of {limit} bytes",
                reason="FILE_TOO_LARGE",
                max_bytes=limit,
            )
        if refused is None:
            data += chunk
    if refused is not None:
        raise refused
    if job is None:
        raise InvalidArgumentError(
            "no OcrRequest received: send options and the file's bytes",
            reason="EMPTY_FILE",
            field="chunk",
        )
    return job, bytes(data)


def _box(box: Box) -> pb.BoundingBox:
    return message_from(pb.BoundingBox, box)


def ocr_response(page: OcrPage, return_boxes: bool) -> pb.OcrResponse:
    """One page's response; lines and words only when ``return_boxes``."""
    response = message_from(pb.OcrResponse, page, skip=("lines",))
    if return_boxes:
        response.lines.extend(
            message_from(
                pb.OcrLine,
                line,
                box=_box(line.box),
                words=[message_from(pb.OcrWord, w, box=_box(w.box)) for w in line.words],
            )
            for line in page.lines
        )
    return response
