"""Request bodies of ``POST /v1/classify`` and of the custom classifier routes ``/v1/classifiers``.

These are the runtime's own routes: unknown fields are refused (400).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.schemas.base import StrictRequestModel
from gateway.schemas.encoder_base import EncoderRequestModel, TextsRequestModel


class ClassifyRequest(TextsRequestModel, StrictRequestModel):
    """Body of ``POST /v1/classify``.

    Attributes:
        model: A catalog classifier, a custom classifier's name, or an embedding model with
            ``candidate_labels``.
        input: One text or a list of texts.
        multi_label: Score labels independently (sigmoid) and return every label over ``threshold``.
        all_scores: Return every label's score.
        threshold: With ``multi_label``, the score a label needs to be predicted (default 0.5).
        candidate_labels: Zero-shot labels (or label descriptions).
        truncation: ``"end"``, ``"start"`` or ``"error"`` for inputs over the model's length.
        keep_alive: Keep-alive override.

    """

    multi_label: bool = False
    all_scores: bool = False
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    candidate_labels: list[str] = Field(default_factory=list)
    truncation: Literal["end", "start", "error"] | bool | None = None


class ClassifierExample(StrictRequestModel):
    """One labelled example."""

    text: str
    label: str


class FitClassifierRequest(EncoderRequestModel, StrictRequestModel):
    """Body of ``POST /v1/classifiers``: fit and save a custom classifier.

    Attributes:
        name: Name to save it under (``[A-Za-z0-9._-]``); then usable as ``model`` in ``/v1/classify``.
        embedding_model: Catalog name of the embedding model.
        examples: Labelled examples, at least two labels.
        overwrite: Replace a classifier of the same name (in the same namespace).
        keep_alive: Keep-alive override of the embedding model.
        shared: Save it in the shared namespace every key may use (an admin key only, else 403);
            by default it is the calling key's own.

    """

    name: str
    embedding_model: str
    examples: list[ClassifierExample]
    overwrite: bool = False
    shared: bool = False
