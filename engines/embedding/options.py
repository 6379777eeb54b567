"""Catalog options of the sentence-transformers embedding backend (a light module: no torch)."""

from __future__ import annotations

from typing import Annotated

from pydantic import PositiveFloat

from engines.batching.options import ExportableEncoderOptions
from engines.options import MAX_BATCH_OVERRIDE, AtLeastOne, LoadOverride

# Zero-shot softmax temperature over cosine similarities: cosines of related and unrelated
# texts differ by a few tenths, so they are sharpened before the softmax (CLIP-style logit scale).
DEFAULT_ZERO_SHOT_TEMPERATURE = 0.05


class SentenceTransformersOptions(ExportableEncoderOptions):
    """Options of ``sentence_transformers``: the encoder options, input length and zero-shot temperature."""

    max_seq_length: Annotated[AtLeastOne | None, LoadOverride(at_most=MAX_BATCH_OVERRIDE)] = None
    """Longest input in tokens, special tokens included; unset: the model's own."""
    zero_shot_temperature: Annotated[PositiveFloat, LoadOverride(at_most=100)] = DEFAULT_ZERO_SHOT_TEMPERATURE
    """Softmax temperature over the cosine similarities of zero-shot classification (a cosine difference of
    0.05 is a factor e); lower is sharper."""
