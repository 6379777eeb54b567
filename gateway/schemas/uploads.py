"""Fields of every file upload (``POST /v1/ocr``, ``POST /v1/documents/*``): the file and how it is read.

These are the runtime's own routes: unknown fields (JSON keys or form fields) are refused (400).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway.schemas.base import StrictRequestModel, keep_alive_duration

# Not Int32 with Field(ge=0): the Annotated bound would win over the field's own, letting -1 through.
NonNegativeInt32 = Annotated[int, Field(ge=0, le=2**31 - 1)]

READ_OPTION_FIELDS = ("mime_type", "languages", "first_page", "last_page", "use_pdf_text_layer", "pdf_dpi")
"""Fields of :class:`FileUploadRequest` copied as they are into the same-named fields of the
options messages (``OcrOptions``, ``DocumentReadOptions``); ``keep_alive`` is converted."""


class FileUploadRequest(StrictRequestModel):
    """Base of the upload bodies: the file, sent as JSON (base64) or as a multipart form field.

    In a ``multipart/form-data`` upload the file is the form field ``file`` and the other fields
    are form fields of the same names (list fields repeated or comma-separated).

    Attributes:
        file: The image or PDF, base64-encoded, or a data URI (``data:image/png;base64,...``).
        mime_type: Type of the file; taken from the data URI (or the form part's content type) or
            detected from the bytes when unset.
        languages: ISO 639-1 codes, e.g. ``["en", "de"]``.
        first_page, last_page: 1-based inclusive page range; unset reads every page.
        use_pdf_text_layer: Use a PDF page's own text when it has any, instead of running OCR.
        pdf_dpi: Resolution PDF pages are rendered at; 0 is the server default.
        keep_alive: Keep-alive override for the models used (``"5m"``, seconds as an integer, ``"-1"``).

    """

    file: str = Field(min_length=1)
    mime_type: str = ""
    languages: list[str] = Field(default_factory=list)
    first_page: NonNegativeInt32 = 0
    last_page: NonNegativeInt32 = 0
    use_pdf_text_layer: bool = False
    pdf_dpi: NonNegativeInt32 = 0
    keep_alive: str | int | None = None

    @property
    def keep_alive_value(self) -> str:
        """Return ``keep_alive`` as the server's duration string (``""`` when unset)."""
        return keep_alive_duration(self.keep_alive)
