"""Catalog options of the cross-encoder rerank backend (a light module: no torch)."""

from __future__ import annotations

from typing import Annotated

from engines.batching.options import ExportableEncoderOptions
from engines.options import MAX_BATCH_OVERRIDE, AtLeastOne, LoadOverride


class CrossEncoderOptions(ExportableEncoderOptions):
    """Options of ``cross_encoder``: the encoder options plus the longest (query, document) pair."""

    max_length: Annotated[AtLeastOne | None, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = None
    """Longest query+document pair in tokens; unset: the model's own, else the tokenizer's limit up to 512."""
