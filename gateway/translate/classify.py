"""Classify and custom classifiers: JSON bodies to protos and back.

``POST /v1/classify`` answers::

    {"object": "list", "model": str,
     "data": [{"object": "classification", "index": int, "label": str, "score": float,
               "predicted_labels": [{"label", "score"}], "scores": [{"label", "score"}]}],
     "usage": {"prompt_tokens": int, "total_tokens": int}}

``predicted_labels`` only with ``multi_label``; ``scores`` only with ``all_scores``.
"""

from __future__ import annotations

from typing import Any

from universal_runtime.v1 import encoders_pb2

from gateway.schemas.classify import ClassifyRequest, FitClassifierRequest
from gateway.translate.common import BodyFields
from gateway.translate.encoders import TRUNCATION_POLICIES, list_json, texts_fields

_CLASSIFY = BodyFields(
    ClassifyRequest,
    encoders_pb2.ClassifyRequest,
    ("multi_label", "all_scores", "threshold", "candidate_labels"),
    by_hand=("model", "input", "keep_alive", "truncation"),
)


def to_classify_request(request: ClassifyRequest) -> encoders_pb2.ClassifyRequest:
    """Convert the HTTP body to ``ClassifyRequest`` (threshold unset means the server's 0.5)."""
    return encoders_pb2.ClassifyRequest(
        **texts_fields(request),
        **_CLASSIFY.values(request),
        truncation=TRUNCATION_POLICIES[request.truncation],
    )


def _label_scores(items) -> list[dict[str, Any]]:
    return [{"label": item.label, "score": item.score} for item in items]


def classify_from_proto(
    response: encoders_pb2.ClassifyResponse, *, requested_model: str, multi_label: bool, all_scores: bool
) -> dict[str, Any]:
    """Convert ``ClassifyResponse`` to the JSON list shown in the module docstring."""
    data = []
    for item in response.classifications:
        entry: dict[str, Any] = {
            "object": "classification",
            "index": item.index,
            "label": item.label,
            "score": item.score,
        }
        if multi_label:
            entry["predicted_labels"] = _label_scores(item.predicted_labels)
        if all_scores:
            entry["scores"] = _label_scores(item.scores)
        data.append(entry)
    return list_json(response, requested_model=requested_model, data=data)


def to_fit_classifier_request(request: FitClassifierRequest) -> encoders_pb2.FitClassifierRequest:
    """Convert the HTTP body to ``FitClassifierRequest``."""
    return encoders_pb2.FitClassifierRequest(
        name=request.name,
        embedding_model=request.embedding_model,
        examples=[encoders_pb2.ClassifierExample(text=x.text, label=x.label) for x in request.examples],
        overwrite=request.overwrite,
        keep_alive=request.keep_alive_value,
        shared=request.shared,
    )


def classifier_json(info: encoders_pb2.ClassifierInfo) -> dict[str, Any]:
    """A saved classifier as JSON: ``{"object": "classifier", "name", "embedding_model", ..., "shared"}``."""
    return {
        "object": "classifier",
        "name": info.name,
        "embedding_model": info.embedding_model,
        "labels": list(info.labels),
        "example_count": info.example_count,
        "created_at_unix_ms": info.created_at_unix_ms,
        "training_accuracy": info.training_accuracy,
        "shared": info.shared,
    }
