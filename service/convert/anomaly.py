"""Anomaly protos ↔ engine dataclasses (``engines.anomaly.types``), with request validation.

Rows are not decoded here: :func:`rows_decoder` hands the anomaly task a decode step that it runs on
the anomaly task's CPU lane, once it knows the schema the rows must meet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from universal_runtime.v1 import anomaly_pb2 as pb

from engines.anomaly.types import (
    AnomalyBackend,
    CategoricalEncoding,
    Cell,
    DetectorInfo,
    DetectorListing,
    FeatureField,
    FeatureKind,
    FitConfig,
    Normalization,
    ScoreResult,
    StreamConfig,
    StreamState,
    StreamStep,
    accepts_matrix,
    check_contamination,
)
from engines.reasons import Reason
from service.convert.anomaly_wire import merge_score_messages, uniform_numeric_rows
from service.convert.messages import enum_table, wire_values
from service.convert.validation import check_range, require
from service.convert.wire import merge_packed
from service.settings import Settings
from service.tasks.anomaly import FittedDetector, RowDecoder

RowsRequest = pb.FitAnomalyDetectorRequest | pb.DetectAnomalyRequest | pb.StreamDetectAnomalyRequest

DEFAULT_CONTAMINATION = 0.1
DEFAULT_WINDOW_SIZE = 1000
DEFAULT_MIN_SAMPLES = 100
DEFAULT_REFIT_INTERVAL = 100

BACKENDS = enum_table(pb.AnomalyBackend, "ANOMALY_BACKEND_", AnomalyBackend, AnomalyBackend.ISOLATION_FOREST)
BACKENDS_PB = wire_values(BACKENDS)
NORMALIZATIONS = enum_table(pb.Normalization, "NORMALIZATION_", Normalization, Normalization.STANDARD)
NORMALIZATIONS_PB = wire_values(NORMALIZATIONS)
KINDS = enum_table(pb.FeatureType, "FEATURE_TYPE_", FeatureKind, FeatureKind.NUMERIC)
KINDS_PB = wire_values(KINDS)
ENCODINGS = enum_table(
    pb.CategoricalEncoding, "CATEGORICAL_ENCODING_", CategoricalEncoding, CategoricalEncoding.ONE_HOT
)
ENCODINGS_PB = wire_values(ENCODINGS)
STATES_PB = wire_values(enum_table(pb.StreamDetectorState, "STREAM_DETECTOR_STATE_", StreamState))


def _enum(table: dict, value: int, field: str, what: str):
    require(value in table, field, f"unknown {what} {value}", value=value)
    return table[value]


def schema_from_pb(
    fields: Sequence[pb.FeatureField], field: str = "schema", *, max_features: int
) -> tuple[FeatureField, ...] | None:
    """Column declarations, or ``None`` when empty (all numeric); unnamed columns become ``x<i>``.

    Bounded by ``max_features`` (the row width limit), checked from the list's length before any
    field is read: converting runs on the event loop, a few µs a field, so an unbounded list would
    hold every other call (see docs/architecture/design-notes.md#protobuf-on-the-event-loop).

    Raises:
        InvalidArgumentError: more than ``max_features`` fields (reason TOO_MANY_FEATURES), unknown
            type or encoding, duplicate names.

    """
    if not fields:
        return None
    count = len(fields)
    require(
        count <= max_features,
        field,
        f"at most {max_features} features (anomaly_max_features), got {count}",
        reason=Reason.TOO_MANY_FEATURES,
        features=count,
        max_features=max_features,
    )
    out = []
    for i, f in enumerate(fields):
        kind = _enum(KINDS, f.type, f"{field}[{i}].type", "feature type")
        encoding = _enum(ENCODINGS, f.encoding, f"{field}[{i}].encoding", "categorical encoding")
        out.append(FeatureField(name=f.name or f"x{i}", kind=kind, encoding=encoding))
    names = [f.name for f in out]
    require(len(set(names)) == len(names), field, "feature names must be unique")
    return tuple(out)


FitMessage = pb.FitAnomalyDetectorRequest | pb.DetectAnomalyRequest | pb.StreamDetectorConfig
"""The messages that carry a fit's ``backend``, ``schema``, ``contamination`` and ``normalization``."""


def fit_config_from_pb(message: FitMessage, prefix: str = "", *, max_features: int) -> FitConfig:
    """The message's backend, schema, contamination (0 means 0.1) and normalization as a :class:`FitConfig`.

    ``prefix`` is the message's path in the request, for error fields (``"config."``).

    Raises:
        InvalidArgumentError: unknown enum values, contamination outside (0, 0.5], a schema of
            more than ``max_features`` fields (see :func:`schema_from_pb`).

    """
    value = float(message.contamination) if message.contamination else DEFAULT_CONTAMINATION
    check_contamination(value, f"{prefix}contamination")
    return FitConfig(
        backend=_enum(BACKENDS, message.backend, f"{prefix}backend", "anomaly backend"),
        schema=schema_from_pb(message.schema, f"{prefix}schema", max_features=max_features),
        contamination=value,
        normalization=_enum(NORMALIZATIONS, message.normalization, f"{prefix}normalization", "normalization"),
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
    request: RowsRequest,
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


def rows_decoder(request: RowsRequest, settings: Settings, *, allow_empty: bool = False) -> RowDecoder:
    """The request's rows as a decode step for the anomaly task (see :func:`request_rows`).

    Bounded by ``settings.anomaly_max_rows`` and ``anomaly_max_features``, checked before any row
    is read.
    """

    def decode(schema: Sequence[FeatureField] | None) -> list[list[Cell]] | np.ndarray:
        return request_rows(
            request,
            max_rows=settings.anomaly_max_rows,
            max_features=settings.anomaly_max_features,
            allow_empty=allow_empty,
            schema=schema,
        )

    return decode


def detect_options(request: pb.DetectAnomalyRequest) -> tuple[float | None, bool]:
    """The per-request threshold on the normalized score (or ``None``) and whether to explain.

    Raises:
        InvalidArgumentError: threshold outside (0, 1]; explanations asked with columnar output;
            one-shot settings (backend, schema, contamination, normalization) with a saved detector.

    """
    threshold = None
    if request.HasField("threshold"):
        check_range(request.threshold, "threshold", 0.0, 1.0, low_open=True)
        threshold = float(request.threshold)
    require(
        not (request.columnar_output and request.explain),
        "columnar_output",
        "columnar output carries no explanations; drop explain or columnar_output",
    )
    one_shot_only = (request.backend, len(request.schema), request.contamination, request.normalization)
    require(
        not (request.detector and any(one_shot_only)),
        "detector",
        "backend, schema, contamination and normalization are for one-shot use (no detector); "
        "a saved detector keeps the ones it was fitted with",
    )
    return threshold, request.explain


def fit_response(fitted: FittedDetector) -> pb.FitAnomalyDetectorResponse:
    """The saved fit's name, version, row count, raw-score threshold and namespace."""
    return pb.FitAnomalyDetectorResponse(
        detector=fitted.name,
        version=fitted.version,
        row_count=fitted.row_count,
        threshold=fitted.threshold,
        shared=fitted.shared,
    )


def stream_config_from_pb(config: pb.StreamDetectorConfig, *, max_features: int) -> StreamConfig:
    """A stream's settings, with defaults for the sizes left at 0 (schema: at most ``max_features``).

    Defaults: window_size 1000 (or min_samples if larger), min_samples 100 (or the window if
    smaller), refit_interval 100.

    Raises:
        InvalidArgumentError: unknown enums, contamination outside (0, 0.5], negative sizes.

    """
    for name in ("window_size", "min_samples", "refit_interval"):
        require(getattr(config, name) >= 0, f"config.{name}", "must not be negative")
    min_samples = config.min_samples or min(DEFAULT_MIN_SAMPLES, config.window_size or DEFAULT_MIN_SAMPLES)
    return StreamConfig(
        fit=fit_config_from_pb(config, "config.", max_features=max_features),
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
        shared=info.shared,
    )


def detectors_response(listing: DetectorListing) -> pb.ListAnomalyDetectorsResponse:
    """The saved detectors and the names of unreadable ones, in the order given."""
    return pb.ListAnomalyDetectorsResponse(
        detectors=[detector_info_to_pb(i) for i in listing.detectors],
        unreadable_detectors=listing.unreadable,
    )
