"""Catalog options of the cross-encoder rerank backend (a light module: no torch)."""

from __future__ import annotations

from engines.batching.options import ExportableEncoderOptions
from engines.options import AtLeastOne


class CrossEncoderOptions(ExportableEncoderOptions):
    """Options of ``cross_encoder``: the encoder options plus the longest (query, document) pair."""

    max_length: AtLeastOne | None = None
    """Longest query+document pair in tokens; unset: the model's own, else the tokenizer's limit up to 512."""
