"""PDF pages rendered in a child process that can be killed.

PDFium cannot be interrupted: a page whose content stream decompresses to millions of
operators (a 61 KB file can hold a 25 MB stream) keeps a renderer busy for minutes. Run on the
model's lane, that stalls every other call to the model, and a cancelled call cannot stop
it. So PDF work (opening, rendering, the text layer) runs in one "spawn" child process per
OCR engine, one request at a time, each under ``OcrLimits.page_timeout_s``; a request past its
limit, or whose caller is cancelled (client cancel or deadline), kills the child, and the next
request starts a new one. PDFium's one-thread rule holds: the child is single-threaded.

Each request carries the whole file (the child keeps no state between requests, so a restart
loses nothing): a pipe copy of at most ``max_bytes`` per page, small next to rendering.

Errors: a request past its time is RESOURCE_EXHAUSTED, reason PAGE_TOO_COMPLEX (the file, not the
client's deadline, is the cause: sending it again fails the same way), with ``page`` and
``page_timeout_s`` in the metadata; errors the child raises (CORRUPT_FILE, IMAGE_TOO_LARGE, ...)
reach the caller as they were raised; a child that dies by itself is INTERNAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import threading
from multiprocessing.connection import Connection
from typing import Any

from PIL import Image

from engines.errors import ResourceExhaustedError, RuntimeServiceError
from engines.ocr.documents import PdfDocument, TextLayer
from engines.ocr.types import OcrLimits

#: Added to the renderer's niceness (0-19 on Linux; higher yields the CPU to others first).
RENDER_NICENESS = 10


def _serve(conn: Connection) -> None:
    """The child's loop: answer ``(op, data, limits, page_number, dpi)`` requests until EOF.

    The child runs at a lower CPU priority (nice +:data:`RENDER_NICENESS`): a page may render for
    its whole time limit, and the models' lanes should have the cores first meanwhile.

    ``op`` is ``"open"`` (answer: page count), ``"render"`` (answer: ``(width, height, RGB
    bytes)``) or ``"text"`` (answer: :class:`TextLayer` or None). Each answer is ``("ok",
    value)`` or ``("error", class, message, reason, metadata)`` for a service error.
    """
    with contextlib.suppress(OSError):  # not permitted: render at normal priority
        os.nice(RENDER_NICENESS)
    while True:
        try:
            op, data, limits, page_number, dpi = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", _run(op, data, limits, page_number, dpi)))
        except RuntimeServiceError as exc:
            conn.send(("error", type(exc), exc.message, exc.reason, exc.metadata))


def _run(op: str, data: bytes, limits: OcrLimits, page_number: int, dpi: int) -> Any:
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


class PdfWorker:
    """One child process that opens and renders PDFs, killed when a request overruns.

    Requests are served one at a time (an asyncio lock); the child starts on the first request
    and after each kill. Use from one event loop.
    """

    def __init__(self) -> None:
        # Not a fork of the threaded server: children fork from the forkserver, a small process
        # started once with only this module imported, so that a restart after a kill costs
        # milliseconds of the server's cores, not a new interpreter's imports (half a second).
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([__name__])
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self._start_lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The child's process id, or None when none is running (for tests and logs)."""
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

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
        with self._start_lock:
            process, self._process, self._conn = self._process, None, None
        if process is not None:
            process.kill()
            process.join(1.0)

    async def _request(self, op: str, data: bytes, limits: OcrLimits, page_number: int, dpi: int) -> Any:
        async with self._lock:
            conn = self._connection()
            try:
                answer = await asyncio.wait_for(
                    asyncio.to_thread(_exchange, conn, (op, data, limits, page_number, dpi)),
                    limits.page_timeout_s,
                )
            except TimeoutError:
                self.stop()
                raise ResourceExhaustedError(
                    f"page {page_number or 1} took more than {limits.page_timeout_s} s to render "
                    "and was stopped; the page is too complex",
                    reason="PAGE_TOO_COMPLEX",
                    page=page_number or 1,
                    page_timeout_s=limits.page_timeout_s,
                ) from None
            except BaseException:  # cancelled (client cancel, deadline) or the child died
                self.stop()
                raise
        if answer[0] == "error":
            _, cls, message, reason, metadata = answer
            raise cls(message, reason=reason, **metadata)
        return answer[1]

    def _connection(self) -> Connection:
        with self._start_lock:
            if self._process is None or not self._process.is_alive():
                parent, child = self._context.Pipe()
                process = self._context.Process(target=_serve, args=(child,), name="ocr-pdf", daemon=True)
                process.start()
                child.close()  # so that the parent's recv sees EOF when the child dies
                self._process, self._conn = process, parent
            assert self._conn is not None
            return self._conn


def _exchange(conn: Connection, request: tuple) -> tuple:
    """Send ``request`` and wait for the answer (blocking; in a helper thread).

    After a kill the pipe breaks (EOFError, OSError): the connection is closed here, by the one
    thread that uses it, and the error goes to a caller that no longer waits for it.
    """
    try:
        conn.send(request)
        return conn.recv()
    except (EOFError, OSError):
        with contextlib.suppress(OSError):
            conn.close()
        raise
