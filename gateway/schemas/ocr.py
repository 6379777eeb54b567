"""JSON body of ``POST /v1/ocr`` (the multipart form takes the same fields, the file as ``file``)."""

from __future__ import annotations

from pydantic import Field

from gateway.schemas.base import Int32, OpenAIRequestModel, keep_alive_duration


class OcrJsonRequest(OpenAIRequestModel):
    """Body of ``POST /v1/ocr`` sent as JSON.

    Attributes:
        file: The image or PDF, base64-encoded, or a data URI (``data:image/png;base64,...``).
        model: OCR engine (catalog name, e.g. ``rapidocr``, ``tesseract``); empty uses the server default.
        mime_type: Type of the file; taken from the data URI or detected from the bytes when unset.
        languages: ISO 639-1 codes, e.g. ``["en", "de"]``.
        first_page, last_page: 1-based inclusive page range; unset reads every page.
        return_boxes: Return lines and words with boxes.
        use_pdf_text_layer: Return a PDF page's own text when it has any.
        pdf_dpi: Resolution PDF pages are rendered at.
        keep_alive: Keep-alive override for the engine (``"5m"``, seconds as an integer, ``"-1"``).

    """

    file: str = Field(min_length=1)
    model: str = ""
    mime_type: str = ""
    languages: list[str] = Field(default_factory=list)
    first_page: Int32 = Field(0, ge=0)
    last_page: Int32 = Field(0, ge=0)
    return_boxes: bool = False
    use_pdf_text_layer: bool = False
    pdf_dpi: Int32 = Field(0, ge=0)
    keep_alive: str | int | None = None

    @property
    def keep_alive_value(self) -> str:
        """Return ``keep_alive`` as the server's duration string (``""`` when unset)."""
        return keep_alive_duration(self.keep_alive)
