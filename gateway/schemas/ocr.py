"""JSON body of ``POST /v1/ocr`` (the multipart form takes the same fields, the file as ``file``)."""

from __future__ import annotations

from gateway.schemas.uploads import FileUploadRequest


class OcrJsonRequest(FileUploadRequest):
    """Body of ``POST /v1/ocr`` sent as JSON: the upload fields of :class:`FileUploadRequest`, plus these.

    Attributes:
        model: OCR engine (catalog name, e.g. ``rapidocr``, ``tesseract``); empty uses the server default.
        return_boxes: Return lines and words with boxes.

    """

    model: str = ""
    return_boxes: bool = False
