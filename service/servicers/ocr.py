"""InferenceService OCR RPC."""

from __future__ import annotations

import grpc

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.ocr.base import OcrEngine
from engines.ocr.documents import open_document
from engines.types import Task
from service.convert.ocr import OcrJob, ocr_job, ocr_response, select_pages
from service.request_context import note_model
from service.servicers.base import RpcBase


class OcrRpcs(RpcBase):
    """Ocr: image and PDF bytes in, page results out."""

    async def _receive(self, request_iterator) -> tuple[OcrJob, bytes]:
        """Read every message: options from the first, the file from the chunks in order.

        Raises:
            InvalidArgumentError: no message at all; bad options (see ``ocr_job``).
            ResourceExhaustedError: the chunks add up to more than ``ocr_max_bytes`` (raised as
                soon as they do, without reading the rest).

        """
        job: OcrJob | None = None
        data = bytearray()
        limit = self._settings.ocr_max_bytes
        async for message in request_iterator:
            if job is None:
                job = ocr_job(message.options, self._settings)
            data += message.chunk
            if len(data) > limit:
                raise ResourceExhaustedError(
                    f"the file is over the limit of {limit} bytes",
                    reason="FILE_TOO_LARGE",
                    max_bytes=limit,
                )
        if job is None:
            raise InvalidArgumentError(
                "no OcrRequest received: send options and the file's bytes",
                reason="EMPTY_FILE",
                field="chunk",
            )
        return job, bytes(data)

    async def Ocr(self, request_iterator, context: grpc.aio.ServicerContext):
        """Read text from an image or PDF; one response per page, in page order, as each is done."""
        job, data = await self._receive(request_iterator)
        note_model(job.model)
        async with self._manager.acquire(job.model, Task.OCR, job.keep_alive) as engine:
            assert isinstance(engine, OcrEngine)
            engine.resolve_languages(job.options.languages)  # refuse bad languages before any work
            document = await engine.executor.run(open_document, data, job.mime_type, job.limits)
            try:
                for page_number in select_pages(job, document.page_count):
                    page = await engine.executor.run(engine.read_page, document, page_number, job.options)
                    yield ocr_response(page, job.options.return_boxes)
            finally:
                # PDFium objects must be closed on the thread that made them; queued, not awaited,
                # so that this also runs when the call was cancelled.
                engine.executor.submit_detached(document.close)
