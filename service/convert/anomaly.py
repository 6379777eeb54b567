"""Anomaly protos ↔ engine dataclasses (``engines.anomaly.types``), with request validation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.detector import check_contamination
from engines.anomaly.encoding import accepts_matrix
from engines.anomaly.stream import StreamConfig, StreamState, StreamStep
from engines.anomaly.types import (
    AnomalyBackend,
    CategoricalEncoding,
    Cell,
    DetectorInfo,
    FeatureField,
    FeatureKind,
    FitConfig,
    Normalization,
    ScoreResult,
)
from service.convert.anomaly_wire import merge_score_messages, uniform_numeric_rows
from service.convert.validation import check_range, require
from service.convert.wire import merge_packed

DEFAULT_CONTAMINATION = 0.1
DEFAULT_WINDOW_SIZE = 1000
DEFAULT_MIN_SAMPLES = 100
DEFAULT_REFIT_INTERVAL = 100

BACKENDS: dict[int, AnomalyBackend] = {
    pb.ANOMALY_BACKEND_UNSPECIFIED: AnomalyBackend.ISOLATION_FOREST,
    pb.ANOMALY_BACKEND_ISOLATION_FOREST: AnomalyBackend.ISOLATION_FOREST,
    pb.ANOMALY_BACKEND_LOCAL_OUTLIER_FACTOR: AnomalyBackend.LOCAL_OUTLIER_FACTOR,
    pb.ANOMALY_BACKEND_ONE_CLASS_SVM: AnomalyBackend.ONE_CLASS_SVM,
    pb.ANOMALY_BACKEND_ECOD: AnomalyBackend.ECOD,
    pb.ANOMALY_BACKEND_HBOS: AnomalyBackend.HBOS,
    pb.ANOMALY_BACKEND_COPOD: AnomalyBackend.COPOD,
    pb.ANOMALY_BACKEND_KNN: AnomalyBackend.KNN,
}
BACKENDS_PB = {v: k for k, v in BACKENDS.items() if k != pb.ANOMALY_BACKEND_UNSPECIFIED}

NORMALIZATIONS: dict[int, Normalization] = {
    pb.NORMALIZATION_UNSPECIFIED: Normalization.STANDARD,
    pb.NORMALIZATION_STANDARD: Normalization.STANDARD,
    pb.NORMALIZATION_ROBUST: Normalization.ROBUST,
    pb.NORMALIZATION_NONE: Normalization.NONE,
}
NORMALIZATIONS_PB = {v: k for k, v in NORMALIZATIONS.items() if k != pb.NORMALIZATION_UNSPECIFIED}

KINDS: dict[int, FeatureKind] = {
    pb.FEATURE_TYPE_UNSPECIFIED: FeatureKind.NUMERIC,
    pb.FEATURE_TYPE_NUMERIC: FeatureKind.NUMERIC,
    pb.FEATURE_TYPE_CATEGORICAL: FeatureKind.CATEGORICAL,
}
KINDS_PB = {
    FeatureKind.NUMERIC: pb.FEATURE_TYPE_NUMERIC,
    FeatureKind.CATEGORICAL: pb.FEATURE_TYPE_CATEGORICAL,
}

ENCODINGS: dict[int, CategoricalEncoding] = {
    pb.CATEGORICAL_ENCODING_UNSPECIFIED: CategoricalEncoding.ONE_HOT,
    pb.CATEGORICAL_ENCODING_ONE_HOT: CategoricalEncoding.ONE_HOT,
    pb.CATEGORICAL_ENCODING_LABEL: CategoricalEncoding.LABEL,
    pb.CATEGORICAL_ENCODING_HASH: CategoricalEncoding.HASH,
    pb.CATEGORICAL_ENCODING_FREQUENCY: CategoricalEncoding.FREQUENCY,
}
ENCODINGS_PB = {v: k for k, v in ENCODINGS.items() if k != pb.CATEGORICAL_ENCODING_UNSPECIFIED}

STATES_PB = {
    StreamState.COLLECTING: pb.STREAM_DETECTOR_STATE_COLLECTING,
    StreamState.READY: pb.STREAM_DETECTOR_STATE_READY,
    StreamState.REFITTING: pb.STREAM_DETECTOR_STATE_REFITTING,
}


def _enum(table: dict, value: int, field: str, what: str):
    require(value in table, field, f"unknown {what} {value}", value=value)
    return table[value]


def schema_from_pb(
    fields: Sequence[pb.FeatureField], field: str = "schema"
) -> tuple[FeatureField, ...] | None:
    """Column declarations, or ``None`` when empty (all numeric); unnamed columns become ``x<i>``.

    Raises:
        InvalidArgumentError: unknown type or encoding, duplicate names.

    """
    if not fields:
        return None
    out = []
    for i, f in enumerate(fields):
        kind = _enum(KINDS, f.type, f"{field}[{i}].type", "feature type")
        encoding = _enum(ENCODINGS, f.encoding, f"{field}[{i}].encoding", "categorical encoding")
        out.append(FeatureField(name=f.name or f"x{i}", kind=kind, encoding=encoding))
    names = [f.name for f in out]
    require(len(set(names)) == len(names), field, "feature names must be unique")
    return tuple(out)


def fit_config_from_pb(
    backend: int,
    schema: Sequence[pb.FeatureField],
    contamination: float,
    normalization: int,
    prefix: str = "",
) -> FitConfig:
    """Backend, schema, contamination (0 means 0.1) and normalization as a :class:`FitConfig`.

    Raises:
        InvalidArgumentError: unknown enum values, contamination outside (0, 0.5].

    """
    value = float(contamination) if contamination else DEFAULT_CONTAMINATION
    check_contamination(value, f"{prefix}contamination")
    return FitConfig(
        backend=_enum(BACKENDS, backend, f"{prefix}backend", "anomaly backend"),
        schema=schema_from_pb(schema, f"{prefix}schema"),
        contamination=value,
        normalization=_enum(NORMALIZATIONS, normalization, f"{prefix}normalization", "normalization"),
    )


def rows_from_pb(rows: Sequence[pb.FeatureRow], *, max_features: int) -> list[list[Cell]]:
    """Rows as lists of floats and strings (widths and finiteness are checked by the engine).

    The row count is checked by :func:`request_rows`, before any row is read.

    Raises:
        InvalidArgumentError: a row with more than ``max_features`` cells, a cell with no value set.

    """
    out: list[list[Cell]] = []
    for i, row in enumerate(rows):
        values = row.values
        if len(values) > max_features:
            require(False, f"rows[{i}]", f"at most {max_features} values per row")
        # Hot loop (every cell of every row): no helper calls or string formatting unless a cell is bad.
        cells: list[Cell] = []
        for value in values:
            if value.HasField("number_value"):
                cells.append(value.number_value)
            elif value.HasField("string_value"):
                cells.append(value.string_value)
            else:
                j = len(cells)
                require(False, f"rows[{i}].values[{j}]", "has no value (set number_value or string_value)")
        out.append(cells)
    return out


def request_rows(
    request: pb.FitAnomalyDetectorRequest | pb.DetectAnomalyRequest | pb.StreamDetectAnomalyRequest,
    *,
    max_rows: int,
    max_features: int,
    allow_empty: bool = False,
    schema: Sequence[FeatureField] | None = None,
) -> list[list[Cell]] | np.ndarray:
    """The request's rows: cells from ``rows``, or a float64 matrix (rows, columns) from ``numeric_rows``.

    ``rows`` that are all finite numbers of one width, as ``schema`` (the columns the rows will
    meet; ``None``: all numeric, any width) expects, are read from the wire into a matrix too
    (:func:`~service.convert.anomaly_wire.uniform_numeric_rows`); what they mean is unchanged.

    Blocking for large requests (tens of ms for 10,000 rows of cells): call it on an executor.

    Raises:
        InvalidArgumentError: both or neither given (unless ``allow_empty``), a packed length
            that is not a multiple of ``column_count``, too many rows or columns, empty cells.

    """
    if not request.HasField("numeric_rows"):
        rows = request.rows
        require(allow_empty or len(rows) > 0, "rows", "must contain at least one row")
        require(len(rows) <= max_rows, "rows", f"at most {max_rows} rows per request, got {len(rows)}")
        matrix = uniform_numeric_rows(request)
        if matrix is not None and matrix.shape[1] <= max_features and accepts_matrix(schema, matrix.shape[1]):
            return matrix
        return rows_from_pb(rows, max_features=max_features)
    packed = request.numeric_rows
    require(len(request.rows) == 0, "numeric_rows", "set either rows or numeric_rows, not both")
    require(packed.column_count > 0, "numeric_rows.column_count", "must be > 0")
    require(
        packed.column_count <= max_features,
        "numeric_rows.column_count",
        f"at most {max_features} columns, got {packed.column_count}",
    )
    require(
        len(packed.values) % packed.column_count == 0,
        "numeric_rows.values",
        f"{len(packed.values)} values do not make whole rows of {packed.column_count}",
    )
    matrix = np.array(packed.values, dtype=np.float64).reshape(-1, packed.column_count)
    require(allow_empty or matrix.shape[0] > 0, "numeric_rows", "must contain at least one row")
    require(
        matrix.shape[0] <= max_rows,
        "numeric_rows",
        f"at most {max_rows} rows per request, got {matrix.shape[0]}",
    )
    return matrix


def optional_threshold(request: pb.DetectAnomalyRequest) -> float | None:
    """The per-request threshold on the normalized score, or ``None``.

    Raises:
        InvalidArgumentError: outside (0, 1].

    """
    if not request.HasField("threshold"):
        return None
    check_range(request.threshold, "threshold", 0.0, 1.0, low_open=True)
    return float(request.threshold)


def stream_config_from_pb(config: pb.StreamDetectorConfig) -> StreamConfig:
    """A stream's settings, with defaults for the sizes left at 0.

    Defaults: window_size 1000 (or min_samples if larger), min_samples 100 (or the window if
    smaller), refit_interval 100.

    Raises:
        InvalidArgumentError: unknown enums, contamination outside (0, 0.5], negative sizes.

    """
    for name in ("window_size", "min_samples", "refit_interval"):
        require(getattr(config, name) >= 0, f"config.{name}", "must not be negative")
    min_samples = config.min_samples or min(DEFAULT_MIN_SAMPLES, config.window_size or DEFAULT_MIN_SAMPLES)
    return StreamConfig(
        fit=fit_config_from_pb(
            config.backend, config.schema, config.contamination, config.normalization, prefix="config."
        ),
        window_size=config.window_size or max(DEFAULT_WINDOW_SIZE, min_samples),
        min_samples=min_samples,
        refit_interval=config.refit_interval or DEFAULT_REFIT_INTERVAL,
    )


def add_scores(target, rows: Iterable[tuple[int, float, float, bool, Sequence[tuple[str, float]]]]) -> None:
    """Append one AnomalyScore per ``(index, score, normalized, is_anomaly, explanation)`` to ``target``.

    ``add()`` builds each message in place; constructing messages and passing a list copies
    every one of them, about three times slower on a 10k-row batch.
    """
    add = target.add
    for index, raw, normalized, flag, explanation in rows:
        message = add(index=index, score=raw, normalized_score=normalized, is_anomaly=flag)
        for feature, contribution in explanation:
            message.explanation.add(feature=feature, contribution=contribution)


def detect_response(result: ScoreResult, *, columnar: bool = False) -> pb.DetectAnomalyResponse:
    """Scores (per-row messages, or packed columns) and their summary (raw-score threshold)."""
    count = int(result.raw.shape[0])
    flagged = result.anomaly_count
    response = pb.DetectAnomalyResponse(
        summary=pb.AnomalySummary(
            row_count=count,
            anomaly_count=flagged,
            anomaly_rate=flagged / count if count else 0.0,
            threshold=result.threshold,
        ),
    )
    if columnar:
        merge_packed(
            response.columns,
            scores=result.raw,
            normalized_scores=result.normalized,
            is_anomaly=result.flags,
        )
        return response
    merge_score_messages(response, "scores", result.raw, result.normalized, result.flags)
    for row, explanation in result.explanations.items():
        target = response.scores[row].explanation
        for feature, contribution in explanation:
            target.add(feature=feature, contribution=contribution)
    return response


def stream_response(step: StreamStep) -> pb.StreamDetectAnomalyResponse:
    """One stream reply."""
    response = pb.StreamDetectAnomalyResponse(
        state=STATES_PB[step.state],
        window_row_count=step.window_row_count,
        fit_count=step.fit_count,
    )
    add_scores(
        response.scores,
        ((r.index, r.score, r.normalized_score, r.is_anomaly, r.explanation) for r in step.scores),
    )
    return response


def schema_to_pb(schema: Sequence[FeatureField]) -> list[pb.FeatureField]:
    """Column declarations as protos."""
    return [
        pb.FeatureField(
            name=f.name,
            type=KINDS_PB[f.kind],
            encoding=ENCODINGS_PB[f.encoding] if f.kind is FeatureKind.CATEGORICAL else 0,
        )
        for f in schema
    ]


def detector_info_to_pb(info: DetectorInfo) -> pb.AnomalyDetectorInfo:
    """A listed detector."""
    return pb.AnomalyDetectorInfo(
        detector=info.name,
        version=info.version,
        backend=BACKENDS_PB[info.backend],
        schema=schema_to_pb(info.schema),
        row_count=info.row_count,
        threshold=info.threshold,
        contamination=info.contamination,
        normalization=NORMALIZATIONS_PB[info.normalization],
        created_at_ms=info.created_at_ms,
    )
