from universal_runtime.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TruncationPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRUNCATION_POLICY_UNSPECIFIED: _ClassVar[TruncationPolicy]
    TRUNCATION_POLICY_ERROR: _ClassVar[TruncationPolicy]
    TRUNCATION_POLICY_END: _ClassVar[TruncationPolicy]
    TRUNCATION_POLICY_START: _ClassVar[TruncationPolicy]

class EmbeddingEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMBEDDING_ENCODING_UNSPECIFIED: _ClassVar[EmbeddingEncoding]
    EMBEDDING_ENCODING_FLOAT: _ClassVar[EmbeddingEncoding]
    EMBEDDING_ENCODING_INT8: _ClassVar[EmbeddingEncoding]
    EMBEDDING_ENCODING_UINT8: _ClassVar[EmbeddingEncoding]
    EMBEDDING_ENCODING_BINARY: _ClassVar[EmbeddingEncoding]
    EMBEDDING_ENCODING_UBINARY: _ClassVar[EmbeddingEncoding]
TRUNCATION_POLICY_UNSPECIFIED: TruncationPolicy
TRUNCATION_POLICY_ERROR: TruncationPolicy
TRUNCATION_POLICY_END: TruncationPolicy
TRUNCATION_POLICY_START: TruncationPolicy
EMBEDDING_ENCODING_UNSPECIFIED: EmbeddingEncoding
EMBEDDING_ENCODING_FLOAT: EmbeddingEncoding
EMBEDDING_ENCODING_INT8: EmbeddingEncoding
EMBEDDING_ENCODING_UINT8: EmbeddingEncoding
EMBEDDING_ENCODING_BINARY: EmbeddingEncoding
EMBEDDING_ENCODING_UBINARY: EmbeddingEncoding

class EmbedRequest(_message.Message):
    __slots__ = ("model", "inputs", "normalize", "dimensions", "truncation", "prompt_name", "prompt", "keep_alive", "encoding")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    normalize: bool
    dimensions: int
    truncation: TruncationPolicy
    prompt_name: str
    prompt: str
    keep_alive: str
    encoding: EmbeddingEncoding
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., normalize: _Optional[bool] = ..., dimensions: _Optional[int] = ..., truncation: _Optional[_Union[TruncationPolicy, str]] = ..., prompt_name: _Optional[str] = ..., prompt: _Optional[str] = ..., keep_alive: _Optional[str] = ..., encoding: _Optional[_Union[EmbeddingEncoding, str]] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("index", "values", "packed_values")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    PACKED_VALUES_FIELD_NUMBER: _ClassVar[int]
    index: int
    values: _containers.RepeatedScalarFieldContainer[float]
    packed_values: bytes
    def __init__(self, index: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ..., packed_values: _Optional[bytes] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("model", "embeddings", "dimensions", "usage", "encoding")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    model: str
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    dimensions: int
    usage: _common_pb2.Usage
    encoding: EmbeddingEncoding
    def __init__(self, model: _Optional[str] = ..., embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., dimensions: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., encoding: _Optional[_Union[EmbeddingEncoding, str]] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "inputs", "multi_label", "all_scores", "threshold", "candidate_labels", "keep_alive", "truncation")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    MULTI_LABEL_FIELD_NUMBER: _ClassVar[int]
    ALL_SCORES_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_LABELS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    multi_label: bool
    all_scores: bool
    threshold: float
    candidate_labels: _containers.RepeatedScalarFieldContainer[str]
    keep_alive: str
    truncation: TruncationPolicy
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., multi_label: _Optional[bool] = ..., all_scores: _Optional[bool] = ..., threshold: _Optional[float] = ..., candidate_labels: _Optional[_Iterable[str]] = ..., keep_alive: _Optional[str] = ..., truncation: _Optional[_Union[TruncationPolicy, str]] = ...) -> None: ...

class LabelScore(_message.Message):
    __slots__ = ("label", "score")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class Classification(_message.Message):
    __slots__ = ("index", "label", "score", "predicted_labels", "scores")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_LABELS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    index: int
    label: str
    score: float
    predicted_labels: _containers.RepeatedCompositeFieldContainer[LabelScore]
    scores: _containers.RepeatedCompositeFieldContainer[LabelScore]
    def __init__(self, index: _Optional[int] = ..., label: _Optional[str] = ..., score: _Optional[float] = ..., predicted_labels: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ..., scores: _Optional[_Iterable[_Union[LabelScore, _Mapping]]] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("model", "classifications", "usage")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CLASSIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    classifications: _containers.RepeatedCompositeFieldContainer[Classification]
    usage: _common_pb2.Usage
    def __init__(self, model: _Optional[str] = ..., classifications: _Optional[_Iterable[_Union[Classification, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class ExtractEntitiesRequest(_message.Message):
    __slots__ = ("model", "inputs", "min_score", "labels", "keep_alive")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    model: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    min_score: float
    labels: _containers.RepeatedScalarFieldContainer[str]
    keep_alive: str
    def __init__(self, model: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., min_score: _Optional[float] = ..., labels: _Optional[_Iterable[str]] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("text", "label", "start", "end", "score")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    text: str
    label: str
    start: int
    end: int
    score: float
    def __init__(self, text: _Optional[str] = ..., label: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class EntityList(_message.Message):
    __slots__ = ("index", "entities")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    index: int
    entities: _containers.RepeatedCompositeFieldContainer[Entity]
    def __init__(self, index: _Optional[int] = ..., entities: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ...) -> None: ...

class ExtractEntitiesResponse(_message.Message):
    __slots__ = ("model", "results", "usage")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[EntityList]
    usage: _common_pb2.Usage
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[EntityList, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("model", "query", "documents", "top_n", "return_documents", "truncation", "keep_alive")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    RETURN_DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    model: str
    query: str
    documents: _containers.RepeatedScalarFieldContainer[str]
    top_n: int
    return_documents: bool
    truncation: TruncationPolicy
    keep_alive: str
    def __init__(self, model: _Optional[str] = ..., query: _Optional[str] = ..., documents: _Optional[_Iterable[str]] = ..., top_n: _Optional[int] = ..., return_documents: _Optional[bool] = ..., truncation: _Optional[_Union[TruncationPolicy, str]] = ..., keep_alive: _Optional[str] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("index", "relevance_score", "document")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    index: int
    relevance_score: float
    document: str
    def __init__(self, index: _Optional[int] = ..., relevance_score: _Optional[float] = ..., document: _Optional[str] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("model", "results", "usage")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    model: str
    results: _containers.RepeatedCompositeFieldContainer[RerankResult]
    usage: _common_pb2.Usage
    def __init__(self, model: _Optional[str] = ..., results: _Optional[_Iterable[_Union[RerankResult, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class ClassifierExample(_message.Message):
    __slots__ = ("text", "label")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    text: str
    label: str
    def __init__(self, text: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class ClassifierInfo(_message.Message):
    __slots__ = ("name", "embedding_model", "labels", "example_count", "created_at_unix_ms", "training_accuracy", "shared")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    name: str
    embedding_model: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    example_count: int
    created_at_unix_ms: int
    training_accuracy: float
    shared: bool
    def __init__(self, name: _Optional[str] = ..., embedding_model: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., example_count: _Optional[int] = ..., created_at_unix_ms: _Optional[int] = ..., training_accuracy: _Optional[float] = ..., shared: _Optional[bool] = ...) -> None: ...

class FitClassifierRequest(_message.Message):
    __slots__ = ("name", "embedding_model", "examples", "overwrite", "keep_alive", "shared")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    name: str
    embedding_model: str
    examples: _containers.RepeatedCompositeFieldContainer[ClassifierExample]
    overwrite: bool
    keep_alive: str
    shared: bool
    def __init__(self, name: _Optional[str] = ..., embedding_model: _Optional[str] = ..., examples: _Optional[_Iterable[_Union[ClassifierExample, _Mapping]]] = ..., overwrite: _Optional[bool] = ..., keep_alive: _Optional[str] = ..., shared: _Optional[bool] = ...) -> None: ...

class FitClassifierResponse(_message.Message):
    __slots__ = ("classifier",)
    CLASSIFIER_FIELD_NUMBER: _ClassVar[int]
    classifier: ClassifierInfo
    def __init__(self, classifier: _Optional[_Union[ClassifierInfo, _Mapping]] = ...) -> None: ...

class ListClassifiersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListClassifiersResponse(_message.Message):
    __slots__ = ("classifiers",)
    CLASSIFIERS_FIELD_NUMBER: _ClassVar[int]
    classifiers: _containers.RepeatedCompositeFieldContainer[ClassifierInfo]
    def __init__(self, classifiers: _Optional[_Iterable[_Union[ClassifierInfo, _Mapping]]] = ...) -> None: ...

class DeleteClassifierRequest(_message.Message):
    __slots__ = ("name", "shared")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    name: str
    shared: bool
    def __init__(self, name: _Optional[str] = ..., shared: _Optional[bool] = ...) -> None: ...

class DeleteClassifierResponse(_message.Message):
    __slots__ = ("classifier",)
    CLASSIFIER_FIELD_NUMBER: _ClassVar[int]
    classifier: ClassifierInfo
    def __init__(self, classifier: _Optional[_Union[ClassifierInfo, _Mapping]] = ...) -> None: ...
