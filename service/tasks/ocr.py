"""Ocr: open the document once, then read the selected pages one executor job each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from engines.capabilities import OcrReader
from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.ocr.types import OcrLimits, OcrOptions, OcrPage
from engines.reasons import Reason
from service.model_manager import ModelManager


@dataclass(frozen=True, slots=True)
class OcrJob:
    """A validated Ocr call: which engine, what to read, and the limits.

    ``first_page``/``last_page`` are 1-based; 0 means the first/last page of the file.
    """

    model: str
    keep_alive: str | None
    mime_type: str
    first_page: int
    last_page: int
    options: OcrOptions
    limits: OcrLimits


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
                reason=Reason.PAGE_OUT_OF_RANGE,
                field=name,
                page_count=page_count,
            )
    count = last - first + 1
    if count > job.limits.max_pages:
        raise ResourceExhaustedError(
            f"{count} pages requested; the limit is {job.limits.max_pages} per call "
            "(read the rest with first_page/last_page)",
            reason=Reason.TOO_MANY_PAGES,
            pages=count,
            max_pages=job.limits.max_pages,
        )
    return range(first, last + 1)


class OcrTask:
    """Text from images and PDFs, page by page.

    Args:
        manager: where OCR readers are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def read(self, job: OcrJob, data: bytes) -> AsyncIterator[OcrPage]:
        """Yield the selected pages in order, each as soon as it is read.

        Bounded by ``job.limits`` (bytes, pixels per page, pages per call), checked before the
        pages are rendered. Each page is one job on the reader's executor, so other callers'
        work interleaves between pages.

        Raises:
            InvalidArgumentError: unsupported language, unreadable file, page out of range.
            ResourceExhaustedError: over a limit of ``job.limits``.
            Errors of :meth:`ModelManager.acquire`.

        """
        async with self._manager.acquire(job.model, OcrReader, job.keep_alive) as reader:
            reader.resolve_languages(job.options.languages)  # refuse bad languages before any work
            document = await reader.open_document(data, job.mime_type, job.limits)
            try:
                for page_number in select_pages(job, document.page_count):
                    yield await reader.read_page(document, page_number, job.options)
            finally:
                # PDFium objects must be closed on the thread that made them; queued, not
                # awaited, so that this also runs when the call was cancelled.
                reader.close_document(document)
