"""The OCR engine base class: one page image in, lines with boxes out."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, TypeVar

from PIL import Image

from engines.base import Engine
from engines.ocr.documents import Document, PdfFile, check_file, open_document
from engines.ocr.pdf_worker import PdfWorker
from engines.ocr.types import PDF, OcrLimits, OcrLine, OcrOptions, OcrPage
from engines.options import EngineOptions
from engines.process_lane import FairTurns, take_turn
from engines.types import MemoryUsage, Task

OcrOptionsT = TypeVar("OcrOptionsT", bound=EngineOptions)
T = TypeVar("T")


class OcrEngine(Engine[OcrOptionsT]):
    """An OCR backend (the :class:`~engines.capabilities.OcrReader` capability).

    Subclasses implement :meth:`recognize` and :meth:`resolve_languages`. OCR engines run on the
    model's CPU lane (``select_device`` returns ``"cpu"``). PDF files are opened and rendered in a
    child process (:attr:`pdf_worker`, see :mod:`engines.ocr.pdf_worker`) that a page over its
    time limit or a cancelled call kills; images are decoded on the executor's thread.
    """

    tasks = frozenset({Task.OCR})
    # A page is seconds of batch work: it yields the cores to interactive models' lanes
    # (bench/isolation.py, "ocr-pages"); an idle machine still gives it everything.
    default_niceness = 10

    @classmethod
    def select_device(cls, preference: str) -> str:
        """Always the CPU, whatever the preference (see the class notes); never imports torch."""
        return "cpu"

    def memory_usage(self) -> MemoryUsage:
        """Unknown for these engines (ONNX Runtime sessions, or an external process)."""
        return MemoryUsage()

    @abc.abstractmethod
    def resolve_languages(self, languages: tuple[str, ...]) -> tuple[str, ...]:
        """Map ISO 639-1 codes to the engine's own codes (cheap; call before any work).

        Raises:
            InvalidArgumentError: a language the engine cannot read (reason UNSUPPORTED_LANGUAGE).

        """

    @abc.abstractmethod
    def recognize(
        self, image: Image.Image, languages: tuple[str, ...], *, words: bool = True
    ) -> list[OcrLine]:
        """Lines of ``image`` (RGB) in reading order, boxes in its pixels (blocking).

        Args:
            image: the page.
            languages: engine codes from :meth:`resolve_languages`.
            words: whether the caller wants word boxes; an engine for which they cost extra work
                may then skip them (lines keep their text, box and confidence either way).

        """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pdf_worker = PdfWorker()
        # Callers take fair turns for page jobs on the lane (engines.process_lane.take_turn).
        self.turns = FairTurns(self.spec.name)

    async def open_document(self, data: bytes, mime_type: str, limits: OcrLimits) -> Document | PdfFile:
        """Open ``data``: images on the engine's executor, PDFs in :attr:`pdf_worker`'s child.

        Raises:
            InvalidArgumentError, ResourceExhaustedError: unreadable, or over one of ``limits``
                (see :func:`engines.ocr.documents.open_document`), or PAGE_TOO_COMPLEX (a PDF
                whose opening takes longer than ``limits.page_timeout_s``).

        """
        mime_type = check_file(data, mime_type, limits)
        if mime_type == PDF:
            return PdfFile(data, limits, await self.pdf_worker.page_count(data, limits))
        return await self.executor.run(open_document, data, mime_type, limits)

    async def read_page(self, document: Document | PdfFile, page_number: int, options: OcrOptions) -> OcrPage:
        """Read page ``page_number`` (1-based) of ``document``.

        A PDF page is rendered (or its text layer read) in :attr:`pdf_worker`'s child, so the
        executor is not held while PDFium works; recognition is then one executor job. An image
        page is decoded and recognized in one executor job.

        Raises:
            InvalidArgumentError, ResourceExhaustedError: see ``Document.render`` and
                :class:`~engines.ocr.pdf_worker.PdfWorker` (PAGE_TOO_COMPLEX).

        """
        if not isinstance(document, PdfFile):
            page, _ = await self._page_job(self._read_image_page, document, page_number, options)
            return page
        page = await self._text_layer_page(document, page_number, options)
        if page is not None:
            return page
        image = await self.pdf_worker.render(document.data, document.limits, page_number, options.pdf_dpi)
        return await self._page_job(self._recognize_page, image, page_number, document.page_count, options)

    async def read_page_and_image(
        self, document: Document | PdfFile, page_number: int, options: OcrOptions
    ) -> tuple[OcrPage, Image.Image]:
        """Read a page like :meth:`read_page` and also return its RGB image (for layout analysis).

        A PDF page read from its text layer is still rendered (at ``options.pdf_dpi``, the
        resolution of the text layer's boxes), in the PDF worker's child.

        Raises:
            The errors of :meth:`read_page`.

        """
        if not isinstance(document, PdfFile):
            return await self._page_job(self._read_image_page, document, page_number, options)
        layer_page = await self._text_layer_page(document, page_number, options)
        image = await self.pdf_worker.render(document.data, document.limits, page_number, options.pdf_dpi)
        if layer_page is not None:
            return layer_page, image
        page = await self._page_job(self._recognize_page, image, page_number, document.page_count, options)
        return page, image

    async def _page_job(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on the lane in the caller's fair turn (priority class, then key)."""
        return await take_turn(self.turns, lambda: self.executor.run(function, *args))

    async def _text_layer_page(
        self, document: PdfFile, page_number: int, options: OcrOptions
    ) -> OcrPage | None:
        """The page from the PDF's own text layer when the options ask for it and it has one."""
        if not options.use_pdf_text_layer:
            return None
        layer = await self.pdf_worker.text_layer(document.data, document.limits, page_number, options.pdf_dpi)
        if layer is None:
            return None
        return OcrPage(
            page_number=page_number,
            page_count=document.page_count,
            text=layer.text,
            lines=layer.lines,
            width=layer.width,
            height=layer.height,
            engine="pdf_text_layer",
            confidence=1.0,
        )

    def close_document(self, document: Document | PdfFile) -> None:
        """Queue ``document.close`` on the executor, not awaited, so it also runs after a cancel."""
        self.executor.submit_detached(document.close)

    def _read_image_page(
        self, document: Document, page_number: int, options: OcrOptions
    ) -> tuple[OcrPage, Image.Image]:
        """Decode page ``page_number`` of an image file and recognize it (blocking); also the image.

        Raises:
            InvalidArgumentError, ResourceExhaustedError: see ``Document.render``.

        """
        image = document.render(page_number, options.pdf_dpi)
        return self._recognize_page(image, page_number, document.page_count, options), image

    def _recognize_page(
        self, image: Image.Image, page_number: int, page_count: int, options: OcrOptions
    ) -> OcrPage:
        """OCR of one page image (RGB) with the options' languages (blocking)."""
        lines = self.recognize(image, self.resolve_languages(options.languages), words=options.return_boxes)
        confidence = sum(line.confidence for line in lines) / len(lines) if lines else 0.0
        return OcrPage(
            page_number=page_number,
            page_count=page_count,
            text="\n".join(line.text for line in lines),
            lines=lines,
            width=image.width,
            height=image.height,
            engine=self.backend,
            confidence=confidence,
        )
