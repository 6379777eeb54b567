from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AnomalyBackend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ANOMALY_BACKEND_UNSPECIFIED: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_ISOLATION_FOREST: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_LOCAL_OUTLIER_FACTOR: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_ONE_CLASS_SVM: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_ECOD: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_HBOS: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_COPOD: _ClassVar[AnomalyBackend]
    ANOMALY_BACKEND_KNN: _ClassVar[AnomalyBackend]

class Normalization(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NORMALIZATION_UNSPECIFIED: _ClassVar[Normalization]
    NORMALIZATION_STANDARD: _ClassVar[Normalization]
    NORMALIZATION_ROBUST: _ClassVar[Normalization]
    NORMALIZATION_NONE: _ClassVar[Normalization]

class FeatureType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FEATURE_TYPE_UNSPECIFIED: _ClassVar[FeatureType]
    FEATURE_TYPE_NUMERIC: _ClassVar[FeatureType]
    FEATURE_TYPE_CATEGORICAL: _ClassVar[FeatureType]

class CategoricalEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATEGORICAL_ENCODING_UNSPECIFIED: _ClassVar[CategoricalEncoding]
    CATEGORICAL_ENCODING_ONE_HOT: _ClassVar[CategoricalEncoding]
    CATEGORICAL_ENCODING_LABEL: _ClassVar[CategoricalEncoding]
    CATEGORICAL_ENCODING_HASH: _ClassVar[CategoricalEncoding]
    CATEGORICAL_ENCODING_FREQUENCY: _ClassVar[CategoricalEncoding]

class StreamDetectorState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAM_DETECTOR_STATE_UNSPECIFIED: _ClassVar[StreamDetectorState]
    STREAM_DETECTOR_STATE_COLLECTING: _ClassVar[StreamDetectorState]
    STREAM_DETECTOR_STATE_READY: _ClassVar[StreamDetectorState]
    STREAM_DETECTOR_STATE_REFITTING: _ClassVar[StreamDetectorState]
ANOMALY_BACKEND_UNSPECIFIED: AnomalyBackend
ANOMALY_BACKEND_ISOLATION_FOREST: AnomalyBackend
ANOMALY_BACKEND_LOCAL_OUTLIER_FACTOR: AnomalyBackend
ANOMALY_BACKEND_ONE_CLASS_SVM: AnomalyBackend
ANOMALY_BACKEND_ECOD: AnomalyBackend
ANOMALY_BACKEND_HBOS: AnomalyBackend
ANOMALY_BACKEND_COPOD: AnomalyBackend
ANOMALY_BACKEND_KNN: AnomalyBackend
NORMALIZATION_UNSPECIFIED: Normalization
NORMALIZATION_STANDARD: Normalization
NORMALIZATION_ROBUST: Normalization
NORMALIZATION_NONE: Normalization
FEATURE_TYPE_UNSPECIFIED: FeatureType
FEATURE_TYPE_NUMERIC: FeatureType
FEATURE_TYPE_CATEGORICAL: FeatureType
CATEGORICAL_ENCODING_UNSPECIFIED: CategoricalEncoding
CATEGORICAL_ENCODING_ONE_HOT: CategoricalEncoding
CATEGORICAL_ENCODING_LABEL: CategoricalEncoding
CATEGORICAL_ENCODING_HASH: CategoricalEncoding
CATEGORICAL_ENCODING_FREQUENCY: CategoricalEncoding
STREAM_DETECTOR_STATE_UNSPECIFIED: StreamDetectorState
STREAM_DETECTOR_STATE_COLLECTING: StreamDetectorState
STREAM_DETECTOR_STATE_READY: StreamDetectorState
STREAM_DETECTOR_STATE_REFITTING: StreamDetectorState

class FeatureField(_message.Message):
    __slots__ = ("name", "type", "encoding")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: FeatureType
    encoding: CategoricalEncoding
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[FeatureType, str]] = ..., encoding: _Optional[_Union[CategoricalEncoding, str]] = ...) -> None: ...

class FeatureValue(_message.Message):
    __slots__ = ("number_value", "string_value")
    NUMBER_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    number_value: float
    string_value: str
    def __init__(self, number_value: _Optional[float] = ..., string_value: _Optional[str] = ...) -> None: ...

class FeatureRow(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[FeatureValue]
    def __init__(self, values: _Optional[_Iterable[_Union[FeatureValue, _Mapping]]] = ...) -> None: ...

class NumericRows(_message.Message):
    __slots__ = ("column_count", "values")
    COLUMN_COUNT_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    column_count: int
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, column_count: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class FitAnomalyDetectorRequest(_message.Message):
    __slots__ = ("detector", "backend", "schema", "rows", "contamination", "normalization", "numeric_rows", "shared")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    CONTAMINATION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_ROWS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    detector: str
    backend: AnomalyBackend
    schema: _containers.RepeatedCompositeFieldContainer[FeatureField]
    rows: _containers.RepeatedCompositeFieldContainer[FeatureRow]
    contamination: float
    normalization: Normalization
    numeric_rows: NumericRows
    shared: bool
    def __init__(self, detector: _Optional[str] = ..., backend: _Optional[_Union[AnomalyBackend, str]] = ..., schema: _Optional[_Iterable[_Union[FeatureField, _Mapping]]] = ..., rows: _Optional[_Iterable[_Union[FeatureRow, _Mapping]]] = ..., contamination: _Optional[float] = ..., normalization: _Optional[_Union[Normalization, str]] = ..., numeric_rows: _Optional[_Union[NumericRows, _Mapping]] = ..., shared: _Optional[bool] = ...) -> None: ...

class FitAnomalyDetectorResponse(_message.Message):
    __slots__ = ("detector", "version", "row_count", "threshold", "shared")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    detector: str
    version: int
    row_count: int
    threshold: float
    shared: bool
    def __init__(self, detector: _Optional[str] = ..., version: _Optional[int] = ..., row_count: _Optional[int] = ..., threshold: _Optional[float] = ..., shared: _Optional[bool] = ...) -> None: ...

class FeatureContribution(_message.Message):
    __slots__ = ("feature", "contribution")
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    feature: str
    contribution: float
    def __init__(self, feature: _Optional[str] = ..., contribution: _Optional[float] = ...) -> None: ...

class AnomalyScore(_message.Message):
    __slots__ = ("index", "score", "normalized_score", "is_anomaly", "explanation")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_SCORE_FIELD_NUMBER: _ClassVar[int]
    IS_ANOMALY_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    index: int
    score: float
    normalized_score: float
    is_anomaly: bool
    explanation: _containers.RepeatedCompositeFieldContainer[FeatureContribution]
    def __init__(self, index: _Optional[int] = ..., score: _Optional[float] = ..., normalized_score: _Optional[float] = ..., is_anomaly: _Optional[bool] = ..., explanation: _Optional[_Iterable[_Union[FeatureContribution, _Mapping]]] = ...) -> None: ...

class AnomalySummary(_message.Message):
    __slots__ = ("row_count", "anomaly_count", "anomaly_rate", "threshold")
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    ANOMALY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ANOMALY_RATE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    row_count: int
    anomaly_count: int
    anomaly_rate: float
    threshold: float
    def __init__(self, row_count: _Optional[int] = ..., anomaly_count: _Optional[int] = ..., anomaly_rate: _Optional[float] = ..., threshold: _Optional[float] = ...) -> None: ...

class DetectAnomalyRequest(_message.Message):
    __slots__ = ("detector", "rows", "threshold", "explain", "backend", "schema", "contamination", "normalization", "numeric_rows", "columnar_output")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CONTAMINATION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    detector: str
    rows: _containers.RepeatedCompositeFieldContainer[FeatureRow]
    threshold: float
    explain: bool
    backend: AnomalyBackend
    schema: _containers.RepeatedCompositeFieldContainer[FeatureField]
    contamination: float
    normalization: Normalization
    numeric_rows: NumericRows
    columnar_output: bool
    def __init__(self, detector: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[FeatureRow, _Mapping]]] = ..., threshold: _Optional[float] = ..., explain: _Optional[bool] = ..., backend: _Optional[_Union[AnomalyBackend, str]] = ..., schema: _Optional[_Iterable[_Union[FeatureField, _Mapping]]] = ..., contamination: _Optional[float] = ..., normalization: _Optional[_Union[Normalization, str]] = ..., numeric_rows: _Optional[_Union[NumericRows, _Mapping]] = ..., columnar_output: _Optional[bool] = ...) -> None: ...

class AnomalyScoreColumns(_message.Message):
    __slots__ = ("scores", "normalized_scores", "is_anomaly")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    NORMALIZED_SCORES_FIELD_NUMBER: _ClassVar[int]
    IS_ANOMALY_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    normalized_scores: _containers.RepeatedScalarFieldContainer[float]
    is_anomaly: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, scores: _Optional[_Iterable[float]] = ..., normalized_scores: _Optional[_Iterable[float]] = ..., is_anomaly: _Optional[_Iterable[bool]] = ...) -> None: ...

class DetectAnomalyResponse(_message.Message):
    __slots__ = ("scores", "summary", "columns")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[AnomalyScore]
    summary: AnomalySummary
    columns: AnomalyScoreColumns
    def __init__(self, scores: _Optional[_Iterable[_Union[AnomalyScore, _Mapping]]] = ..., summary: _Optional[_Union[AnomalySummary, _Mapping]] = ..., columns: _Optional[_Union[AnomalyScoreColumns, _Mapping]] = ...) -> None: ...

class StreamDetectorConfig(_message.Message):
    __slots__ = ("backend", "schema", "contamination", "normalization", "window_size", "min_samples", "refit_interval")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CONTAMINATION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    REFIT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    backend: AnomalyBackend
    schema: _containers.RepeatedCompositeFieldContainer[FeatureField]
    contamination: float
    normalization: Normalization
    window_size: int
    min_samples: int
    refit_interval: int
    def __init__(self, backend: _Optional[_Union[AnomalyBackend, str]] = ..., schema: _Optional[_Iterable[_Union[FeatureField, _Mapping]]] = ..., contamination: _Optional[float] = ..., normalization: _Optional[_Union[Normalization, str]] = ..., window_size: _Optional[int] = ..., min_samples: _Optional[int] = ..., refit_interval: _Optional[int] = ...) -> None: ...

class StreamDetectAnomalyRequest(_message.Message):
    __slots__ = ("config", "rows", "numeric_rows")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_ROWS_FIELD_NUMBER: _ClassVar[int]
    config: StreamDetectorConfig
    rows: _containers.RepeatedCompositeFieldContainer[FeatureRow]
    numeric_rows: NumericRows
    def __init__(self, config: _Optional[_Union[StreamDetectorConfig, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[FeatureRow, _Mapping]]] = ..., numeric_rows: _Optional[_Union[NumericRows, _Mapping]] = ...) -> None: ...

class StreamDetectAnomalyResponse(_message.Message):
    __slots__ = ("scores", "state", "window_row_count", "fit_count")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[AnomalyScore]
    state: StreamDetectorState
    window_row_count: int
    fit_count: int
    def __init__(self, scores: _Optional[_Iterable[_Union[AnomalyScore, _Mapping]]] = ..., state: _Optional[_Union[StreamDetectorState, str]] = ..., window_row_count: _Optional[int] = ..., fit_count: _Optional[int] = ...) -> None: ...

class AnomalyDetectorInfo(_message.Message):
    __slots__ = ("detector", "version", "backend", "schema", "row_count", "threshold", "contamination", "normalization", "created_at_ms", "shared")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CONTAMINATION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    detector: str
    version: int
    backend: AnomalyBackend
    schema: _containers.RepeatedCompositeFieldContainer[FeatureField]
    row_count: int
    threshold: float
    contamination: float
    normalization: Normalization
    created_at_ms: int
    shared: bool
    def __init__(self, detector: _Optional[str] = ..., version: _Optional[int] = ..., backend: _Optional[_Union[AnomalyBackend, str]] = ..., schema: _Optional[_Iterable[_Union[FeatureField, _Mapping]]] = ..., row_count: _Optional[int] = ..., threshold: _Optional[float] = ..., contamination: _Optional[float] = ..., normalization: _Optional[_Union[Normalization, str]] = ..., created_at_ms: _Optional[int] = ..., shared: _Optional[bool] = ...) -> None: ...

class ListAnomalyDetectorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAnomalyDetectorsResponse(_message.Message):
    __slots__ = ("detectors", "unreadable_detectors")
    DETECTORS_FIELD_NUMBER: _ClassVar[int]
    UNREADABLE_DETECTORS_FIELD_NUMBER: _ClassVar[int]
    detectors: _containers.RepeatedCompositeFieldContainer[AnomalyDetectorInfo]
    unreadable_detectors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, detectors: _Optional[_Iterable[_Union[AnomalyDetectorInfo, _Mapping]]] = ..., unreadable_detectors: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteAnomalyDetectorRequest(_message.Message):
    __slots__ = ("detector", "shared")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    detector: str
    shared: bool
    def __init__(self, detector: _Optional[str] = ..., shared: _Optional[bool] = ...) -> None: ...

class DeleteAnomalyDetectorResponse(_message.Message):
    __slots__ = ("detector", "versions_deleted")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_DELETED_FIELD_NUMBER: _ClassVar[int]
    detector: str
    versions_deleted: int
    def __init__(self, detector: _Optional[str] = ..., versions_deleted: _Optional[int] = ...) -> None: ...
