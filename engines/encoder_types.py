"""Dataclasses of the encoder tasks besides embeddings: rerank, classify, saved classifiers, entities."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engines.errors import InvalidArgumentError
from engines.reasons import Reason
from engines.types import Truncation


@dataclass(slots=True, kw_only=True)
class EncoderResult:
    """What every encoder result reports besides its items.

    Attributes:
        prompt_tokens: tokens the model read for the whole request (the usage reported to clients).

    """

    prompt_tokens: int


@dataclass(slots=True)
class RerankRequest:
    """Rank ``documents`` by relevance to ``query`` (both non-empty).

    ``top_n`` None returns every document.
    """

    query: str
    documents: list[str]
    top_n: int | None = None
    return_documents: bool = False
    truncation: Truncation = Truncation.END


@dataclass(slots=True)
class RankedDocument:
    """One document's place: its position in the request, its score, and its text on request."""

    index: int
    relevance_score: float
    document: str | None = None


@dataclass(slots=True)
class RerankResult(EncoderResult):
    """Documents sorted by ``relevance_score`` (highest first)."""

    results: list[RankedDocument]


@dataclass(slots=True)
class ClassificationRequest:
    """Classify ``inputs``.

    Attributes:
        inputs: non-empty texts.
        multi_label: score each label on its own (sigmoid) instead of one distribution (softmax).
        all_scores: return every label's score.
        threshold: with ``multi_label``, labels scoring at least this are predicted.
        candidate_labels: zero-shot labels (or label descriptions); empty for a trained classifier.
        truncation: handling of inputs over the model's maximum length.

    """

    inputs: list[str]
    multi_label: bool = False
    all_scores: bool = False
    threshold: float = 0.5
    candidate_labels: list[str] = field(default_factory=list)
    truncation: Truncation = Truncation.END


@dataclass(slots=True)
class LabelScore:
    """A label and its score in [0, 1]."""

    label: str
    score: float


@dataclass(slots=True)
class Classification:
    """Result for one input: the top label, the predicted labels (multi-label) and all scores on request."""

    label: str
    score: float
    predicted_labels: list[LabelScore] = field(default_factory=list)
    scores: list[LabelScore] = field(default_factory=list)


@dataclass(slots=True)
class ClassificationResult(EncoderResult):
    """One :class:`Classification` per input, in order."""

    classifications: list[Classification]


@dataclass(slots=True)
class EntityRequest:
    """Entities to find in ``inputs``: scoring >= ``min_score``, labelled in ``labels`` (any if empty)."""

    inputs: list[str]
    min_score: float = 0.0
    labels: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Entity:
    """An entity: ``text == input[start:end]`` (code-point offsets, end exclusive), label, score in [0, 1]."""

    text: str
    label: str
    start: int
    end: int
    score: float = 1.0


@dataclass(slots=True)
class EntityResult(EncoderResult):
    """Entities of each input, in order of appearance."""

    entities: list[list[Entity]]


@dataclass(slots=True)
class ClassifierInfo:
    """What a saved classifier is (the ``<name>.json`` file).

    ``shared`` is not in the file: it says which namespace the classifier was found in (the
    shared one every key may use, or the calling key's own; :mod:`engines.owners`).
    """

    name: str
    embedding_model: str
    labels: list[str]
    example_count: int
    created_at_unix_ms: int
    training_accuracy: float
    shared: bool = False


# Like model names but one segment only: no '/', no '..', no leading dot.
CLASSIFIER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def validate_classifier_name(name: str) -> str:
    """Return ``name`` if it can name a classifier file.

    Raises:
        InvalidArgumentError: empty, over 128 characters, or characters outside ``[A-Za-z0-9._-]``
            (reason INVALID_CLASSIFIER_NAME).

    """
    if not CLASSIFIER_NAME.fullmatch(name or "") or ".." in name:
        raise InvalidArgumentError(
            f"invalid classifier name {name!r}: use 1-128 characters of [A-Za-z0-9._-], starting with a "
            "letter or digit; paths are not allowed",
            reason=Reason.INVALID_CLASSIFIER_NAME,
            field="name",
            name=name,
        )
    return name
