"""PDF pages rendered in a child process that can be killed.

PDFium cannot be interrupted: a page whose content stream decompresses to millions of
operators (a 61 KB file can hold a 25 MB stream) keeps a renderer busy for minutes. Run on the
model's lane, that stalls every other call to the model, and a cancelled call cannot stop
it. So PDF work (opening, rendering, the text layer) runs in one process lane
(:class:`~engines.process_lane.ProcessLane`, at nice +10) per OCR engine, one request at a
time, callers taking turns (least used first, :class:`~engines.process_lane.FairTurns`: one
caller's bombs queue only its own documents), each under ``OcrLimits.page_timeout_s``; a request
past its limit, or whose caller is cancelled (client cancel or deadline), kills the child, and the
next request starts a new one.
PDFium's one-thread rule holds: the child is single-threaded.

Each request carries the whole file (the child keeps no state between requests, so a restart
loses nothing): a pipe copy of at most ``max_bytes`` per page, small next to rendering.

Errors: a request past its time is RESOURCE_EXHAUSTED, reason PAGE_TOO_COMPLEX (the file, not the
client's deadline, is the cause: sending it again fails the same way), with ``page`` and
``page_timeout_s`` in the metadata; errors the child raises (CORRUPT_FILE, IMAGE_TOO_LARGE, ...)
reach the caller as they were raised; a child that dies by itself is INTERNAL.
"""

from __future__ import annotations

from typing import Any

from PIL import Image

from engines.errors import ResourceExhaustedError
from engines.ocr.documents import PdfDocument, TextLayer
from engines.ocr.types import OcrLimits
from engines.process_lane import ProcessLane
from engines.reasons import Reason


def _run(op: str, data: bytes, limits: OcrLimits, page_number: int, dpi: int) -> Any:
    """Run ``op`` on ``data`` in the child and close the document.

    ``op`` is ``"open"`` (answer: the page count), ``"text"`` (:class:`TextLayer` or None) or
    ``"render"`` (``(width, height, RGB bytes)``).
    """
    document = PdfDocument(data, limits)
    try:
        if op == "open":
            return document.page_count
        if op == "text":
            return document.text_layer(page_number, dpi)
        image = document.render(page_number, dpi)
        return image.width, image.height, image.tobytes()
    finally:
        document.close()


#: What the PDF children import, for the forkserver to import once
#: (:func:`~engines.process_lane.preload_modules`). It
#: takes effect only if named before the forkserver starts: the server names it at start-up, since
#: another lane (an anomaly fit) may start the forkserver before any OCR model loads.
PRELOAD = (__name__, "pypdfium2")


class PdfWorker:
    """One child process that opens and renders PDFs, killed when a request overruns.

    Requests are served one at a time; the child starts on the first request and after each
    kill. Use from one event loop.
    """

    def __init__(self) -> None:
        # pypdfium2 is imported by the forkserver, once: imported by each new child on its first
        # job (after every kill), at nice +10 on busy cores, it would take far longer than its CPU
        # time, spent outside the page's timer (see
        # docs/architecture/design-notes.md#pdf-worker-imports-in-the-forkserver).
        self._lane = ProcessLane("ocr-pdf", preload=PRELOAD)

    @property
    def pid(self) -> int | None:
        """The child's process id, or None when none is running (for tests and logs)."""
        return self._lane.pid

    async def page_count(self, data: bytes, limits: OcrLimits) -> int:
        """Open ``data`` in the child and return its page count (see :class:`PdfDocument`).

        Raises:
            InvalidArgumentError: corrupt or encrypted PDF.
            ResourceExhaustedError: PAGE_TOO_COMPLEX (over ``limits.page_timeout_s``).

        """
        return await self._request("open", data, limits, 0, 0)

    async def render(self, data: bytes, limits: OcrLimits, page_number: int, dpi: int) -> Image.Image:
        """Page ``page_number`` (1-based) of ``data`` at ``dpi`` as an RGB image, rendered in the child.

        Raises:
            InvalidArgumentError: CORRUPT_FILE.
            ResourceExhaustedError: IMAGE_TOO_LARGE (``limits.max_pixels``), PAGE_TOO_COMPLEX.

        """
        width, height, pixels = await self._request("render", data, limits, page_number, dpi)
        return Image.frombytes("RGB", (width, height), pixels)

    async def text_layer(
        self, data: bytes, limits: OcrLimits, page_number: int, dpi: int
    ) -> TextLayer | None:
        """The page's own text (see :meth:`PdfDocument.text_layer`), read in the child.

        Raises:
            ResourceExhaustedError: IMAGE_TOO_LARGE, PAGE_TOO_COMPLEX.

        """
        return await self._request("text", data, limits, page_number, dpi)

    def stop(self) -> None:
        """Kill the child if one runs (blocking for at most a second)."""
        self._lane.stop()

    async def _request(self, op: str, data: bytes, limits: OcrLimits, page_number: int, dpi: int) -> Any:
        try:
            return await self._lane.run(
                _run, op, data, limits, page_number, dpi, timeout_s=limits.page_timeout_s
            )
        except TimeoutError:
            raise ResourceExhaustedError(
                f"page {page_number or 1} took more than {limits.page_timeout_s} s to render "
                "and was stopped; the page is too complex",
                reason=Reason.PAGE_TOO_COMPLEX,
                page=page_number or 1,
                page_timeout_s=limits.page_timeout_s,
            ) from None
