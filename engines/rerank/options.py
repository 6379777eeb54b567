"""Catalog options of the cross-encoder rerank backend (a light module: no torch)."""

from __future__ import annotations

from pydantic import Field

from engines.batching.options import ExportableEncoderOptions


class CrossEncoderOptions(ExportableEncoderOptions):
    """Options of ``cross_encoder``: the encoder options plus the longest (query, document) pair."""

    max_length: int | None = Field(
        default=None,
        ge=1,
        description="Longest query+document pair in tokens; unset: the model's own, else the "
        "tokenizer's limit up to 512.",
    )
