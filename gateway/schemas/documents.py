"""Bodies of ``POST /v1/documents/{analyze,ask,extract,classify}``.

Each is sent as JSON (the file in base64 or a data URI) or as ``multipart/form-data`` (the file
as the form field ``file``, the other fields as form fields; see :func:`gateway.uploads.read_upload`).
The limits mirror the server's (``service/convert/documents.py``), so a bad value is refused here
with the field named.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

from gateway.schemas.base import JsonObject
from gateway.schemas.uploads import FileUploadRequest

MAX_QUESTION_CHARS = 2000
"""Longest question, in characters (the server's limit)."""
MAX_TOP_K = 16
MAX_ASK_TOKENS = 512
MAX_EXTRACT_TOKENS = 1024
MAX_CANDIDATE_LABELS = 64
MAX_LABEL_CHARS = 500

Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_LABEL_CHARS)]


class DocumentReadRequest(FileUploadRequest):
    """Base of the document bodies: the fields of :class:`FileUploadRequest` and the reading models.

    Attributes:
        ocr_model: OCR model (catalog name, e.g. ``rapidocr``); empty uses the server default.
        layout_model: Layout model (catalog name, e.g. ``rapid-layout``); empty uses the server default.

    """

    ocr_model: str = ""
    layout_model: str = ""


class DocumentAnalyzeRequest(DocumentReadRequest):
    """Body of ``POST /v1/documents/analyze``: every page as blocks in reading order, and Markdown.

    Attributes:
        return_lines: Also return each block's OCR lines with their boxes.

    """

    return_lines: bool = False


class DocumentAskRequest(DocumentReadRequest):
    """Body of ``POST /v1/documents/ask``: a question answered from the document, with citations.

    Attributes:
        question: The question, e.g. ``"What is the invoice total?"`` (1 to 2000 characters).
        model: A document question-answering model, or a generation model that answers from the
            blocks that best match the question; empty uses the server default.
        embedding_model: Embedding model that ranks the blocks for a generation model.
        top_k: Blocks given to a generation model, 0 to 16; 0 is the server default (3).
        max_tokens: Longest answer of a generation model, 0 to 512 tokens; 0 is the default (64).

    """

    question: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUESTION_CHARS)
    ]
    model: str = ""
    embedding_model: str = ""
    top_k: int = Field(0, ge=0, le=MAX_TOP_K)
    max_tokens: int = Field(0, ge=0, le=MAX_ASK_TOKENS)


class DocumentExtractRequest(DocumentReadRequest):
    """Body of ``POST /v1/documents/extract``: fields extracted from the document, with citations.

    Attributes:
        json_schema: JSON Schema of an object whose properties are the fields to extract
            (``{"type": "object", "properties": {...}}``); required with a generation model,
            ignored by field-extraction models. In a form, the schema as JSON text.
        model: A field-extraction model, or a generation model; empty uses the server default.
        max_tokens: Longest JSON a generation model may write, 0 to 1024 tokens; 0 is the default (256).

    """

    json_schema: JsonObject | None = None
    model: str = ""
    max_tokens: int = Field(0, ge=0, le=MAX_EXTRACT_TOKENS)

    @field_validator("json_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        is_object_schema = value is None or (
            value.get("type") == "object" and isinstance(value.get("properties"), dict)
        )
        if not is_object_schema:
            raise ValueError('must be an object schema: {"type": "object", "properties": {...}}')
        return value


class DocumentClassifyRequest(DocumentReadRequest):
    """Body of ``POST /v1/documents/classify``: the document's class among labels, with scores.

    Attributes:
        model: A document-classification model, or an embedding model that scores
            ``candidate_labels`` against the text (zero-shot); empty uses the server default.
        candidate_labels: Distinct labels to choose from (at most 64, each 1 to 500 characters);
            required with an embedding model. In a form, repeated or comma-separated.

    """

    model: str = ""
    candidate_labels: list[Label] = Field(default_factory=list, max_length=MAX_CANDIDATE_LABELS)

    @field_validator("candidate_labels")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("labels must be distinct")
        return value


# Answers: they document the JSON the routes return (built in gateway/translate/documents.py).


class Box(BaseModel):
    """Where something is on a page, in pixels of the page image."""

    x: float
    y: float
    width: float
    height: float


class Word(BaseModel):
    """A recognized word of a line."""

    text: str
    box: Box
    confidence: float


class Line(BaseModel):
    """A recognized line of a block (with ``return_lines``)."""

    text: str
    box: Box
    confidence: float
    words: list[Word]


class Cell(BaseModel):
    """One cell of a table; ``row`` and ``column`` are 0-based, spans at least 1."""

    row: int
    column: int
    row_span: int
    column_span: int
    text: str
    box: Box


class Table(BaseModel):
    """A table as a grid of cells in row-major order."""

    row_count: int
    column_count: int
    cells: list[Cell]


class Block(BaseModel):
    """A block of a page, in reading order.

    ``type`` is ``text``, ``title``, ``figure``, ``figure_caption``, ``table``, ``table_caption``,
    ``page_header``, ``page_footer``, ``reference`` or ``equation``; ``table`` is there for a
    table only, ``lines`` only with ``return_lines``.
    """

    type: str
    text: str
    box: Box
    confidence: float
    table: Table | None = None
    lines: list[Line] | None = None


class Page(BaseModel):
    """One page: its size, Markdown, the engines that read it and its blocks."""

    page_number: int
    width: int
    height: int
    markdown: str
    ocr_engine: str
    layout_engine: str
    blocks: list[Block]


class DocumentAnalysis(BaseModel):
    """Answer of ``POST /v1/documents/analyze``; ``markdown`` joins the pages' with ``---`` rules."""

    object: Literal["document.analysis"]
    model: str
    page_count: int
    markdown: str
    pages: list[Page]


class Citation(BaseModel):
    """Where an answer or a value was found: a 1-based page and a box on it."""

    page_number: int
    box: Box
    text: str


class DocumentAnswer(BaseModel):
    """Answer of ``POST /v1/documents/ask``: the answer (empty when there is none), its score, citations."""

    object: Literal["document.answer"]
    model: str
    answer: str
    score: float
    citations: list[Citation]


class ExtractedValue(BaseModel):
    """One leaf field of the extracted object: its path (``items[0].price``), value and sources."""

    name: str
    value: Any
    confidence: float
    citations: list[Citation]


class DocumentExtraction(BaseModel):
    """Answer of ``POST /v1/documents/extract``: the extracted object and each of its fields."""

    object: Literal["document.extraction"]
    model: str
    data: Any
    fields: list[ExtractedValue]


class LabelScore(BaseModel):
    """A class with its score in [0, 1]."""

    label: str
    score: float


class DocumentClassification(BaseModel):
    """Answer of ``POST /v1/documents/classify``: every label, best first (scores sum to 1)."""

    object: Literal["document.classification"]
    model: str
    labels: list[LabelScore]
