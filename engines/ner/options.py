"""Catalog options of the NER backends (a light module: no torch, no spaCy)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import NonNegativeInt

from engines.batching.options import EncoderOptions
from engines.options import OVERRIDE, AtLeastOne, EngineOptions, LoadOverride

# The pipeline reads a whole text in overlapping windows, so its time grows with the text: this
# bounds one call to seconds of a BERT-base model on CPU.
MAX_INPUT_CHARS = 100_000
# spaCy components the ner component does not need (skipped unless the catalog says otherwise).
SPACY_DISABLED = ("parser", "lemmatizer", "tagger", "attribute_ruler", "senter")


class TransformersNerOptions(EncoderOptions):
    """Options of ``transformers_ner``: the encoder options (torch only), entity merging, text length."""

    aggregation: Annotated[Literal["simple", "first", "average", "max"], OVERRIDE] = "simple"
    """How sub-word predictions merge into entities: simple (adjacent tokens of one entity), first, average
    or max (these three keep words whole)."""
    stride: Annotated[NonNegativeInt, LoadOverride(at_most=4096)] = 16
    """Tokens of overlap between the windows of a text longer than the model's maximum length."""
    max_input_chars: Annotated[AtLeastOne, LoadOverride(at_most=MAX_INPUT_CHARS)] = MAX_INPUT_CHARS
    """Longest text accepted, in characters; longer ones are refused (INVALID_ARGUMENT)."""


class SpacyOptions(EngineOptions):
    """Options of ``spacy``: pipe batch size and the components skipped."""

    batch_size: Annotated[AtLeastOne, LoadOverride(at_most=4096)] = 64
    """Texts per nlp.pipe batch."""
    disable: tuple[str, ...] = SPACY_DISABLED
    """Pipeline components to skip (names the pipeline lacks are ignored); default: every component ner
    does not need."""
