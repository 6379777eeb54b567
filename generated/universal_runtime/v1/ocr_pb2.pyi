from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OcrOptions(_message.Message):
    __slots__ = ("model", "mime_type", "first_page", "last_page", "languages", "return_boxes", "use_pdf_text_layer", "pdf_dpi", "keep_alive")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    FIRST_PAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_PAGE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    RETURN_BOXES_FIELD_NUMBER: _ClassVar[int]
    USE_PDF_TEXT_LAYER_FIELD_NUMBER: _ClassVar[int]
    PDF_DPI_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    model: str
    mime_type: str
    first_page: int
    last_page: int
    languages: _containers.RepeatedScalarFieldContainer[str]
    return_boxes: bool
    use_pdf_text_layer: bool
    pdf_dpi: int
    keep_alive: str
    def __init__(self, model: _Optional[str] = ..., mime_type: _Optional[str] = ..., first_page: _Optional[int] = ..., last_page: _Optional[int] = ..., languages: _Optional[_Iterable[str]] = ..., return_boxes: _Optional[bool] = ..., use_pdf_text_layer: _Optional[bool] = ..., pdf_dpi: _Optional[int] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class OcrRequest(_message.Message):
    __slots__ = ("options", "chunk")
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    options: OcrOptions
    chunk: bytes
    def __init__(self, options: _Optional[_Union[OcrOptions, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class BoundingBox(_message.Message):
    __slots__ = ("x", "y", "width", "height")
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    x: float
    y: float
    width: float
    height: float
    def __init__(self, x: _Optional[float] = ..., y: _Optional[float] = ..., width: _Optional[float] = ..., height: _Optional[float] = ...) -> None: ...

class OcrWord(_message.Message):
    __slots__ = ("text", "box", "confidence")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    text: str
    box: BoundingBox
    confidence: float
    def __init__(self, text: _Optional[str] = ..., box: _Optional[_Union[BoundingBox, _Mapping]] = ..., confidence: _Optional[float] = ...) -> None: ...

class OcrLine(_message.Message):
    __slots__ = ("text", "box", "confidence", "words")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BOX_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    text: str
    box: BoundingBox
    confidence: float
    words: _containers.RepeatedCompositeFieldContainer[OcrWord]
    def __init__(self, text: _Optional[str] = ..., box: _Optional[_Union[BoundingBox, _Mapping]] = ..., confidence: _Optional[float] = ..., words: _Optional[_Iterable[_Union[OcrWord, _Mapping]]] = ...) -> None: ...

class OcrResponse(_message.Message):
    __slots__ = ("page_number", "page_count", "text", "lines", "width", "height", "engine", "confidence")
    PAGE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    page_number: int
    page_count: int
    text: str
    lines: _containers.RepeatedCompositeFieldContainer[OcrLine]
    width: int
    height: int
    engine: str
    confidence: float
    def __init__(self, page_number: _Optional[int] = ..., page_count: _Optional[int] = ..., text: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[OcrLine, _Mapping]]] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., engine: _Optional[str] = ..., confidence: _Optional[float] = ...) -> None: ...
