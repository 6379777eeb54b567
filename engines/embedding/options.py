"""Catalog options of the sentence-transformers embedding backend (a light module: no torch)."""

from __future__ import annotations

from pydantic import PositiveFloat

from engines.batching.options import ExportableEncoderOptions
from engines.options import AtLeastOne

# Zero-shot softmax temperature over cosine similarities: cosines of related and unrelated
# texts differ by a few tenths, so they are sharpened before the softmax (CLIP-style logit scale).
DEFAULT_ZERO_SHOT_TEMPERATURE = 0.05


class SentenceTransformersOptions(ExportableEncoderOptions):
    """Options of ``sentence_transformers``: the encoder options, input length and zero-shot temperature."""

    max_seq_length: AtLeastOne | None = None
    """Longest input in tokens, special tokens included; unset: the model's own."""
    zero_shot_temperature: PositiveFloat = DEFAULT_ZERO_SHOT_TEMPERATURE
    """Softmax temperature over the cosine similarities of zero-shot classification (a cosine difference of
    0.05 is a factor e); lower is sharper."""
