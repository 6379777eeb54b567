"""The OCR engine base class: one page image in, lines with boxes out."""

from __future__ import annotations

import abc

from PIL import Image

from engines.base import Engine
from engines.ocr.documents import Document, open_document
from engines.ocr.types import OcrLimits, OcrLine, OcrOptions, OcrPage
from engines.types import MemoryUsage, Task


class OcrEngine(Engine):
    """An OCR backend (the :class:`~engines.capabilities.OcrReader` capability).

    Subclasses implement :meth:`recognize` and :meth:`resolve_languages`. OCR engines run on the
    CPU executor (``select_device`` returns ``"cpu"``): PDFium, which renders PDF pages, is not
    thread-safe, so every document call (open, read, close) runs on that one executor's thread.
    """

    tasks = frozenset({Task.OCR})

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

    async def open_document(self, data: bytes, mime_type: str, limits: OcrLimits) -> Document:
        """Open ``data`` on the engine's executor (see :func:`engines.ocr.documents.open_document`).

        Raises:
            InvalidArgumentError, ResourceExhaustedError: unreadable, or over one of ``limits``.

        """
        return await self.executor.run(open_document, data, mime_type, limits)

    async def read_page(self, document: Document, page_number: int, options: OcrOptions) -> OcrPage:
        """Read page ``page_number`` (1-based) of ``document`` as one executor job.

        Raises:
            InvalidArgumentError, ResourceExhaustedError: see ``Document.render``.

        """
        return await self.executor.run(self._read_page, document, page_number, options)

    def close_document(self, document: Document) -> None:
        """Queue ``document.close`` on the executor, not awaited, so it also runs after a cancel."""
        self.executor.submit_detached(document.close)

    def _read_page(self, document: Document, page_number: int, options: OcrOptions) -> OcrPage:
        """Read one page: its PDF text layer when asked for and present, else OCR (blocking).

        Raises:
            InvalidArgumentError, ResourceExhaustedError: see ``Document.render``.

        """
        if options.use_pdf_text_layer:
            layer = document.text_layer(page_number, options.pdf_dpi)
            if layer is not None:
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
        image = document.render(page_number, options.pdf_dpi)
        lines = self.recognize(image, self.resolve_languages(options.languages), words=options.return_boxes)
        confidence = sum(line.confidence for line in lines) / len(lines) if lines else 0.0
        return OcrPage(
            page_number=page_number,
            page_count=document.page_count,
            text="\n".join(line.text for line in lines),
            lines=lines,
            width=image.width,
            height=image.height,
            engine=self.backend,
            confidence=confidence,
        )
