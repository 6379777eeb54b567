"""Anomaly JSON bodies ↔ anomaly protos (enum names in lower snake case, without their prefix).

Rows that are all numbers, of one width, go to the server packed (``numeric_rows``: one array of
doubles instead of a message per cell, which costs seconds for the largest batches; see
docs/architecture/design-notes.md#anomaly-rows-on-the-wire), and scores
without explanations come back packed (``columnar_output``) and are spread into the same JSON
objects as per-row scores; the answers are the same either way.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf.message import Message
from universal_runtime.v1 import anomaly_pb2 as pb

from gateway.schemas.anomaly import STEP_CELLS, DetectBody, FitBody, FitSettings
from gateway.translate.common import proto_json

RowsRequest = pb.FitAnomalyDetectorRequest | pb.DetectAnomalyRequest


def _enum(enum_type: Any, prefix: str, name: str | None) -> int:
    return enum_type.Value(f"{prefix}{name.upper()}") if name else 0


def _fit_fields(body: FitSettings) -> dict[str, Any]:
    return {
        "backend": _enum(pb.AnomalyBackend, "ANOMALY_BACKEND_", body.backend),
        "schema": [
            pb.FeatureField(
                name=f.name,
                type=_enum(pb.FeatureType, "FEATURE_TYPE_", f.type),
                encoding=_enum(pb.CategoricalEncoding, "CATEGORICAL_ENCODING_", f.encoding),
            )
            for f in body.schema_
        ],
        "contamination": body.contamination or 0.0,
        "normalization": _enum(pb.Normalization, "NORMALIZATION_", body.normalization),
    }


def _numeric_rows(body: FitSettings, rows: list[list[float | str]]) -> tuple[int, list[float]] | None:
    """``(width, values)``: ``rows`` row-major when every cell is a finite number and every row has one width.

    ``None`` (send cells) otherwise, or when the schema declares categorical columns: the server's
    own checks then word any error about the cells.
    """
    if not rows or not rows[0] or any(field.type == "categorical" for field in body.schema_):
        return None
    width = len(rows[0])
    values: list[float] = []
    for row in rows:  # row by row: each C-level step is one row (MAX_COLUMNS cells at most)
        if len(row) != width:
            return None
        try:
            if not all(map(math.isfinite, row)):
                return None
        except TypeError:  # a string cell
            return None
        values.extend(row)  # type: ignore[arg-type]  # every cell is a number here
    return width, values


def _add_rows(request: RowsRequest, body: FitSettings, rows: list[list[float | str]]) -> None:
    """Put ``rows`` in ``request``: packed (``numeric_rows``) when they allow it, else a message per row.

    Added a row (or :data:`STEP_CELLS` packed values) at a time: the translation runs in a worker
    thread beside the event loop, and one protobuf call copying millions of values would hold the
    GIL, and so the loop, for all of them.
    """
    packed = _numeric_rows(body, rows)
    if packed is not None:
        width, values = packed
        request.numeric_rows.column_count = width
        for start in range(0, len(values), STEP_CELLS):
            request.numeric_rows.values.extend(values[start : start + STEP_CELLS])
        return
    for row in rows:
        request.rows.add(
            values=[
                pb.FeatureValue(string_value=v) if isinstance(v, str) else pb.FeatureValue(number_value=v)
                for v in row
            ]
        )


def to_fit_request(body: FitBody) -> pb.FitAnomalyDetectorRequest:
    """``FitBody`` → ``FitAnomalyDetectorRequest``."""
    request = pb.FitAnomalyDetectorRequest(detector=body.detector, shared=body.shared, **_fit_fields(body))
    _add_rows(request, body, body.rows)
    return request


def to_detect_request(body: DetectBody) -> pb.DetectAnomalyRequest:
    """``DetectBody`` → ``DetectAnomalyRequest`` (fit settings only matter for one-shot use).

    Without ``explain`` the scores are asked for packed (read them with :func:`detect_json`).
    """
    request = pb.DetectAnomalyRequest(
        detector=body.detector, explain=body.explain, columnar_output=not body.explain, **_fit_fields(body)
    )
    _add_rows(request, body, body.rows)
    if body.threshold is not None:
        request.threshold = body.threshold
    return request


_PREFIXES = (
    "ANOMALY_BACKEND_",
    "NORMALIZATION_",
    "FEATURE_TYPE_",
    "CATEGORICAL_ENCODING_",
    "STREAM_DETECTOR_STATE_",
)


def _names(value: Any) -> Any:
    """Enum names in lower case without their prefix, recursively."""
    if isinstance(value, dict):
        return {k: _names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_names(v) for v in value]
    if isinstance(value, str):
        for prefix in _PREFIXES:
            if value.startswith(prefix):
                return value.removeprefix(prefix).lower()
    return value


def to_json(message: Message) -> dict[str, Any]:
    """A response message as JSON with proto field names and friendly enum names."""
    return _names(proto_json(message))


def detect_json(response: pb.DetectAnomalyResponse) -> dict[str, Any]:
    """``DetectAnomalyResponse`` as JSON, whether the scores came packed or one message per row.

    Shape: ``{"scores": [{"index", "score", "normalized_score", "is_anomaly", "explanation"}],
    "summary": {"row_count", "anomaly_count", "anomaly_rate", "threshold"}}``.
    """
    columns = response.columns
    scores = list(columns.scores)
    normalized, flags = list(columns.normalized_scores), list(columns.is_anomaly)
    response.ClearField("columns")
    data = to_json(response)
    if scores:
        data["scores"] = [
            {"index": index, "score": score, "normalized_score": norm, "is_anomaly": flag, "explanation": []}
            for index, (score, norm, flag) in enumerate(zip(scores, normalized, flags, strict=True))
        ]
    return data
