"""AnalyzeDocument: pages read by an OCR model, then structured by a layout model, page by page.

Each page is two lane jobs: OCR on the OCR model's lane (a PDF page is rendered first in its
PDF worker, under the OCR limits), then layout detection and structure on the layout model's
lane. Other callers' work interleaves between them, as it does between Ocr pages.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from PIL.Image import Image

from engines.capabilities import LayoutAnalyzer, OcrReader
from engines.documents.types import StructuredPage
from engines.ocr.types import OcrPage
from service.model_manager import ModelManager
from service.tasks.ocr import OcrJob, select_pages


@dataclass(frozen=True, slots=True)
class DocumentReadJob:
    """How a document is read: the OCR part (model, pages, options, limits) and the layout model."""

    ocr: OcrJob
    layout_model: str


class DocumentTask:
    """Pages of a document as OCR pages with their images, or as structured pages.

    Args:
        manager: where OCR readers and layout analyzers are acquired.

    """

    def __init__(self, manager: ModelManager) -> None:
        self._manager = manager

    async def read(self, job: OcrJob, data: bytes) -> AsyncIterator[tuple[OcrPage, Image]]:
        """Yield the selected pages in order, each OCR'd with word boxes, with its RGB image.

        Bounded by ``job.limits`` like :meth:`service.tasks.ocr.OcrTask.read`.

        Raises:
            The errors of :meth:`service.tasks.ocr.OcrTask.read`.

        """
        # Word boxes are what tables and citations are built from.
        options = replace(job.options, return_boxes=True)
        async with self._manager.acquire(job.model, OcrReader, job.keep_alive) as reader:
            reader.resolve_languages(options.languages)
            document = await reader.open_document(data, job.mime_type, job.limits)
            try:
                for page_number in select_pages(job, document.page_count):
                    yield await reader.read_page_and_image(document, page_number, options)
            finally:
                reader.close_document(document)

    async def analyze(self, job: DocumentReadJob, data: bytes) -> AsyncIterator[StructuredPage]:
        """Yield the selected pages in order as structured pages (blocks, tables, Markdown).

        Raises:
            The errors of :meth:`read`; the layout model's: ModelNotFoundError,
                TaskNotSupportedError (a model that does not serve ``layout``), ModelLoadError.

        """
        async with (
            self._manager.acquire(job.layout_model, LayoutAnalyzer, job.ocr.keep_alive) as analyzer,
            contextlib.aclosing(self.read(job.ocr, data)) as pages,
        ):
            async for page, image in pages:
                yield await analyzer.analyze_page(image, page)
