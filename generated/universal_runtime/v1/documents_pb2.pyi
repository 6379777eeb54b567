from universal_runtime.v1 import ocr_pb2 as _ocr_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BlockType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLOCK_TYPE_UNSPECIFIED: _ClassVar[BlockType]
    BLOCK_TYPE_TEXT: _ClassVar[BlockType]
    BLOCK_TYPE_TITLE: _ClassVar[BlockType]
    BLOCK_TYPE_FIGURE: _ClassVar[BlockType]
    BLOCK_TYPE_FIGURE_CAPTION: _ClassVar[BlockType]
    BLOCK_TYPE_TABLE: _ClassVar[BlockType]
    BLOCK_TYPE_TABLE_CAPTION: _ClassVar[BlockType]
    BLOCK_TYPE_PAGE_HEADER: _ClassVar[BlockType]
    BLOCK_TYPE_PAGE_FOOTER: _ClassVar[BlockType]
    BLOCK_TYPE_REFERENCE: _ClassVar[BlockType]
    BLOCK_TYPE_EQUATION: _ClassVar[BlockType]
BLOCK_TYPE_UNSPECIFIED: BlockType
BLOCK_TYPE_TEXT: BlockType
BLOCK_TYPE_TITLE: BlockType
BLOCK_TYPE_FIGURE: BlockType
BLOCK_TYPE_FIGURE_CAPTION: BlockType
BLOCK_TYPE_TABLE: BlockType
BLOCK_TYPE_TABLE_CAPTION: BlockType
BLOCK_TYPE_PAGE_HEADER: BlockType
BLOCK_TYPE_PAGE_FOOTER: BlockType
BLOCK_TYPE_REFERENCE: BlockType
BLOCK_TYPE_EQUATION: BlockType

class DocumentReadOptions(_message.Message):
    __slots__ = ("ocr_model", "layout_model", "mime_type", "first_page", "last_page", "languages", "use_pdf_text_layer", "pdf_dpi", "keep_alive")
    OCR_MODEL_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_MODEL_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    FIRST_PAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_PAGE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    USE_PDF_TEXT_LAYER_FIELD_NUMBER: _ClassVar[int]
    PDF_DPI_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    ocr_model: str
    layout_model: str
    mime_type: str
    first_page: int
    last_page: int
    languages: _containers.RepeatedScalarFieldContainer[str]
    use_pdf_text_layer: bool
    pdf_dpi: int
    keep_alive: str
    def __init__(self, ocr_model: _Optional[str] = ..., layout_model: _Optional[str] = ..., mime_type: _Optional[str] = ..., first_page: _Optional[int] = ..., last_page: _Optional[int] = ..., languages: _Optional[_Iterable[str]] = ..., use_pdf_text_layer: _Optional[bool] = ..., pdf_dpi: _Optional[int] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class AnalyzeDocumentOptions(_message.Message):
    __slots__ = ("document", "return_lines")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    RETURN_LINES_FIELD_NUMBER: _ClassVar[int]
    document: DocumentReadOptions
    return_lines: bool
    def __init__(self, document: _Optional[_Union[DocumentReadOptions, _Mapping]] = ..., return_lines: _Optional[bool] = ...) -> None: ...

class AnalyzeDocumentRequest(_message.Message):
    __slots__ = ("options", "chunk")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    options: AnalyzeDocumentOptions
    chunk: bytes
    def __init__(self, options: _Optional[_Union[AnalyzeDocumentOptions, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class TableCell(_message.Message):
    __slots__ = ("row", "column", "row_span", "column_span", "text", "box")
    ROW_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    ROW_SPAN_FIELD_NUMBER: _ClassVar[int]
    COLUMN_SPAN_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    row: int
    column: int
    row_span: int
    column_span: int
    text: str
    box: _ocr_pb2.BoundingBox
    def __init__(self, row: _Optional[int] = ..., column: _Optional[int] = ..., row_span: _Optional[int] = ..., column_span: _Optional[int] = ..., text: _Optional[str] = ..., box: _Optional[_Union[_ocr_pb2.BoundingBox, _Mapping]] = ...) -> None: ...

class Table(_message.Message):
    __slots__ = ("row_count", "column_count", "cells")
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    COLUMN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CELLS_FIELD_NUMBER: _ClassVar[int]
    row_count: int
    column_count: int
    cells: _containers.RepeatedCompositeFieldContainer[TableCell]
    def __init__(self, row_count: _Optional[int] = ..., column_count: _Optional[int] = ..., cells: _Optional[_Iterable[_Union[TableCell, _Mapping]]] = ...) -> None: ...

class DocumentBlock(_message.Message):
    __slots__ = ("type", "text", "box", "confidence", "lines", "table")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    type: BlockType
    text: str
    box: _ocr_pb2.BoundingBox
    confidence: float
    lines: _containers.RepeatedCompositeFieldContainer[_ocr_pb2.OcrLine]
    table: Table
    def __init__(self, type: _Optional[_Union[BlockType, str]] = ..., text: _Optional[str] = ..., box: _Optional[_Union[_ocr_pb2.BoundingBox, _Mapping]] = ..., confidence: _Optional[float] = ..., lines: _Optional[_Iterable[_Union[_ocr_pb2.OcrLine, _Mapping]]] = ..., table: _Optional[_Union[Table, _Mapping]] = ...) -> None: ...

class AnalyzeDocumentResponse(_message.Message):
    __slots__ = ("page_number", "page_count", "width", "height", "blocks", "markdown", "ocr_engine", "layout_engine")
    PAGE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    OCR_ENGINE_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_ENGINE_FIELD_NUMBER: _ClassVar[int]
    page_number: int
    page_count: int
    width: int
    height: int
    blocks: _containers.RepeatedCompositeFieldContainer[DocumentBlock]
    markdown: str
    ocr_engine: str
    layout_engine: str
    def __init__(self, page_number: _Optional[int] = ..., page_count: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[DocumentBlock, _Mapping]]] = ..., markdown: _Optional[str] = ..., ocr_engine: _Optional[str] = ..., layout_engine: _Optional[str] = ...) -> None: ...

class DocumentCitation(_message.Message):
    __slots__ = ("page_number", "box", "text")
    PAGE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    page_number: int
    box: _ocr_pb2.BoundingBox
    text: str
    def __init__(self, page_number: _Optional[int] = ..., box: _Optional[_Union[_ocr_pb2.BoundingBox, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class AskDocumentOptions(_message.Message):
    __slots__ = ("document", "question", "model", "embedding_model", "top_k", "max_tokens")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    document: DocumentReadOptions
    question: str
    model: str
    embedding_model: str
    top_k: int
    max_tokens: int
    def __init__(self, document: _Optional[_Union[DocumentReadOptions, _Mapping]] = ..., question: _Optional[str] = ..., model: _Optional[str] = ..., embedding_model: _Optional[str] = ..., top_k: _Optional[int] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class AskDocumentRequest(_message.Message):
    __slots__ = ("options", "chunk")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    options: AskDocumentOptions
    chunk: bytes
    def __init__(self, options: _Optional[_Union[AskDocumentOptions, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class AskDocumentResponse(_message.Message):
    __slots__ = ("answer", "score", "citations", "model")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    answer: str
    score: float
    citations: _containers.RepeatedCompositeFieldContainer[DocumentCitation]
    model: str
    def __init__(self, answer: _Optional[str] = ..., score: _Optional[float] = ..., citations: _Optional[_Iterable[_Union[DocumentCitation, _Mapping]]] = ..., model: _Optional[str] = ...) -> None: ...

class ExtractDocumentOptions(_message.Message):
    __slots__ = ("document", "json_schema", "model", "max_tokens")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    document: DocumentReadOptions
    json_schema: str
    model: str
    max_tokens: int
    def __init__(self, document: _Optional[_Union[DocumentReadOptions, _Mapping]] = ..., json_schema: _Optional[str] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class ExtractDocumentRequest(_message.Message):
    __slots__ = ("options", "chunk")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    options: ExtractDocumentOptions
    chunk: bytes
    def __init__(self, options: _Optional[_Union[ExtractDocumentOptions, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class ExtractedField(_message.Message):
    __slots__ = ("name", "value_json", "confidence", "citations")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    value_json: str
    confidence: float
    citations: _containers.RepeatedCompositeFieldContainer[DocumentCitation]
    def __init__(self, name: _Optional[str] = ..., value_json: _Optional[str] = ..., confidence: _Optional[float] = ..., citations: _Optional[_Iterable[_Union[DocumentCitation, _Mapping]]] = ...) -> None: ...

class ExtractDocumentResponse(_message.Message):
    __slots__ = ("json", "fields", "model")
    JSON_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    json: str
    fields: _containers.RepeatedCompositeFieldContainer[ExtractedField]
    model: str
    def __init__(self, json: _Optional[str] = ..., fields: _Optional[_Iterable[_Union[ExtractedField, _Mapping]]] = ..., model: _Optional[str] = ...) -> None: ...

class ClassifyDocumentOptions(_message.Message):
    __slots__ = ("document", "model", "candidate_labels")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_LABELS_FIELD_NUMBER: _ClassVar[int]
    document: DocumentReadOptions
    model: str
    candidate_labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, document: _Optional[_Union[DocumentReadOptions, _Mapping]] = ..., model: _Optional[str] = ..., candidate_labels: _Optional[_Iterable[str]] = ...) -> None: ...

class ClassifyDocumentRequest(_message.Message):
    __slots__ = ("options", "chunk")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    options: ClassifyDocumentOptions
    chunk: bytes
    def __init__(self, options: _Optional[_Union[ClassifyDocumentOptions, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class DocumentClass(_message.Message):
    __slots__ = ("label", "score")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class ClassifyDocumentResponse(_message.Message):
    __slots__ = ("labels", "model")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedCompositeFieldContainer[DocumentClass]
    model: str
    def __init__(self, labels: _Optional[_Iterable[_Union[DocumentClass, _Mapping]]] = ..., model: _Optional[str] = ...) -> None: ...
