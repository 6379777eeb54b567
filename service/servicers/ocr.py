"""InferenceService OCR RPC."""

from __future__ import annotations

from engines.errors import NotImplementedYetError
from service.servicers.base import RpcBase


class OcrRpcs(RpcBase):
    """Ocr: image and PDF bytes in, page results out."""

    async def Ocr(self, request_iterator, context):
        """Not built yet: UNIMPLEMENTED."""
        raise NotImplementedYetError("Ocr is not implemented yet in this server build")
        yield  # pragma: no cover - makes this an async generator like the real streaming handler
