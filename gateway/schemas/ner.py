"""Request body of ``POST /v1/ner`` (named-entity recognition); unknown fields are refused (400)."""

from __future__ import annotations

from pydantic import Field

from gateway.schemas.base import StrictRequestModel
from gateway.schemas.encoder_base import TextsRequestModel


class NerRequest(TextsRequestModel, StrictRequestModel):
    """Body of ``POST /v1/ner``.

    Attributes:
        model: Catalog name of the NER model.
        input: One text or a list of texts.
        min_score: Drop entities scoring below this, in [0, 1].
        labels: Keep only these entity labels (all when empty).
        keep_alive: Keep-alive override.

    """

    min_score: float = Field(default=0.0, ge=0.0, le=1.0)
    labels: list[str] = Field(default_factory=list)
