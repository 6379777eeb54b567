"""Rerank, Classify, ExtractEntities and custom-classifier messages ↔ engine dataclasses, with validation."""

from __future__ import annotations

from universal_runtime.v1 import encoders_pb2

from engines.encoder_types import (
    Classification,
    ClassificationRequest,
    ClassificationResult,
    ClassifierInfo,
    Entity,
    EntityRequest,
    EntityResult,
    LabelScore,
    RerankRequest,
    RerankResult,
    validate_classifier_name,
)
from service.convert.embedding import truncation_policy
from service.convert.generation import usage_message
from service.convert.messages import MessageCopy
from service.convert.validation import check_range, require, require_texts
from service.tasks.classifiers import ClassifierFit

# Most candidate labels in one zero-shot request.
MAX_CANDIDATE_LABELS = 256


def rerank_request(request: encoders_pb2.RerankRequest, *, max_inputs: int) -> RerankRequest:
    """Validate and convert a RerankRequest.

    Raises:
        InvalidArgumentError: no model, empty query, no or empty documents, too many documents,
            negative top_n, unknown truncation.

    """
    require(bool(request.model), "model", "must be set")
    require(bool(request.query.strip()), "query", "must not be empty")
    documents = require_texts(request.documents, "documents", max_inputs)
    require(request.top_n >= 0, "top_n", f"must be >= 0, got {request.top_n}")
    return RerankRequest(
        query=request.query,
        documents=documents,
        top_n=request.top_n or None,
        return_documents=request.return_documents,
        truncation=truncation_policy(request.truncation),
    )


def rerank_response(model: str, result: RerankResult) -> encoders_pb2.RerankResponse:
    """Build the response: results sorted by relevance, highest first."""
    return encoders_pb2.RerankResponse(
        model=model,
        results=[
            encoders_pb2.RerankResult(
                index=r.index, relevance_score=r.relevance_score, document=r.document or ""
            )
            for r in result.results
        ],
        usage=usage_message(result.prompt_tokens, 0),
    )


def classification_request(
    request: encoders_pb2.ClassifyRequest, *, max_inputs: int
) -> ClassificationRequest:
    """Validate and convert a ClassifyRequest (threshold 0 means 0.5).

    Raises:
        InvalidArgumentError: no model, no or empty inputs, too many, threshold outside [0, 1],
            empty or duplicate candidate labels, too many candidate labels.

    """
    require(bool(request.model), "model", "must be set")
    inputs = require_texts(request.inputs, "inputs", max_inputs)
    check_range(request.threshold, "threshold", 0.0, 1.0)
    labels = list(request.candidate_labels)
    require(
        len(labels) <= MAX_CANDIDATE_LABELS,
        "candidate_labels",
        f"at most {MAX_CANDIDATE_LABELS} labels, got {len(labels)}",
    )
    for i, label in enumerate(labels):
        require(bool(label.strip()), f"candidate_labels[{i}]", "must not be empty")
    require(len(set(labels)) == len(labels), "candidate_labels", "labels must be distinct")
    return ClassificationRequest(
        inputs=inputs,
        multi_label=request.multi_label,
        all_scores=request.all_scores,
        threshold=request.threshold or 0.5,
        candidate_labels=labels,
        truncation=truncation_policy(request.truncation),
    )


_LABEL_SCORE = MessageCopy(encoders_pb2.LabelScore, LabelScore)
_CLASSIFICATION = MessageCopy(
    encoders_pb2.Classification, Classification, given=("index", "predicted_labels", "scores")
)
_ENTITY = MessageCopy(encoders_pb2.Entity, Entity)
_CLASSIFIER = MessageCopy(encoders_pb2.ClassifierInfo, ClassifierInfo)


def _label_scores(items: list[LabelScore]) -> list[encoders_pb2.LabelScore]:
    return [_LABEL_SCORE(item) for item in items]


def classify_response(model: str, result: ClassificationResult) -> encoders_pb2.ClassifyResponse:
    """Build the response: one Classification per input, in order."""
    return encoders_pb2.ClassifyResponse(
        model=model,
        classifications=[
            _CLASSIFICATION(
                c,
                index=i,
                predicted_labels=_label_scores(c.predicted_labels),
                scores=_label_scores(c.scores),
            )
            for i, c in enumerate(result.classifications)
        ],
        usage=usage_message(result.prompt_tokens, 0),
    )


def entity_request(request: encoders_pb2.ExtractEntitiesRequest, *, max_inputs: int) -> EntityRequest:
    """Validate and convert an ExtractEntitiesRequest.

    Raises:
        InvalidArgumentError: no model, no or empty inputs, too many, min_score outside [0, 1].

    """
    require(bool(request.model), "model", "must be set")
    inputs = require_texts(request.inputs, "inputs", max_inputs)
    check_range(request.min_score, "min_score", 0.0, 1.0)
    return EntityRequest(inputs=inputs, min_score=request.min_score, labels=[x for x in request.labels if x])


def entities_response(model: str, result: EntityResult) -> encoders_pb2.ExtractEntitiesResponse:
    """Build the response: one EntityList per input, in order."""
    return encoders_pb2.ExtractEntitiesResponse(
        model=model,
        results=[
            encoders_pb2.EntityList(
                index=i,
                entities=[_ENTITY(e) for e in entities],
            )
            for i, entities in enumerate(result.entities)
        ],
        usage=usage_message(result.prompt_tokens, 0),
    )


def fit_request(request: encoders_pb2.FitClassifierRequest, *, max_examples: int) -> ClassifierFit:
    """Validate a FitClassifierRequest.

    Raises:
        InvalidArgumentError: invalid name, no embedding model, no examples, too many, an empty text or label,
            fewer than two distinct labels.

    """
    validate_classifier_name(request.name)
    require(bool(request.embedding_model), "embedding_model", "must be set")
    require(len(request.examples) > 0, "examples", "must contain labelled examples")
    require(
        len(request.examples) <= max_examples,
        "examples",
        f"at most {max_examples} examples, got {len(request.examples)}",
    )
    texts, labels = [], []
    for i, example in enumerate(request.examples):
        require(bool(example.text.strip()), f"examples[{i}].text", "must not be empty")
        require(bool(example.label.strip()), f"examples[{i}].label", "must not be empty")
        texts.append(example.text)
        labels.append(example.label)
    distinct = sorted(set(labels))
    require(
        len(distinct) >= 2,
        "examples",
        f"need examples of at least two labels, got {len(distinct)} ({', '.join(distinct)})",
    )
    return ClassifierFit(
        name=request.name,
        embedding_model=request.embedding_model,
        texts=texts,
        labels=labels,
        overwrite=request.overwrite,
        keep_alive=request.keep_alive or None,
        shared=request.shared,
    )


def classifier_message(info: ClassifierInfo) -> encoders_pb2.ClassifierInfo:
    """Describe a saved custom classifier."""
    return _CLASSIFIER(info)


def classifiers_response(infos: list[ClassifierInfo]) -> encoders_pb2.ListClassifiersResponse:
    """The saved custom classifiers, in the order given."""
    return encoders_pb2.ListClassifiersResponse(classifiers=[classifier_message(i) for i in infos])
