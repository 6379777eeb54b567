"""Anomaly JSON bodies ↔ anomaly protos (enum names in lower snake case, without their prefix)."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from universal_runtime.v1 import anomaly_pb2 as pb

from gateway.schemas.anomaly import DetectBody, FitBody, FitSettings
from gateway.translate.common import proto_json


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


def _rows(rows: list[list[float | str]]) -> list[pb.FeatureRow]:
    return [
        pb.FeatureRow(
            values=[
                pb.FeatureValue(string_value=v) if isinstance(v, str) else pb.FeatureValue(number_value=v)
                for v in row
            ]
        )
        for row in rows
    ]


def to_fit_request(body: FitBody) -> pb.FitAnomalyDetectorRequest:
    """``FitBody`` → ``FitAnomalyDetectorRequest``."""
    return pb.FitAnomalyDetectorRequest(detector=body.detector, rows=_rows(body.rows), **_fit_fields(body))


def to_detect_request(body: DetectBody) -> pb.DetectAnomalyRequest:
    """``DetectBody`` → ``DetectAnomalyRequest`` (fit settings only matter for one-shot use)."""
    request = pb.DetectAnomalyRequest(
        detector=body.detector, rows=_rows(body.rows), explain=body.explain, **_fit_fields(body)
    )
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
